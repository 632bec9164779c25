/**
 * What the draft-block serving tests (mtp-server, eagle-server) read from a server: two greedy
 * completions at once and one streamed, through the real openai client, and the speculation and
 * hand-off counters in /metrics.
 */
import assert from "node:assert/strict";
import OpenAI from "openai";
import { createWebGpuBackend } from "../../src/backend/webgpu/index.ts";
import { createEngine } from "../../src/engine/engine-factory.ts";
import type { Speculation } from "../../src/engine/ngram-draft.ts";
import type { LoadedModel } from "../../src/model/config.ts";
import { startServer } from "../../src/serve/server.ts";

/** startServer's options as a test gives them: the model's path, and any of the rest. */
export type ServerOptions = Partial<Parameters<typeof startServer>[0]> & { modelPath: string };

/** The prompt the serving tests complete (twice, once with more after it). */
export const SERVED_PROMPT = "the agent reads the file, then it calls a tool and waits";

/** Starts a server with `o` on the reference backend unless told, asks it, and shuts it down. */
export async function servedAnswers(o: ServerOptions, model: string) {
  const s = await startServer({ host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 64, maxNumSeqs: 4, ...o });
  try {
    const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "unused", maxRetries: 0 });
    const texts = await Promise.all([SERVED_PROMPT, `${SERVED_PROMPT} for the result`].map(async (prompt) => (await client.completions.create({ model, prompt, max_tokens: 24, temperature: 0 })).choices[0].text));
    let streamed = "";
    for await (const c of await client.completions.create({ model, prompt: SERVED_PROMPT, max_tokens: 24, temperature: 0, stream: true })) streamed += c.choices[0]?.text ?? "";
    const metrics = await (await fetch(`${s.url}/metrics`)).text();
    const count = (name: string) => Number(new RegExp(`vllm:spec_decode_${name}_total\\{[^}]*\\} (\\d+)`).exec(metrics)?.[1]);
    const handoffs = Number(/^evolving:prefill_handoffs_total\{[^}]*\} (\d+)$/m.exec(metrics)?.[1] ?? 0);
    return { texts, streamed, drafted: count("num_draft_tokens"), accepted: count("num_accepted_tokens"), handoffs };
  } finally {
    await s.shutdown();
  }
}

/**
 * Checks that an engine drafting with `spec` on WebGPU compiles every kernel in its warm-up: serving
 * greedy and sampled requests after it (drafts verified) compiles none.
 */
export async function assertWarmUpCompilesDrafting(model: LoadedModel, spec: Speculation): Promise<void> {
  const backend = await createWebGpuBackend({ poison: true });
  const engine = createEngine(backend, model, { numBlocks: 64, speculative: spec });
  try {
    await engine.warmUp();
    const compiled = backend.stats().recorder.pipelines;
    const ids = model.tokenizer.encode(SERVED_PROMPT, { addBos: false });
    await Promise.all([0, 1, 2].map((i) => engine.submit({ prompt: ids.slice(i), maxTokens: 12, temperature: i === 0 ? 0 : 0.8, seed: i }).result));
    assert.ok(engine.stats().specDraftTokens > 0);
    assert.equal(backend.stats().recorder.pipelines, compiled, "no kernel was compiled after the warm-up");
  } finally {
    await engine.stop();
    backend.destroy();
  }
}
