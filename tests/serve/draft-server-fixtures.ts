/**
 * What the draft-block serving tests (mtp-server, eagle-server) read from a server: two greedy
 * completions at once and one streamed, through the real openai client, and the speculation and
 * hand-off counters in /metrics.
 */
import OpenAI from "openai";
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
