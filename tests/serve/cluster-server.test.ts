/** A server with several workers (`--workers`) as a client sees it: the real openai client over HTTP. */
import assert from "node:assert/strict";
import OpenAI from "openai";
import { eventually } from "../eventually.ts";
import { projectRoot, test } from "../harness.ts";
import { loadModel } from "../../src/model/load.ts";
import { startServer } from "../../src/serve/server.ts";
import type { PlannerAction } from "../../planner/types.ts";

const modelPath = `${projectRoot}/models/stories260K.gguf`;
const model = await loadModel(modelPath);
const STORY = "Once upon a time there was a little girl named Lily. She loved to play outside in the park with her friends.";

for (const transport of ["in-process", "threads"] as const) test(`startServer({ workers, transport: "${transport}" }) serves a session's turns across workers with the openai client and shows each worker in /metrics`, async () => {
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 64, workers: 3, roles: ["prefill", "decode", "mixed"], transport });
  try {
    assert.ok(s.cluster);
    const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 });
    const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: "user", content: STORY }];
    const first = await client.chat.completions.create({ model: "stories260K", messages, max_tokens: 10, temperature: 0, prompt_cache_key: "agent-1" });
    assert.equal(first.usage!.completion_tokens, 10);
    messages.push(first.choices[0].message, { role: "user", content: "And then?" });
    const stream = await client.chat.completions.create({
      model: "stories260K", messages, max_tokens: 10, temperature: 0, prompt_cache_key: "agent-1", stream: true, stream_options: { include_usage: true },
    });
    let text = "";
    let usage: OpenAI.CompletionUsage | undefined;
    for await (const c of stream) {
      text += c.choices[0]?.delta.content ?? "";
      usage = c.usage ?? usage;
    }
    assert.ok(usage!.prompt_tokens_details!.cached_tokens! > 0, "the second turn reused the first turn's KV");
    const again = await client.chat.completions.create({ model: "stories260K", messages, max_tokens: 10, temperature: 0, prompt_cache_key: "agent-1" });
    assert.equal(again.choices[0].message.content, text, "streamed and non-streamed greedy answers agree across workers");
    assert.equal(s.cluster.workers[0].engine.metrics.finished.get("length") ?? 0, 0, "no whole request ran on the prefill worker");

    const metrics = await (await fetch(`${s.url}/metrics`)).text();
    assert.match(metrics, /evolving:worker_role\{model_name="stories260K",worker="worker-0",role="prefill"\} 1/);
    assert.match(metrics, /evolving:worker_role\{model_name="stories260K",worker="worker-1",role="decode"\} 1/);
    assert.match(metrics, /evolving:worker_kv_sessions\{model_name="stories260K",worker="worker-1",status="[a-z-]+"\} 1/, "the decoding worker tracks the session");
    assert.match(metrics, /evolving:worker_draining\{model_name="stories260K",worker="worker-0"\} 0/);
    assert.match(metrics, /vllm:request_success_total\{model_name="stories260K",finished_reason="length"\} 3/);
    assert.match(metrics, /vllm:prompt_tokens_total\{model_name="stories260K"\} \d+/);
    assert.match(metrics, /vllm:time_to_first_token_seconds_count\{model_name="stories260K"\} 3/);

    const bad = await fetch(`${s.url}/v1/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "stories260K", prompt: "x".repeat(5000), max_tokens: 5 }) });
    assert.equal(bad.status, 400, "a prompt over the context is the client's mistake");

    // Sampling adjustments travel with the request to the workers (prefill on one, decode on another).
    const forcedToken = model.tokenizer.encode(" Lily", { addBos: false }).at(-1)!;
    const forced = await client.completions.create({ model: "stories260K", prompt: STORY, max_tokens: 5, temperature: 0, logit_bias: { [forcedToken]: 100 } });
    assert.equal(forced.choices[0].text, model.tokenizer.decode(Array(5).fill(forcedToken)));
    // So does an output grammar: the answer is a whole value of the schema.
    const schema = { type: "object", properties: { mood: { enum: ["happy", "sad"] } }, required: ["mood"], additionalProperties: false };
    const typed = await client.chat.completions.create({
      model: "stories260K", messages: [{ role: "user", content: STORY }], max_tokens: 60, temperature: 0,
      response_format: { type: "json_schema", json_schema: { name: "mood", schema } },
    });
    assert.ok(["happy", "sad"].includes((JSON.parse(typed.choices[0].message.content!) as { mood: string }).mood), typed.choices[0].message.content!);
    // Its forced text (the key's tail, the enum value's) was jumped on the worker, and counted.
    const after = await (await fetch(`${s.url}/metrics`)).text();
    assert.match(after, /evolving:jump_forward_tokens_total\{model_name="stories260K"\} [1-9]\d*/);

    // The Responses API through the cluster: text.format's schema holds, and a turn chained by
    // previous_response_id (one session, no key given) finds the first turn's KV on the workers.
    const format = { type: "json_schema" as const, name: "mood", schema };
    const turn1 = await client.responses.create({ model: "stories260K", input: STORY, text: { format }, max_output_tokens: 60, temperature: 0 });
    assert.ok(["happy", "sad"].includes((JSON.parse(turn1.output_text) as { mood: string }).mood), turn1.output_text);
    const turn2 = await client.responses.create({ model: "stories260K", previous_response_id: turn1.id, input: "And then?", max_output_tokens: 5, temperature: 0 });
    assert.equal(turn2.status, "incomplete", "cut by max_output_tokens");
    assert.ok(turn2.usage!.input_tokens > turn1.usage!.input_tokens + turn1.usage!.output_tokens);
    assert.ok(turn2.usage!.input_tokens_details.cached_tokens > 0, "the chained turn reused the first turn's KV");
    // So does a turn of a conversation (/v1/conversations): the conversation is the session.
    const conv = await client.conversations.create({ items: [{ type: "message", role: "user", content: STORY }] });
    const c1 = await client.responses.create({ model: "stories260K", conversation: conv.id, input: "What happened?", max_output_tokens: 5, temperature: 0 });
    const c2 = await client.responses.create({ model: "stories260K", conversation: conv.id, input: "And then?", max_output_tokens: 5, temperature: 0 });
    assert.ok(c2.usage!.input_tokens > c1.usage!.input_tokens + c1.usage!.output_tokens, "the conversation holds the first turn");
    assert.ok(c2.usage!.input_tokens_details.cached_tokens >= c1.usage!.input_tokens - 16, "the second turn found the first's prompt on a worker");
  } finally {
    await s.shutdown();
  }
});

test("startServer() answers a new session its planner has no room for with 503 overloaded and Retry-After, and keeps serving the sessions it has", async () => {
  // A planner whose every tick (each second) leaves no room for new sessions, once the test has had its
  // first session served (a loaded machine can take more than the first second to serve it).
  let full = false;
  let ticks = 0;
  const admission = { kind: "admission" as const, holdNewSessions: false, maxHoldS: 0, newSessions: 0, rejectAfterHold: true };
  const planner = { name: "full", intervalS: 1, tick: () => (full ? (ticks++, [admission]) : []) };
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 64, workers: 2, planner });
  try {
    const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 });
    const ask = (key: string) => client.chat.completions.create({ model: "stories260K", messages: [{ role: "user", content: STORY }], max_tokens: 3, prompt_cache_key: key });
    assert.equal((await ask("agent-1")).usage!.completion_tokens, 3, "before the planner's first word every session gets in");
    full = true;
    // Until its next tick (within a second; a loaded machine's timers run late): counted, not slept for.
    await eventually(() => ticks, (n) => n > 0, 60_000, 50);
    const refused = await fetch(`${s.url}/v1/chat/completions`, {
      method: "POST", headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "stories260K", messages: [{ role: "user", content: STORY }], max_tokens: 3, prompt_cache_key: "agent-2" }),
    });
    assert.equal(refused.status, 503);
    assert.equal(refused.headers.get("retry-after"), "1");
    const body = await refused.json() as { error: { code: string; message: string } };
    assert.equal(body.error.code, "overloaded");
    assert.match(body.error.message, /No room for new session "agent-2".*Retry later/);
    await assert.rejects(ask("agent-3"), (e: unknown) => e instanceof OpenAI.APIError && e.status === 503);
    assert.equal((await ask("agent-1")).usage!.completion_tokens, 3, "the session already served still gets its turns");
    // Naming no session: a conversation's opening turn is a new session; a turn holding an answer may be a
    // returning agent's, and gets in.
    const keyless = (messages: OpenAI.ChatCompletionMessageParam[]) => client.chat.completions.create({ model: "stories260K", messages, max_tokens: 3 });
    await assert.rejects(keyless([{ role: "system", content: "Tell stories." }, { role: "user", content: STORY }]), (e: unknown) => e instanceof OpenAI.APIError && e.status === 503 && /new conversation/.test(e.message));
    const later = await keyless([{ role: "user", content: STORY }, { role: "assistant", content: "Once upon" }, { role: "user", content: "Go on." }]);
    assert.equal(later.usage!.completion_tokens, 3);
  } finally {
    await s.shutdown();
  }
});

test("startServer() counts the n choices of a keyless opening turn as one new session at the front door", async () => {
  // Room for one new session, once: the tick that grants it is the test's; the server's own ticks
  // (each second) say nothing, which keeps the budget as the requests leave it.
  let grant = false;
  const admission = { kind: "admission" as const, holdNewSessions: false, maxHoldS: 0, newSessions: 1, rejectAfterHold: true };
  const planner = { name: "one-new-session", intervalS: 1, tick: () => (grant ? (grant = false, [admission]) : []) };
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 64, workers: 2, planner });
  try {
    const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 });
    grant = true;
    assert.deepEqual(s.cluster!.tick(), [admission]);
    const two = await client.chat.completions.create({ model: "stories260K", messages: [{ role: "user", content: STORY }], max_tokens: 3, n: 2 });
    assert.equal(two.choices.length, 2, "both choices of the one conversation got in");
    await assert.rejects(client.chat.completions.create({ model: "stories260K", messages: [{ role: "user", content: STORY }], max_tokens: 3 }), (e: unknown) => e instanceof OpenAI.APIError && e.status === 503);
  } finally {
    await s.shutdown();
  }
});

test("startServer() holds a new session at the front door until a planner tick finds room for it, then answers 200", async () => {
  // The test's ticks decide; the server's own (each second) say nothing, which keeps the door as it is.
  let next: PlannerAction[] = [];
  const planner = { name: "door", intervalS: 1, tick: () => next.splice(0) };
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 64, workers: 2, planner });
  try {
    const c = s.cluster!;
    const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 });
    next = [{ kind: "admission", holdNewSessions: false, maxHoldS: 600, newSessions: 0, rejectAfterHold: true }];
    c.tick();
    const answer = client.chat.completions.create({ model: "stories260K", messages: [{ role: "user", content: STORY }], max_tokens: 3, prompt_cache_key: "waits" });
    await eventually(() => c.stats().waiting, (n) => n === 1, 60_000, 20);
    const metrics = await (await fetch(`${s.url}/metrics`)).text();
    assert.match(metrics, /vllm:num_requests_waiting\{model_name="stories260K"\} 1\n/, "the held session counts as waiting");
    next = [{ kind: "admission", holdNewSessions: false, maxHoldS: 0, newSessions: 1, rejectAfterHold: true }];
    c.tick();
    assert.equal((await answer).usage!.completion_tokens, 3);
    assert.equal(c.metrics.rejected, 0);
  } finally {
    await s.shutdown();
  }
});

test("startServer({ localPrefillTokens }) fixes the local-prefill threshold: prompts longer than it go through the prefill worker, and the planner keeps it", async () => {
  // Dynamo's KV-aware router hands off on the threshold alone (ours also weighs prefilling locally).
  for (const [tokens, handedOff] of [[8, true], [4096, false]] as const) {
    const s = await startServer({
      modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 64, workers: 2, roles: ["prefill", "decode"], router: "kv-aware", localPrefillTokens: tokens,
    });
    try {
      const c = s.cluster!;
      const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 });
      const r = await client.completions.create({ model: "stories260K", prompt: STORY, max_tokens: 5, temperature: 0 });
      assert.ok(r.usage!.prompt_tokens > 8 && r.usage!.prompt_tokens < 4096);
      assert.equal(c.counters.prefillHandoffs, handedOff ? 1 : 0, `a ${r.usage!.prompt_tokens}-token prompt with threshold ${tokens}`);
      const metrics = await (await fetch(`${s.url}/metrics`)).text();
      assert.match(metrics, new RegExp(`evolving:prefill_handoffs_total\\{model_name="stories260K"\\} ${handedOff ? 1 : 0}\n`));
      assert.match(metrics, handedOff ? /evolving:moved_kv_blocks_total\{model_name="stories260K"\} [1-9]/ : /evolving:moved_kv_blocks_total\{model_name="stories260K"\} 0\n/);
      // The online planner would move an unset threshold (from 512, within 256-2048) as it ticks.
      for (let i = 0; i < 5; i++) c.tick();
      assert.equal(c.localPrefillThreshold, tokens);
    } finally {
      await s.shutdown();
    }
  }
});
