/**
 * Bug hunt: whole agent sessions through a server with several workers, the way agent clients drive
 * them (the real openai client: chat turns that end in tool calls answered by `tool` messages,
 * streamed and not). Each later turn finds the session's KV on the worker that holds it, the answers
 * are one engine's, a session waiting on a tool keeps its KV over an idle one under pressure (the
 * workers' agent-aware retention, told by the cluster), a client that hangs up mid-stream frees the
 * KV on every worker and its session goes on, and /metrics adds up across the workers.
 */
import assert from "node:assert/strict";
import OpenAI from "openai";
import { loadModel } from "../../src/model/load.ts";
import { startServer } from "../../src/serve/server.ts";
import { eventually } from "../eventually.ts";
import { projectRoot, test } from "../harness.ts";
import { model, modelPath, pressureKv, TOOLS } from "./scripted-server.ts";

type Msg = OpenAI.ChatCompletionMessageParam;
type Call = OpenAI.Chat.Completions.ChatCompletionMessageFunctionToolCall;
const filler = (tag: string, n: number) => `${tag} ${"qv".repeat(Math.ceil(n / 2))}`.slice(0, n);

/** One turn as the client sees it: the assistant message (calls rebuilt from the stream's deltas) and its usage. */
async function turn(client: OpenAI, key: string, messages: Msg[], stream: boolean): Promise<{ msg: { role: "assistant"; content: string | null; tool_calls?: Call[] }; usage: OpenAI.CompletionUsage }> {
  const body = { model: "scripted", messages, tools: TOOLS, temperature: 0, max_tokens: 8, prompt_cache_key: key };
  if (!stream) {
    const r = await client.chat.completions.create(body);
    const m = r.choices[0].message;
    return { msg: { role: "assistant", content: m.content, ...(m.tool_calls ? { tool_calls: m.tool_calls as Call[] } : {}) }, usage: r.usage! };
  }
  const chunks = await client.chat.completions.create({ ...body, stream: true, stream_options: { include_usage: true } });
  let content = "";
  let usage: OpenAI.CompletionUsage | undefined;
  const calls: Call[] = [];
  for await (const c of chunks) {
    content += c.choices[0]?.delta.content ?? "";
    for (const d of c.choices[0]?.delta.tool_calls ?? []) {
      calls[d.index] ??= { id: d.id!, type: "function", function: { name: "", arguments: "" } };
      calls[d.index].function.name += d.function?.name ?? "";
      calls[d.index].function.arguments += d.function?.arguments ?? "";
    }
    usage = c.usage ?? usage;
  }
  return { msg: { role: "assistant", content: content || null, ...(calls.length ? { tool_calls: calls } : {}) }, usage: usage! };
}

/**
 * Drives sessions A, B, C side by side for 4 turns each (B streamed): a call, a call, a final answer,
 * a call. Returns what each turn answered and its cached tokens.
 */
async function agents(url: string): Promise<Map<string, { answer: string; prompt: number; cached: number }[]>> {
  const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: "none", maxRetries: 0 });
  const out = new Map<string, { answer: string; prompt: number; cached: number }[]>();
  await Promise.all(["A", "B", "C"].map(async (key) => {
    const messages: Msg[] = [{ role: "user", content: `${filler(key, 100 + 40 * key.charCodeAt(0) % 3)} weather!` }];
    const turns: { answer: string; prompt: number; cached: number }[] = [];
    for (let t = 0; t < 4; t++) {
      const { msg, usage } = await turn(client, key, messages, key === "B");
      turns.push({ answer: msg.tool_calls ? `call ${msg.tool_calls[0].function.name} ${msg.tool_calls[0].function.arguments}` : String(msg.content), prompt: usage.prompt_tokens, cached: usage.prompt_tokens_details!.cached_tokens! });
      messages.push(msg);
      if (msg.tool_calls) messages.push({ role: "tool", tool_call_id: msg.tool_calls[0].id, content: t === 1 ? "18 degrees." : "18 degrees!" });
      else messages.push({ role: "user", content: "and tomorrow!" });
    }
    out.set(key, turns);
  }));
  return out;
}

