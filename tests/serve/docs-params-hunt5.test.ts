/**
 * docs/serving.md's request parameters of /v1/chat/completions and /v1/completions, one table row
 * each: the request the docs describe and the effect (or refusal) they promise, against a real
 * server on stories260K (reference backend). A change that breaks a documented behaviour fails here.
 */
import assert from "node:assert/strict";
import { projectRoot, test } from "../harness.ts";
import { loadModel } from "../../src/model/load.ts";
import { startServer } from "../../src/serve/server.ts";
import { acceptedRows, BOS, chat, choices, comp, EOS, events, GREEDY, type Json, limitRows, LITTLE, MODEL, ok, type Post, PROMPT, refusalRows, type Row, usage } from "./docs-params-table.ts";

const modelPath = `${projectRoot}/models/stories260K.gguf`;
const model = await loadModel(modelPath);

const rows: Row[] = [
  { name: "stop string stops, not returned; stop_reason names it", path: "completions", body: comp({ max_tokens: 20, stop: ["girl"] }), check: (r) => {
    ok(r);
    assert.deepEqual([choices(r)[0].text, choices(r)[0].finish_reason, choices(r)[0].stop_reason], [", there was a little ", "stop", "girl"]);
  } },
  { name: "include_stop_str_in_output keeps the stop string", path: "completions", body: comp({ max_tokens: 20, stop: "girl", include_stop_str_in_output: true }), check: (r) => {
    ok(r);
    assert.equal(choices(r)[0].text, ", there was a little girl");
  } },
  { name: "include_stop_str_in_output on chat", path: "chat", body: chat(PROMPT, { max_tokens: 30, temperature: 0, stop: ["Lily"], include_stop_str_in_output: true }), check: (r) => {
    ok(r);
    assert.ok(((choices(r)[0].message as Json).content as string).endsWith("Lily"), r.text);
  } },
  { name: "n gives n choices; usage counts the prompt once", path: "chat", body: chat(PROMPT, { max_tokens: 3, n: 3, seed: 1 }), check: (r) => {
    ok(r);
    assert.deepEqual(choices(r).map((c) => c.index), [0, 1, 2]);
    assert.equal(usage(r).completion_tokens, 9);
    assert.ok(usage(r).prompt_tokens < 10);
  } },
  { name: "choice i of n samples with seed + i", path: "completions", body: comp({ max_tokens: 8, temperature: 1, n: 2, seed: 5 }), check: async (r, post) => {
    ok(r);
    const alone = await post("completions", comp({ max_tokens: 8, temperature: 1, seed: 6 }));
    assert.equal(choices(r)[1].text, choices(alone)[0].text);
  } },
  { name: "n streamed: chunks of the choices interleave, each naming its index", path: "chat", body: chat(PROMPT, { max_tokens: 2, n: 2, stream: true }), check: (r) => {
    ok(r);
    const indexes = events(r.text).flatMap((e) => (e.choices as Json[]).map((c) => c.index));
    assert.deepEqual([...new Set(indexes)].sort(), [0, 1]);
  } },
  { name: "completions: prompts × n choices at index p·n + j", path: "completions", body: comp({ prompt: [PROMPT, "Lily"], n: 2, max_tokens: 2 }), check: (r) => {
    ok(r);
    assert.deepEqual(choices(r).map((c) => c.index), [0, 1, 2, 3]);
    assert.equal(choices(r)[0].text, choices(r)[1].text);
  } },
  { name: "chat logprobs with top_logprobs", path: "chat", body: chat(PROMPT, { max_tokens: 4, temperature: 0, logprobs: true, top_logprobs: 2 }), check: (r) => {
    ok(r);
    const content = (choices(r)[0].logprobs as Json).content as Json[];
    assert.equal(content.length, 4);
    for (const t of content) {
      assert.equal(typeof t.token, "string");
      assert.ok((t.logprob as number) <= 0);
      assert.ok(Array.isArray(t.bytes));
      assert.equal((t.top_logprobs as Json[]).length, 2);
    }
  } },
  { name: "completions logprobs: the count of alternatives, OpenAI's wire form", path: "completions", body: comp({ max_tokens: 4, logprobs: 3 }), check: (r) => {
    ok(r);
    const lp = choices(r)[0].logprobs as Record<string, unknown[]>;
    for (const k of ["tokens", "token_logprobs", "top_logprobs", "text_offset"]) assert.equal(lp[k].length, 4, k);
    assert.equal(lp.text_offset[0], 0);
    for (const top of lp.top_logprobs) assert.equal(Object.keys(top as Json).length, 3);
  } },
  { name: "seed makes sampling reproducible", path: "completions", body: comp({ max_tokens: 12, temperature: 1, seed: 42 }), check: async (r, post) => {
    ok(r);
    const again = await post("completions", comp({ max_tokens: 12, temperature: 1, seed: 42 }));
    assert.equal(choices(again)[0].text, choices(r)[0].text);
  } },
  { name: "temperature below 2^-100 is greedy", path: "completions", body: comp({ max_tokens: 20, temperature: 2 ** -101 }), check: (r) => {
    ok(r);
    assert.equal(choices(r)[0].text, GREEDY);
  } },
  { name: "ignore_eos runs past a forced EOS", path: "completions", body: comp({ max_tokens: 6, logit_bias: { [EOS]: 100 }, ignore_eos: true }), check: (r) => {
    ok(r);
    assert.equal(usage(r).completion_tokens, 6);
    assert.equal(choices(r)[0].finish_reason, "length");
  } },
  { name: "logit_bias forces EOS without ignore_eos", path: "completions", body: comp({ max_tokens: 6, logit_bias: { [EOS]: 100 } }), check: (r) => {
    ok(r);
    assert.equal(choices(r)[0].finish_reason, "stop");
    assert.equal(choices(r)[0].text, "");
  } },
  { name: "min_tokens holds EOS back (EOS counted in usage, as vLLM)", path: "completions", body: comp({ max_tokens: 10, logit_bias: { [EOS]: 100 }, min_tokens: 4 }), check: (r) => {
    ok(r);
    assert.deepEqual([choices(r)[0].text, choices(r)[0].finish_reason, usage(r).completion_tokens], [", there was a", "stop", 5]);
  } },
  { name: "a stop string counts only past min_tokens", path: "completions", body: comp({ max_tokens: 20, stop: ["there"], min_tokens: 4 }), check: (r) => {
    ok(r);
    assert.ok((choices(r)[0].text as string).startsWith(", there was a"), r.text);
  } },
  { name: "stop_token_ids end the answer and are not part of it", path: "completions", body: comp({ max_tokens: 20, stop_token_ids: [LITTLE] }), check: (r) => {
    ok(r);
    assert.deepEqual([choices(r)[0].text, choices(r)[0].finish_reason, choices(r)[0].stop_reason], [", there was a", "stop", LITTLE]);
  } },
  { name: "stop_token_ids end the answer under ignore_eos too", path: "completions", body: comp({ max_tokens: 20, stop_token_ids: [LITTLE], ignore_eos: true }), check: (r) => {
    ok(r);
    assert.equal(choices(r)[0].text, ", there was a");
  } },
  { name: "allowed_token_ids: only those ids are sampled", path: "completions", body: comp({ max_tokens: 3, allowed_token_ids: [BOS + 100] }), check: (r) => {
    ok(r);
    assert.equal(usage(r).completion_tokens, 3);
  } },
  { name: "bad_words are never completed", path: "completions", body: comp({ max_tokens: 20, bad_words: ["girl"] }), check: (r) => {
    ok(r);
    assert.ok(!(choices(r)[0].text as string).includes("girl"), r.text);
  } },
  { name: "skip_special_tokens false writes control tokens", path: "completions", body: comp({ max_tokens: 2, allowed_token_ids: [BOS], skip_special_tokens: false }), check: async (r, post) => {
    ok(r);
    assert.equal(choices(r)[0].text, "<s><s>");
    const skipped = await post("completions", comp({ max_tokens: 2, allowed_token_ids: [BOS] }));
    assert.equal(choices(skipped)[0].text, "");
  } },
  { name: "response_format json_schema on chat", path: "chat", body: chat(PROMPT, { max_tokens: 10, response_format: { type: "json_schema", json_schema: { name: "a", schema: { enum: ["yes", "no"] } } } }), check: (r) => {
    ok(r);
    assert.ok(["yes", "no"].includes(JSON.parse((choices(r)[0].message as Json).content as string)), r.text);
  } },
  { name: "response_format json_object on completions", path: "completions", body: comp({ max_tokens: 60, response_format: { type: "json_object" } }), check: (r) => {
    ok(r);
    const c = choices(r)[0];
    if (c.finish_reason === "stop") assert.equal(typeof JSON.parse(c.text as string), "object");
    else assert.ok((c.text as string).trimStart().startsWith("{"), r.text);
  } },
  { name: "stream_options.include_usage: a last chunk with usage", path: "chat", body: chat(PROMPT, { max_tokens: 3, stream: true, stream_options: { include_usage: true } }), check: (r) => {
    ok(r);
    const ev = events(r.text);
    assert.equal((ev.at(-1)!.usage as Json).completion_tokens, 3);
    assert.deepEqual(ev.at(-1)!.choices, []);
    assert.ok(ev.slice(0, -1).every((e) => e.usage === undefined || e.usage === null));
  } },
  { name: "continuous_usage_stats: every chunk carries usage", path: "completions", body: comp({ max_tokens: 3, stream: true, stream_options: { include_usage: true, continuous_usage_stats: true } }), check: (r) => {
    ok(r);
    assert.ok(events(r.text).every((e) => typeof (e.usage as Json)?.completion_tokens === "number"), r.text);
  } },
  { name: "prompt_logprobs on completions: null, then per token by id", path: "completions", body: comp({ max_tokens: 1, prompt_logprobs: 2 }), check: (r) => {
    ok(r);
    const pl = choices(r)[0].prompt_logprobs as (Record<string, Json> | null)[];
    assert.equal(pl[0], null);
    assert.equal(pl.length, usage(r).prompt_tokens);
    for (const pos of pl.slice(1)) {
      const entries = Object.values(pos!);
      assert.ok(entries.length >= 2 && entries.length <= 3);
      for (const e of entries) assert.deepEqual(Object.keys(e).sort(), ["decoded_token", "logprob", "rank"]);
    }
  } },
  { name: "prompt_logprobs on chat: beside the choices", path: "chat", body: chat(PROMPT, { max_tokens: 1, prompt_logprobs: 0 }), check: (r) => {
    ok(r);
    const pl = r.body.prompt_logprobs as unknown[];
    assert.equal(pl.length, usage(r).prompt_tokens);
    assert.equal(pl[0], null);
  } },
  { name: "echo on completions starts with the prompt", path: "completions", body: comp({ max_tokens: 3, echo: true }), check: (r) => {
    ok(r);
    assert.ok((choices(r)[0].text as string).startsWith(PROMPT));
  } },
  { name: "max_tokens 0 with echo scores the prompt", path: "completions", body: comp({ max_tokens: 0, echo: true, logprobs: 1 }), check: (r) => {
    ok(r);
    assert.deepEqual([choices(r)[0].text, choices(r)[0].finish_reason, usage(r).completion_tokens], [PROMPT, "length", 0]);
  } },
  { name: "chat echo starts with the final assistant message", path: "chat", body: { model: MODEL, messages: [{ role: "user", content: "Hi" }, { role: "assistant", content: "Once" }], echo: true, continue_final_message: true, add_generation_prompt: false, max_tokens: 2 }, check: (r) => {
    ok(r);
    assert.ok(((choices(r)[0].message as Json).content as string).startsWith("Once"), r.text);
  } },
  { name: "best_of returns n of best_of generations, usage counts all", path: "completions", body: comp({ max_tokens: 3, best_of: 3, n: 1, temperature: 1, seed: 5 }), check: (r) => {
    ok(r);
    assert.equal(choices(r).length, 1);
    assert.equal(usage(r).completion_tokens, 9);
  } },
  { name: "service_tier priority is served as priority", path: "completions", body: comp({ max_tokens: 1, service_tier: "priority" }), check: (r) => {
    ok(r);
    assert.equal(r.body.service_tier, "priority");
  } },
  { name: "chat echo streamed: its own chunk after the role", path: "chat", body: { model: MODEL, messages: [{ role: "user", content: "Hi" }, { role: "assistant", content: "Once" }], echo: true, continue_final_message: true, add_generation_prompt: false, max_tokens: 2, stream: true }, check: (r) => {
    ok(r);
    const deltas = events(r.text).map((e) => ((e.choices as Json[])[0]?.delta ?? {}) as Json);
    assert.equal(deltas[0].role, "assistant");
    assert.equal(deltas[1].content, "Once");
  } },
  { name: "echo with logprobs: the prompt's tokens first, null for the first", path: "completions", body: comp({ max_tokens: 2, echo: true, logprobs: 1 }), check: (r) => {
    ok(r);
    const lp = choices(r)[0].logprobs as Record<string, unknown[]>;
    assert.equal(lp.tokens.length, usage(r).prompt_tokens + 2);
    assert.equal(lp.token_logprobs[0], null);
    assert.ok(lp.token_logprobs.slice(1).every((x) => typeof x === "number"));
    assert.equal(lp.text_offset[0], 0);
  } },
  { name: "token-id prompts: usage counted once per prompt, echo decoded", path: "completions", body: comp({ prompt: [[403, 407], [261]], max_tokens: 2, echo: true }), check: (r) => {
    ok(r);
    assert.equal(usage(r).prompt_tokens, 3);
    assert.ok((choices(r)[0].text as string).startsWith(" Once upon"), r.text);
  } },
  { name: "chat logprobs stream with the chunk that carries the token", path: "chat", body: chat(PROMPT, { max_tokens: 2, temperature: 0, logprobs: true, stream: true }), check: (r) => {
    ok(r);
    const withText = events(r.text).map((e) => (e.choices as Json[])[0]).filter((c) => c && ((c.delta as Json).content as string)?.length > 0);
    assert.equal(withText.length, 2);
    for (const c of withText) assert.equal(((c.logprobs as Json).content as Json[])[0].token, (c.delta as Json).content);
  } },
  { name: "min_p 1 samples only the likeliest token", path: "completions", body: comp({ max_tokens: 20, temperature: 1, seed: 3, min_p: 1 }), check: (r) => {
    ok(r);
    assert.equal(choices(r)[0].text, GREEDY);
  } },
  { name: "top_k 1 samples only the likeliest token", path: "completions", body: comp({ max_tokens: 20, temperature: 1, seed: 3, top_k: 1 }), check: (r) => {
    ok(r);
    assert.equal(choices(r)[0].text, GREEDY);
  } },
  { name: "repetition_penalty changes the greedy text", path: "completions", body: comp({ max_tokens: 20, repetition_penalty: 50 }), check: (r) => {
    ok(r);
    assert.notEqual(choices(r)[0].text, GREEDY);
  } },
  { name: "structured_outputs choice", path: "chat", body: chat(PROMPT, { max_tokens: 5, structured_outputs: { choice: ["yes", "no"] } }), check: (r) => {
    ok(r);
    assert.ok(["yes", "no"].includes((choices(r)[0].message as Json).content as string), r.text);
  } },
  { name: "guided_regex, vLLM's older name", path: "completions", body: comp({ max_tokens: 8, guided_regex: "[0-9]{3}" }), check: (r) => {
    ok(r);
    assert.match(choices(r)[0].text as string, /^[0-9]{3}$/);
  } },
  { name: "logprobs are the raw model's, before logit_bias", path: "completions", body: comp({ max_tokens: 1, logprobs: 0, logit_bias: { "432": 5 } }), check: async (r, post) => {
    ok(r);
    const raw = await post("completions", comp({ max_tokens: 1, logprobs: 0 }));
    const first = (x: typeof r) => (choices(x)[0].logprobs as Record<string, number[]>).token_logprobs[0];
    assert.equal(first(r), first(raw));
  } },
  ...limitRows,
  ...acceptedRows,
  ...refusalRows,
];

