/**
 * Prompt chunks nobody reads (StepExtras.unread): a long prompt is prefilled in chunks of
 * `--chunk` tokens, and only its last chunk samples. The engine now queues the earlier chunks without
 * waiting for them; a step hook (`onStep`, as `--step-log` sets) makes it read every step, as before.
 * Prints the median time to first token of one request each way, alternating over `--rounds`.
 * Figures: docs/bench-engine.md "Multi-step decoding".
 *
 *   npx deno run -A --no-check scripts/bench-unread-chunks.ts [--backend webgpu] [--prompt-tokens 480] [--chunk 32] [--rounds 5]
 */
import { parseArgs } from "../src/cli/args.ts";
import { BACKEND_NAMES, type BackendChoice, selectBackend } from "../src/backend/select.ts";
import { createEngine } from "../src/engine/engine-factory.ts";
import { loadModel } from "../src/model/load.ts";
import { cliArgs, exitProcess, runtimeName } from "../src/runtime/env.ts";

const f = parseArgs(cliArgs(), {
  backend: { kind: "string", help: "webgpu|reference|cuda|auto (default webgpu)" },
  "prompt-tokens": { kind: "int", min: 2, help: "prompt length (default 480)" },
  chunk: { kind: "int", min: 1, help: "tokens a step prefills (--max-batch-tokens; default 32)" },
  rounds: { kind: "int", min: 1, help: "rounds, each way once (default 5)" },
});
const backendName = f.backend ?? "webgpu";
if (!(BACKEND_NAMES as readonly string[]).includes(backendName)) throw new Error(`Unknown backend "${backendName}"; choose ${BACKEND_NAMES.join(", ")}`);
const model = await loadModel("models/stories260K.gguf");
const { backend, reason } = await selectBackend(backendName as BackendChoice);
const n = f["prompt-tokens"] ?? 480;
const chunk = f.chunk ?? 32;
const text = "Once upon a time, there was a little girl named Lily. She liked to play with her ball in the park. ";
let prompt = model.tokenizer.encode(text.repeat(Math.ceil(n / 20)), { addBos: true }).slice(0, n);
prompt = prompt.slice(0, Math.min(prompt.length, model.config.contextLength - 2));
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

/** Time to first token (ms) of one request, its steps read (`read`) or its early chunks left unread. */
async function ttft(read: boolean): Promise<number> {
  const engine = createEngine(backend, model, { numBlocks: 64, scheduler: { maxBatchTokens: chunk }, ...(read ? { onStep: () => {} } : {}) });
  try {
    const r = await engine.submit({ prompt, maxTokens: 1, temperature: 0 }).result;
    return r.firstTokenS! * 1000;
  } finally {
    await engine.stop();
  }
}

console.log(`${runtimeName()}; ${reason}; prompt ${prompt.length} tokens in chunks of ${chunk}`);
await ttft(true); // warm-up
const read: number[] = [];
const unread: number[] = [];
for (let r = 0; r < (f.rounds ?? 5); r++) {
  read.push(await ttft(true));
  unread.push(await ttft(false));
}
console.log(`every step read: TTFT median ${median(read).toFixed(1)} ms (${read.map((x) => x.toFixed(0)).join(" ")})`);
console.log(`chunks unread:   TTFT median ${median(unread).toFixed(1)} ms (${unread.map((x) => x.toFixed(0)).join(" ")}); ${(median(read) / median(unread)).toFixed(2)}×`);
backend.destroy();
exitProcess(0);