test("Agent sessions on 2 workers: each later turn hits the cache on the session's worker, answers are one engine's, and /metrics adds up", async () => {
  const one = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 64 });
  let single: Awaited<ReturnType<typeof agents>>;
  try {
    single = await agents(one.url);
  } finally {
    await one.shutdown();
  }
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 64, workers: 2, planner: "none" });
  try {
    const c = s.cluster!;
    // Which worker each session's turns ran on, in order.
    const ranOn = new Map<string, string[]>();
    for (const w of c.workers) {
      const submit = w.engine.submit.bind(w.engine);
      w.engine.submit = (req) => {
        if (req.sessionId !== undefined) ranOn.set(req.sessionId, [...(ranOn.get(req.sessionId) ?? []), w.engine.id]);
        return submit(req);
      };
    }
    const got = await agents(s.url);
    for (const [key, turns] of got) {
      assert.deepEqual(turns.map((t) => t.answer), single.get(key)!.map((t) => t.answer), `session ${key}: the cluster answers as one engine does`);
      assert.deepEqual(turns.map((t) => t.answer.split(" ")[0]), ["call", "call", "Sunny.", "call"]);
      for (let t = 1; t < turns.length; t++) {
        assert.ok(turns[t].cached > turns[t - 1].cached, `session ${key} turn ${t}: ${turns[t].cached} cached tokens after ${turns[t - 1].cached}`);
        assert.ok(turns[t].cached >= turns[t - 1].prompt - 16, `session ${key} turn ${t} found its previous prompt (${turns[t].cached} of ${turns[t - 1].prompt})`);
      }
      // Affinity weighs load: queued prompts, the batch and measured step times (planner/routers.ts: a
      // step slower than 0.8 of the ITL target is overload). On a loaded CI machine a holder's slow steps send turns
      // elsewhere (Deno and Node runs went w0 w0 w1 w1 and w0 w1 w1 w0), so which worker a turn ran on
      // depends on the machine's speed and is not checked here (tests/planner/routers.test.ts checks the
      // affinity itself). What must hold wherever a turn ran: every turn went to a worker with its
      // session named, and found its previous prompt there (the cached tokens above: the prefix follows).
      const on = ranOn.get(key) ?? [];
      assert.equal(on.length, turns.length, `session ${key}'s turns were each placed as the session's: ${on.join(", ")}`);
    }
    // Every session's last turn called a tool: three sessions wait, on the workers that hold them.
    const metrics = await (await fetch(`${s.url}/metrics`)).text();
    const value = (re: RegExp) => [...metrics.matchAll(re)].map((m) => Number(m[1]));
    assert.deepEqual(value(/evolving:kv_sessions\{model_name="scripted",status="waiting-tool"\} (\S+)/g), [3]);
    assert.deepEqual(value(/evolving:kv_sessions\{model_name="scripted",status="running"\} (\S+)/g), [0]);
    // (The worker of each session's last turn holds its wait.)
    for (const [key, workers] of ranOn) assert.equal(c.workers.find((w) => w.engine.id === workers.at(-1))!.engine.sessionStatusCounts()!["waiting-tool"] > 0, true, `${key}'s worker holds a waiting session`);
    const perWorker = value(/evolving:worker_kv_sessions\{model_name="scripted",worker="[^"]+",status="waiting-tool"\} (\S+)/g);
    assert.equal(perWorker.reduce((a, b) => a + b, 0), 3, "the per-worker series add up to the cluster's");
    assert.deepEqual(value(/vllm:request_success_total\{model_name="scripted",finished_reason="stop"\} (\S+)/g), [12]);
    const gauges = [...metrics.matchAll(/^(?:vllm|evolving):\S+ (-?[\d.e+-]+)$/gm)].map((m) => Number(m[1]));
    assert.ok(gauges.length > 10 && gauges.every((v) => v >= 0), "no negative series");
  } finally {
    await s.shutdown();
  }
});

