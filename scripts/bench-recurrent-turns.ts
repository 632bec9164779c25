/**
 * An agent session on a model with Gated DeltaNet layers (a random-weight Qwen3.5 of `--hidden`
 * width and `--layers` layers, written here): `--turns` turns, each prompt the last prompt plus its
 * answer (`--answer` tokens) and a tool result (`--tool` tokens), the first `--prompt` tokens long.
 * Each turn runs with state checkpoints (the default: it resumes where the last prompt's whole blocks
 * end) and without (`stateCheckpoints: 0`: every turn prefills its whole history), alternating over
 * `--rounds`; prints per turn the median time to first token of each, the prompt tokens computed, and
 * the median time per output token after the first (what each answer's own checkpoint copies cost).
 * Figures: docs/bench-engine.md "Recurrent state checkpoints".
 *
 *   npx deno run -A --no-check scripts/bench-recurrent-turns.ts [--backend webgpu] [--turns 6] [--prompt 512]
 *     [--answer 32] [--tool 96] [--rounds 3] [--hidden 256] [--layers 8]
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { parseArgs } from "../src/cli/args.ts";
import { BACKEND_NAMES, type BackendChoice, selectBackend } from "../src/backend/select.ts";
import { createEngine } from "../src/engine/engine-factory.ts";
import { loadModel } from "../src/model/load.ts";
import { cliArgs, exitProcess, runtimeName } from "../src/runtime/env.ts";
import { writeTestGguf } from "../tests/model/model-files.ts";
import { median, timeAgentSession } from "./agent-session-timing.ts";

const f = parseArgs(cliArgs(), {
  backend: { kind: "string", help: "webgpu|reference|cuda|auto (default webgpu)" },
  turns: { kind: "int", min: 2, help: "turns of the session (default 6)" },
  prompt: { kind: "int", min: 16, help: "the first prompt's tokens (default 512)" },
  answer: { kind: "int", min: 1, help: "tokens each turn generates (default 32)" },
  tool: { kind: "int", min: 1, help: "tokens of each tool result (default 96)" },
  rounds: { kind: "int", min: 1, help: "rounds over the two settings (default 3)" },
  hidden: { kind: "int", min: 32, help: "the model's width (default 256)" },
  layers: { kind: "int", min: 4, help: "its layers, every fourth attention (default 8)" },
});
const backendName = f.backend ?? "webgpu";
if (!(BACKEND_NAMES as readonly string[]).includes(backendName)) throw new Error(`Unknown backend "${backendName}"; choose ${BACKEND_NAMES.join(", ")}`);
const { backend, reason } = await selectBackend(backendName as BackendChoice);
const [turns, promptLen, answer, tool, rounds] = [f.turns ?? 6, f.prompt ?? 512, f.answer ?? 32, f.tool ?? 96, f.rounds ?? 3];
const hidden = f.hidden ?? 256;
const dir = mkdtempSync(`${tmpdir()}/bench-recurrent-`);
const path = await writeTestGguf(dir, "qwen35", {
  architecture: "qwen35", hidden, layers: f.layers ?? 8, heads: hidden / 64, kvHeads: Math.max(1, hidden / 128), headDim: 64, rotaryDim: 16, ffn: hidden * 3, vocab: 2048,
  tied: true, dtype: "f16", seed: 5, contextLength: 8192, deltaNet: { kHeads: hidden / 64, vHeads: hidden / 32, dim: 32, conv: 4, interval: 4 },
});
const model = await loadModel(path);
rmSync(dir, { recursive: true, force: true });
const shape = { turns, prompt: promptLen, answer, tool };
/** One session, with the default state checkpoints or without any. */
const session = (checkpoints: boolean) =>
  timeAgentSession(createEngine(backend, model, { numBlocks: 1024, scheduler: { maxRunning: 4, maxBatchTokens: 512 }, ...(checkpoints ? {} : { stateCheckpoints: 0 }) }), shape);

const runs = { with: [] as Awaited<ReturnType<typeof session>>[], without: [] as Awaited<ReturnType<typeof session>>[] };
await session(true); // warm-up: compiles what both settings run
for (let r = 0; r < rounds; r++) {
  runs.with.push(await session(true));
  runs.without.push(await session(false));
}
console.log(`# ${runtimeName()}, ${backend.info.name} (${reason}); Qwen3.5 random f16, hidden ${hidden}, ${model.config.numLayers} layers; ${turns} turns: prompt ${promptLen}, +${answer} answer +${tool} tool each; medians of ${rounds}`);
console.log("turn  prompt  computed(with)  computed(without)  ttft_ms(with)  ttft_ms(without)  ratio  tpot_ms(with)  tpot_ms(without)");
for (let t = 0; t < turns; t++) {
  const w = median(runs.with.map((s) => s.ttft[t])) * 1000;
  const wo = median(runs.without.map((s) => s.ttft[t])) * 1000;
  const len = promptLen + t * (answer + tool);
  const tw = median(runs.with.map((s) => s.tpot[t])) * 1000;
  const two = median(runs.without.map((s) => s.tpot[t])) * 1000;
  console.log(`${t + 1}  ${len}  ${runs.with[0].computed[t]}  ${runs.without[0].computed[t]}  ${w.toFixed(0)}  ${wo.toFixed(0)}  ${(wo / w).toFixed(2)}  ${tw.toFixed(1)}  ${two.toFixed(1)}`);
}
exitProcess(0);
