/**
 * A streamed chunk's envelope (id, object, created, model, usage, service_tier) is written once per
 * stream and only the choice and usage are spliced in per chunk (respond.ts `completeStream`): every
 * event's bytes must still be exactly what `JSON.stringify` gave for the whole chunk object, built
 * the old way (`{ id, object, created, model, choices, usage: null, ...usage so far, ...tier, ...final usage }`),
 * for chat and completions, with log probabilities, several choices, continuous and final usage and a
 * service tier.
 */
import assert from "node:assert/strict";
import { projectRoot, test } from "../harness.ts";
import { loadModel } from "../../src/model/load.ts";
import { startServer } from "../../src/serve/server.ts";

type Json = Record<string, unknown>;

const modelPath = `${projectRoot}/models/stories260K.gguf`;
const model = await loadModel(modelPath);

/** The `data:` payloads of an SSE body, `[DONE]` last. */
function payloads(text: string): string[] {
  assert.ok(text.endsWith("\n\n"), "the body ends with a blank line");
  return text.split("\n\n").filter((b) => b !== "").map((b) => {
    assert.ok(b.startsWith("data: ") && !b.includes("\n"), `one data line per event: ${JSON.stringify(b.slice(0, 80))}`);
    return b.slice("data: ".length);
  });
}

/** The chunk `p` as the old code serialized it: the whole object, in its key order, through JSON.stringify. */
function oldWay(p: Json, includeUsage: boolean, tier: string | undefined): string {
  const body = {
    id: p.id, object: p.object, created: p.created, model: p.model, choices: p.choices,
    ...(includeUsage ? { usage: p.usage ?? null } : {}), ...(tier ? { service_tier: tier } : {}),
  };
  return JSON.stringify(body);
}

interface Case {
  path: "chat/completions" | "completions";
  body: Json;
  includeUsage: boolean;
  tier?: string;
}

const chat = { model: "stories260K", messages: [{ role: "user", content: "Once upon a time" }], max_tokens: 10, temperature: 0, ignore_eos: true, stream: true };
const completion = { model: "stories260K", prompt: "Once upon a time", max_tokens: 10, temperature: 0, ignore_eos: true, stream: true };
const usage = { include_usage: true };
const continuous = { include_usage: true, continuous_usage_stats: true };

const cases: [string, Case][] = [
  ["chat, plain", { path: "chat/completions", body: chat, includeUsage: false }],
  ["chat, logprobs, final usage, service tier", { path: "chat/completions", body: { ...chat, logprobs: true, top_logprobs: 2, stream_options: usage, service_tier: "flex" }, includeUsage: true, tier: "flex" }],
  ["chat, two choices, continuous usage", { path: "chat/completions", body: { ...chat, n: 2, temperature: 0.9, seed: 7, stream_options: continuous }, includeUsage: true }],
  ["completions, plain", { path: "completions", body: completion, includeUsage: false }],
  ["completions, logprobs and echo, final usage", { path: "completions", body: { ...completion, logprobs: 2, echo: true, stream_options: usage }, includeUsage: true }],
  ["completions, two prompts, continuous usage, tier", { path: "completions", body: { ...completion, prompt: ["Once upon", "Lily saw"], stream_options: continuous, service_tier: "auto" }, includeUsage: true, tier: "default" }],
];

test("every streamed chunk's bytes are JSON.stringify of the whole chunk object, in the old key order (chat and completions)", async () => {
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 64 });
  try {
    for (const [name, c] of cases) {
      const res = await fetch(`${s.url}/v1/${c.path}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(c.body) });
      const text = await res.text();
      assert.equal(res.status, 200, `${name}: ${text.slice(0, 300)}`);
      const data = payloads(text);
      assert.equal(data.pop(), "[DONE]", name);
      assert.ok(data.length > 5, `${name}: a chunk per token (${data.length})`);
      const ids = new Set<unknown>();
      let withLogprobs = 0, withUsage = 0;
      for (const raw of data) {
        const p = JSON.parse(raw) as Json;
        assert.equal(raw, oldWay(p, c.includeUsage, c.tier), `${name}: the chunk's bytes`);
        ids.add(`${p.id} ${p.created} ${p.model} ${p.object}`);
        const choice = (p.choices as Json[])[0];
        if (choice?.logprobs) withLogprobs++;
        if (p.usage) withUsage++;
      }
      assert.equal(ids.size, 1, `${name}: one envelope for the whole stream`);
      if (c.body.logprobs) assert.ok(withLogprobs > 5, `${name}: log probabilities streamed (${withLogprobs})`);
      const opts = c.body.stream_options as Json | undefined;
      if (opts?.continuous_usage_stats) assert.equal(withUsage, data.length, `${name}: usage in every chunk`);
      else if (c.includeUsage) assert.equal(withUsage, 1, `${name}: usage in the last chunk only`);
      const last = JSON.parse(data[data.length - 1]) as Json;
      if (c.includeUsage) assert.deepEqual(last.choices, [], `${name}: the usage chunk has no choice`);
    }
  } finally {
    await s.shutdown();
  }
});
