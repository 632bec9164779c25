/**
 * Host state checkpoints (`--host-state-checkpoints`) on agent sessions that outnumber the device's
 * checkpoints: `--sessions` sessions of a random-weight Qwen3.5 (Gated DeltaNet layers, written here) take
 * turns round-robin — each prompt the session's last prompt, its answer and a tool result — on an engine
 * with `--device` state checkpoints, with and without `--host` more in host memory, alternating over
 * `--rounds`. Per turn: the prompt tokens computed (summed over sessions) and the median time to first
 * token. Figures: docs/bench-engine.md "Host state checkpoints".
 *
 *   npx deno run -A --no-check scripts/bench-host-states.ts [--backend webgpu] [--sessions 4] [--device 1]
 *     [--host 8] [--turns 3] [--prompt 256] [--answer 16] [--tool 64] [--rounds 3]
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { parseArgs } from "../src/cli/args.ts";
import { BACKEND_NAMES, type BackendChoice, selectBackend } from "../src/backend/select.ts";
import { createEngine } from "../src/engine/engine-factory.ts";
import { loadModel } from "../src/model/load.ts";
import { cliArgs, exitProcess, runtimeName } from "../src/runtime/env.ts";
import { writeTestGguf } from "../tests/model/model-files.ts";
import { median, sessionIds } from "./agent-session-timing.ts";

const f = parseArgs(cliArgs(), {
  backend: { kind: "string", help: "webgpu|reference|cuda|auto (default webgpu)" },
  sessions: { kind: "int", min: 2, help: "sessions taking turns round-robin (default 4)" },
  device: { kind: "int", min: 1, help: "state checkpoints on the device (default 1)" },
  host: { kind: "int", min: 1, help: "state checkpoints in host memory when on (default 8)" },
  turns: { kind: "int", min: 2, help: "turns of each session (default 3)" },
  prompt: { kind: "int", min: 16, help: "each session's first prompt, tokens (default 256)" },
  answer: { kind: "int", min: 1, help: "tokens each turn generates (default 16)" },
  tool: { kind: "int", min: 1, help: "tokens of each tool result (default 64)" },
  rounds: { kind: "int", min: 1, help: "rounds over the two settings (default 3)" },
});
const backendName = f.backend ?? "webgpu";
if (!(BACKEND_NAMES as readonly string[]).includes(backendName)) throw new Error(`Unknown backend "${backendName}"; choose ${BACKEND_NAMES.join(", ")}`);
const { backend, reason } = await selectBackend(backendName as BackendChoice);
const [sessions, device, host, turns, promptLen, answer, tool, rounds] = [
  f.sessions ?? 4, f.device ?? 1, f.host ?? 8, f.turns ?? 3, f.prompt ?? 256, f.answer ?? 16, f.tool ?? 64, f.rounds ?? 3,
];
const dir = mkdtempSync(`${tmpdir()}/bench-host-states-`);
const model = await loadModel(await writeTestGguf(dir, "qwen35", {
  architecture: "qwen35", hidden: 256, layers: 8, heads: 4, kvHeads: 2, headDim: 64, rotaryDim: 16, ffn: 768, vocab: 2048,
  tied: true, dtype: "f16", seed: 7, contextLength: 8192, deltaNet: { kHeads: 4, vHeads: 8, dim: 32, conv: 4, interval: 4 },
}));
rmSync(dir, { recursive: true, force: true });

/** One run: per turn, prompt tokens computed over all sessions and each session's seconds to first token. */
async function run(hostStates: number): Promise<{ computed: number[]; ttft: number[][] }> {
  const engine = createEngine(backend, model, { numBlocks: 2048, stateCheckpoints: device, hostStateCheckpoints: hostStates, scheduler: { maxRunning: 4, maxBatchTokens: 512 } });
  const computed: number[] = [];
  const ttft: number[][] = [];
  try {
    const prompts = Array.from({ length: sessions }, (_, s) => sessionIds(promptLen, 100 + s));
    for (let t = 0; t < turns; t++) {
      computed.push(0);
      ttft.push([]);
      for (let s = 0; s < sessions; s++) {
        const r = await engine.submit({ prompt: prompts[s], maxTokens: answer, temperature: 0, ignoreEos: true }).result;
        computed[t] += prompts[s].length - r.cachedTokens;
        ttft[t].push(r.firstTokenS ?? NaN);
        prompts[s] = [...prompts[s], ...r.tokenIds, ...sessionIds(tool, 1000 * s + t)];
      }
    }
  } finally {
    await engine.stop();
  }
  return { computed, ttft };
}

const runs = { without: [] as Awaited<ReturnType<typeof run>>[], with: [] as Awaited<ReturnType<typeof run>>[] };
await run(host); // warm-up: compiles what both settings run
for (let r = 0; r < rounds; r++) {
  runs.without.push(await run(0));
  runs.with.push(await run(host));
}
console.log(`# ${runtimeName()}, ${backend.info.name} (${reason}); Qwen3.5 random f16, hidden 256, 8 layers; ${sessions} sessions round-robin, ${device} device checkpoint(s), ${host} in host memory when on; ${turns} turns: prompt ${promptLen}, +${answer} answer +${tool} tool each; medians of ${rounds}`);
console.log("turn  computed(without)  computed(with)  ttft_ms(without)  ttft_ms(with)  ratio");
for (let t = 0; t < turns; t++) {
  const m = (k: "with" | "without") => median(runs[k].flatMap((x) => x.ttft[t])) * 1000;
  console.log(`${t + 1}  ${runs.without[0].computed[t]}  ${runs.with[0].computed[t]}  ${m("without").toFixed(0)}  ${m("with").toFixed(0)}  ${(m("without") / m("with")).toFixed(2)}`);
}
exitProcess(0);