test("Agent sessions on 2 workers: under KV pressure the tool-waiting session keeps its prefix over the idle one (as on one engine)", async () => {
  const POOL = 64;
  const BS = 16;
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: POOL, workers: 2, roles: ["prefill", "decode"], planner: "none" });
  try {
    const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 });
    const dec = s.cluster!.workers[1].engine;
    const aMsgs: Msg[] = [{ role: "user", content: `${filler("alpha", 120)} weather in Paris!` }];
    const a1 = await turn(client, "session-a", aMsgs, true);
    assert.equal(a1.msg.tool_calls?.length, 1);
    const bMsgs: Msg[] = [{ role: "user", content: `${filler("bravo", 320)} thanks.` }];
    const b1 = await turn(client, "session-b", bMsgs, false);
    assert.equal(b1.msg.content, "Sunny.");
    assert.deepEqual(dec.sessionStatusCounts(), { running: 0, "waiting-tool": 1, idle: 1 }, "the decoding worker was told A waits on its tool");
    const aBlocks = Math.floor((a1.usage.prompt_tokens + 3) / BS);
    const bBlocks = Math.floor((b1.usage.prompt_tokens + 2) / BS) - 1; // less the first block, shared with A
    await pressureKv(client, "scripted", POOL - aBlocks - bBlocks, aBlocks + 2, BS);
    const b2 = await turn(client, "session-b", [...bMsgs, b1.msg, { role: "user", content: "and tomorrow." }], false);
    const call = a1.msg.tool_calls![0];
    const a2 = await turn(client, "session-a", [...aMsgs, a1.msg, { role: "tool", tool_call_id: call.id, content: "18 degrees." }], true);
    const a = a2.usage.prompt_tokens_details!.cached_tokens!;
    const b = b2.usage.prompt_tokens_details!.cached_tokens!;
    assert.ok(a >= (aBlocks - 2) * BS, `A's second turn found ${a} cached tokens of ${aBlocks * BS}`);
    assert.ok(b <= (bBlocks - aBlocks + 1) * BS, `B (idle) paid for the pressure: it found ${b} cached tokens of ${(bBlocks + 1) * BS}`);
  } finally {
    await s.shutdown();
  }
});

const storiesPath = `${projectRoot}/models/stories260K.gguf`;
const stories = await loadModel(storiesPath);

test("A client that hangs up mid-stream on a prefill/decode split frees the KV on every worker, and its session goes on", async () => {
  const s = await startServer({
    modelPath: storiesPath, model: stories, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 64, workers: 3,
    roles: ["prefill", "decode", "decode"], router: "kv-aware", localPrefillTokens: 8, planner: "none",
  });
  try {
    const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 });
    const messages: Msg[] = [{ role: "user", content: "Once upon a time there was a little girl named Lily. She loved to play." }];
    const ctl = new AbortController();
    const chunks = await client.chat.completions.create({ model: "stories260K", messages, max_tokens: 200, temperature: 0, prompt_cache_key: "s1", stream: true }, { signal: ctl.signal });
    let text = "";
    let n = 0;
    try {
      for await (const c of chunks) {
        text += c.choices[0]?.delta.content ?? "";
        if (++n === 5) ctl.abort();
      }
    } catch {
      // the client's own abort (the openai client may also just end the iteration)
    }
    assert.ok(n >= 5 && n < 100, `the client hung up after ${n} chunks`);
    // The cancel reaches the decoding worker; its KV goes back.
    // (Poll; the deadline only turns a hang into a failure, generous for a loaded CI machine.)
    await eventually(() => s.cluster!.workers.some((w) => w.engine.stats().running > 0 || w.engine.stats().kvUsedBlocks > 0), (busy) => !busy, undefined, 20);
    for (const w of s.cluster!.workers) assert.equal(w.engine.stats().kvUsedBlocks, 0, `${w.engine.id} holds no KV after the cancel`);
    messages.push({ role: "assistant", content: text }, { role: "user", content: "And then?" });
    const again = await client.chat.completions.create({ model: "stories260K", messages, max_tokens: 20, temperature: 0, prompt_cache_key: "s1" });
    assert.equal(again.usage!.completion_tokens, 20);
    assert.ok(again.usage!.prompt_tokens_details!.cached_tokens! >= 16, "the session's next turn found its KV");
    const streamed = await client.chat.completions.create({ model: "stories260K", messages, max_tokens: 20, temperature: 0, prompt_cache_key: "s1", stream: true });
    let same = "";
    for await (const c of streamed) same += c.choices[0]?.delta.content ?? "";
    assert.equal(same, again.choices[0].message.content, "streamed and whole answers agree");
    const metrics = await (await fetch(`${s.url}/metrics`)).text();
    assert.match(metrics, /vllm:request_success_total\{model_name="stories260K",finished_reason="abort"\} 1\n/);
    assert.match(metrics, /vllm:request_success_total\{model_name="stories260K",finished_reason="length"\} 2\n/);
    assert.match(metrics, /vllm:num_requests_running\{model_name="stories260K"\} 0\n/);
    assert.match(metrics, /evolving:prefill_handoffs_total\{model_name="stories260K"\} [1-9]/);
  } finally {
    await s.shutdown();
  }
});
