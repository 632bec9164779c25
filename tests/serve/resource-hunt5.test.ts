/**
 * Single requests that look valid but would make the server spend seconds of event-loop time (a
 * denial of service from one client): each is refused quickly with a 400 naming the parameter and
 * its limit, and the server serves the next request.
 */
import assert from "node:assert/strict";
import { projectRoot, test } from "../harness.ts";
import { loadModel } from "../../src/model/load.ts";
import { startServer } from "../../src/serve/server.ts";
import { TEMPLATE } from "./scripted-server.ts";

const modelPath = `${projectRoot}/models/stories260K.gguf`;
const model = await loadModel(modelPath);

/** POSTs `body` to `path`; the status, the error message (if any) and the milliseconds it took. */
async function post(url: string, path: string, body: unknown): Promise<{ status: number; message: string; ms: number }> {
  const text = JSON.stringify(body);
  const t0 = performance.now();
  const r = await fetch(`${url}${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: text });
  const json = await r.json() as { error?: { message?: string; param?: string } };
  return { status: r.status, message: `${json.error?.param ?? ""}: ${json.error?.message ?? ""}`, ms: performance.now() - t0 };
}

const completion = (extra: Record<string, unknown>) => ({ model: "stories260K", prompt: "Once", max_tokens: 2, ...extra });
const schema = (s: unknown) => completion({ response_format: { type: "json_schema", json_schema: { name: "x", schema: s } } });
/** An anyOf of `n` objects, each with its own required key: every branch is open after `{`. */
const wide = (n: number) => ({ anyOf: Array.from({ length: n }, (_, i) => ({ type: "object", properties: { [`k${i}`]: { type: "string" } }, required: [`k${i}`] })) });

/** Records the longest text the server's tokenizer (the shared `model`'s) is asked to encode, until restored. */
function watchEncodes(): { readonly longest: number; restore(): void } {
  const encode = model.tokenizer.encode;
  const seen = { longest: 0, restore: () => void (model.tokenizer.encode = encode) };
  model.tokenizer.encode = (t, o) => {
    seen.longest = Math.max(seen.longest, t.length);
    return encode.call(model.tokenizer, t, o);
  };
  return seen;
}

test("a bad_words list of megabytes is refused before it is tokenized", async () => {
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference" });
  try {
    // One 1.6 MB word took 8 s of event-loop time to tokenize (twice: as written and after a space).
    // The server's tokenizer is this one: the check is the longest text it is asked to encode, not how
    // long the answer took (a loaded CI machine is slow; speed is for the benchmarks).
    const encodes = watchEncodes();
    try {
      const long = await post(s.url, "/v1/completions", completion({ bad_words: ["abc ".repeat(400_000)] }));
      assert.equal(long.status, 400, long.message);
      assert.match(long.message, /^bad_words: .*at most 16384 characters.*1600000/);
      assert.ok(encodes.longest <= 16_384, `a text of ${encodes.longest} characters was tokenized`);
      const ok = await post(s.url, "/v1/completions", completion({ bad_words: ["abc ".repeat(1000), "dragon"] }));
      assert.equal(ok.status, 200, ok.message);
      assert.ok(encodes.longest >= 4000, `a bad word the server takes is tokenized where this test sees it (longest ${encodes.longest})`);
    } finally {
      encodes.restore();
    }
  } finally {
    await s.shutdown();
  }
});

test("a schema whose anyOf opens thousands of branches at once is refused, a smaller one served", async () => {
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference" });
  try {
    // 8000 branches took 4 s of one event-loop turn per token (each step's mask follows every open branch).
    const many = await post(s.url, "/v1/completions", schema(wide(8000)));
    assert.equal(many.status, 400, many.message);
    assert.match(many.message, /^response_format: .*more than 1000 branches .*8000/);
    assert.ok(many.ms < 6000, `the wide anyOf took ${many.ms.toFixed(0)} ms`);
    // Nested anyOfs whose branches start together count together (40 × 40 = 1600 at once).
    const nested = await post(s.url, "/v1/completions", schema({ anyOf: Array.from({ length: 40 }, () => wide(40)) }));
    assert.equal(nested.status, 400, nested.message);
    assert.match(nested.message, /more than 1000 branches/);
    // Branches that open at different places do not add up: 600 optional fields, each anyOf [X, null].
    const fields = Object.fromEntries(Array.from({ length: 600 }, (_, i) => [`f${i}`, { anyOf: [{ type: "integer" }, { type: "null" }] }]));
    const optional = await post(s.url, "/v1/completions", schema({ type: "object", properties: fields }));
    assert.equal(optional.status, 200, optional.message);
    const served = await post(s.url, "/v1/completions", schema(wide(500)));
    assert.equal(served.status, 200, served.message);
  } finally {
    await s.shutdown();
  }
});

test("an Anthropic request with more tools than OpenAI's 128 is refused, naming tools", async () => {
  // The story model has no chat template, and a model without one cannot be told about tools: the scripted one's.
  const s = await startServer({ modelPath, model: { ...model, chatTemplate: TEMPLATE }, host: "127.0.0.1", port: 0, backend: "reference" });
  try {
    // /v1/messages took any number of tools; a forced call's grammar over 10000 of them took 3.5 s of
    // event-loop time for its first 27 characters (chat completions already stop at 128).
    const tools = (n: number) => Array.from({ length: n }, (_, i) => ({ name: `f${i}`, input_schema: { type: "object", properties: { a: { type: "string" } } } }));
    const request = (n: number) => ({ model: "stories260K", max_tokens: 2, messages: [{ role: "user", content: "Hi" }], tool_choice: { type: "any" }, tools: tools(n) });
    const r = await fetch(`${s.url}/v1/messages`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(request(10_000)) });
    const json = await r.json() as { error?: { message?: string } };
    assert.equal(r.status, 400, json.error?.message);
    assert.match(json.error?.message ?? "", /tools.*128/);
    const ok = await fetch(`${s.url}/v1/messages`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(request(8)) });
    assert.equal(ok.status, 200, await ok.text());
  } finally {
    await s.shutdown();
  }
});

test("truncate_prompt_tokens keeps the same last tokens of a long prompt without tokenizing all of it", async () => {
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference" });
  try {
    const words = ["Once", " upon", " a", " time", " there", " was", " a", " little", " girl", " named", " Lily", "."];
    const text = Array.from({ length: 12_000 }, (_, i) => words[(i * 7) % words.length]).join("") + " She loved the park.";
    const whole = model.tokenizer.encode(text, { addBos: model.config.addBos });
    // The server's tokenizer is this one: record the longest text it is asked to encode.
    const encodes = watchEncodes();
    try {
      for (const keep of [8, 200]) {
        const r = await fetch(`${s.url}/v1/completions`, {
          method: "POST", headers: { "content-type": "application/json" },
          body: JSON.stringify({ model: "stories260K", prompt: text, max_tokens: 0, echo: true, logprobs: 0, truncate_prompt_tokens: keep }),
        });
        const body = await r.json() as { choices: { text: string; logprobs: { tokens: string[] } }[]; usage: { prompt_tokens: number } };
        assert.equal(r.status, 200, JSON.stringify(body));
        assert.equal(body.usage.prompt_tokens, keep);
        assert.equal(body.choices[0].text, model.tokenizer.decode(whole.slice(whole.length - keep)), `the last ${keep} tokens, as the whole prompt tokenizes`);
      }
    } finally {
      encodes.restore();
    }
    assert.ok(encodes.longest < text.length / 4, `the server tokenized ${encodes.longest} of the prompt's ${text.length} characters`);
  } finally {
    await s.shutdown();
  }
});