test("docs/serving.md: documented chat and completions parameters do what the docs say", async () => {
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 256, maxBodyBytes: 1 << 20 });
  const post: Post = async (path, body) => {
    const res = await fetch(`${s.url}/v1/${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
    const text = await res.text();
    let parsed: Json = {};
    try {
      parsed = JSON.parse(text) as Json;
    } catch { /* a stream */ }
    return { status: res.status, body: parsed, headers: res.headers, text };
  };
  const failures: string[] = [];
  try {
    for (const row of rows) {
      try {
        await row.check(await post(row.path === "chat" ? "chat/completions" : "completions", row.body), post);
      } catch (e) {
        failures.push(`${row.name}: ${(e as Error).message.slice(0, 400)}`);
      }
    }
    // The error statuses docs/serving.md lists beside the schema's: invalid JSON, a wrong method, too large a body.
    const raw = (path: string, init: RequestInit) => fetch(`${s.url}${path}`, init).then(async (res) => ({ res, body: await res.text() }));
    const badJson = await raw("/v1/chat/completions", { method: "POST", body: "{not json" });
    if (badJson.res.status !== 400 || !badJson.body.includes('"error"')) failures.push(`invalid JSON: ${badJson.res.status} ${badJson.body}`);
    const wrongMethod = await raw("/v1/chat/completions", { method: "GET" });
    if (wrongMethod.res.status !== 405 || !wrongMethod.res.headers.get("allow")?.includes("POST")) failures.push(`wrong method: ${wrongMethod.res.status} allow=${wrongMethod.res.headers.get("allow")}`);
    const large = await raw("/v1/completions", { method: "POST", body: JSON.stringify(comp({ prompt: "x".repeat(2 << 20) })) });
    if (large.res.status !== 413) failures.push(`body too large: ${large.res.status} ${large.body.slice(0, 200)}`);
    assert.equal(s.engine.pool.numUsedBlocks(), 0);
  } finally {
    await s.shutdown();
  }
  assert.deepEqual(failures, []);
});

test("docs/serving.md: fcfs refuses priorities, a full queue is a 429 with Retry-After", async () => {
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 64, maxWaiting: 2, schedulingPolicy: "fcfs" });
  const post = (path: string, body: Json) => fetch(`${s.url}/v1/${path}`, { method: "POST", body: JSON.stringify(body) }).then(async (res) => ({ res, body: await res.json() as Json }));
  try {
    const urgent = await post("completions", comp({ max_tokens: 1, priority: 1 }));
    assert.equal(urgent.res.status, 400);
    assert.equal((urgent.body.error as Json).param, "priority");
    assert.match((urgent.body.error as Json).message as string, /--scheduling-policy/);
    const tier = await post("completions", comp({ max_tokens: 1, service_tier: "priority" }));
    assert.equal(tier.body.service_tier, "default");
    // n = 5 needs five places in a queue of two: the ones taken are cancelled and the answer is 429.
    const many = await post("chat/completions", chat(PROMPT, { max_tokens: 2, n: 5 }));
    assert.equal(many.res.status, 429);
    assert.equal((many.body.error as Json).code, "queue_full");
    assert.ok(many.res.headers.get("retry-after"));
    const after = await post("completions", comp({ max_tokens: 2 }));
    assert.equal(after.res.status, 200);
    assert.equal(s.engine.pool.numUsedBlocks(), 0);
  } finally {
    await s.shutdown();
  }
});
