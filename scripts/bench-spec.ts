/**
 * N-gram and suffix speculative decoding (EngineOptions.speculative, `serve --speculative-config`):
 * steps saved, draft acceptance and wall time, stories260K on the reference backend and on WebGPU
 * (lavapipe without a GPU), speculation off, at three n-gram settings and two suffix ones.
 *
 * Workloads: "retell" (a tale told twice, then its start: the context holds what comes next, as an
 * agent's context holds the file it edits) and "story" (a fresh opening: little to copy), each as one
 * greedy request and as 8 at once (temperature 0.8, seeds 1–8); 96 output tokens each, EOS ignored.
 * "retell+constrained" is "retell" under an output grammar (a regex of letters and punctuation), with a
 * frequency penalty and log probabilities (2 alternatives): what speculation skipped before it
 * verified draft rows with their own masks, penalties and log probabilities. "story, in turn" sends 8
 * seeded story requests one after another to one engine, "story repeated, in turn" the same greedy
 * request 8 times (an agent resending a turn): there suffix drafts may copy earlier outputs.
 * Medians of 3 runs. The outputs (and log probabilities) are checked equal to speculation off
 * (greedy and seeded alike).
 *
 *   ./node_modules/.bin/deno run -A scripts/bench-spec.ts [--backends reference,webgpu] [--runs 3]
 */
import { createReferenceBackend } from "../src/backend/reference/index.ts";
import type { Backend } from "../src/backend/types.ts";
import { createWebGpuBackend } from "../src/backend/webgpu/index.ts";
import { createEngine } from "../src/engine/engine-factory.ts";
import type { GenerateRequest } from "../src/engine/engine-types.ts";
import type { Speculation } from "../src/engine/ngram-draft.ts";
import { loadModel } from "../src/model/load.ts";
import { cliArgs } from "../src/runtime/env.ts";

const args = cliArgs();
const flag = (name: string, dflt: string) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? args[i + 1] : dflt;
};
const backends = flag("backends", "reference,webgpu").split(",");
const runs = Number(flag("runs", "3"));
const model = await loadModel(new URL("../models/stories260K.gguf", import.meta.url).pathname);
const tale = "Once upon a time, there was a little girl named Lily. She liked to play with her ball in the park.";
const retell = model.tokenizer.encode(`${tale} ${tale} ${tale.slice(0, 40)}`, { addBos: true });
const PROMPTS: Record<string, number[]> = {
  retell,
  story: model.tokenizer.encode("Tom had a red kite.", { addBos: true }),
  "retell+constrained": retell,
  // One engine, the requests one after another: suffix drafts may copy earlier outputs.
  "story, in turn": model.tokenizer.encode("Tom had a red kite.", { addBos: true }),
  "story repeated, in turn": model.tokenizer.encode("Tom had a red kite.", { addBos: true }),
};
/** What a workload's requests ask beyond the prompt. */
const EXTRA: Record<string, Partial<GenerateRequest>> = {
  "retell+constrained": { grammar: { kind: "regex", pattern: "[A-Za-z ,.!'\"]*" }, frequencyPenalty: 0.2, logprobs: 2 },
};
const SUFFIX = { method: "suffix" as const, numTokens: 24, maxDepth: 24, maxCachedRequests: 10000, minTokenProb: 0.1 };
const SETTINGS: [string, Speculation | undefined][] = [
  ["off", undefined],
  ["k=3 n=3..2", { method: "ngram", numTokens: 3, maxN: 3, minN: 2 }],
  ["k=5 n=4..2", { method: "ngram", numTokens: 5, maxN: 4, minN: 2 }],
  ["k=5 n=5..5 (vLLM default n)", { method: "ngram", numTokens: 5, maxN: 5, minN: 5 }],
  ["suffix (vLLM defaults)", { ...SUFFIX, maxSpecFactor: 1 }],
  ["suffix, spec factor 4", { ...SUFFIX, maxSpecFactor: 4 }],
];
/** How a workload's requests are sent: all at once, or one after another on one engine (as an agent's turns). */
const IN_TURN = new Set(["story, in turn", "story repeated, in turn"]);
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

interface Measured {
  ms: number;
  steps: number;
  tokens: number;
  drafted: number;
  accepted: number;
  ids: string;
  /** The sampled tokens' log probabilities, all requests in order (empty when none was asked). */
  lps: number[];
}

async function once(backend: Backend, prompt: number[], batch: number, speculative: Speculation | undefined, extra: Partial<GenerateRequest> = {}, inTurn?: "seeds" | "same"): Promise<Measured> {
  let steps = 0;
  const e = createEngine(backend, model, { numBlocks: 256, onStep: () => steps++, ...(speculative ? { speculative } : {}) });
  try {
    const t0 = performance.now();
    const req = (i: number): GenerateRequest => ({ prompt, maxTokens: 96, ignoreEos: true, ...extra, ...(batch === 1 || inTurn === "same" ? { temperature: 0 } : { temperature: 0.8, seed: i + 1 }) });
    const results = [];
    if (inTurn) for (let i = 0; i < batch; i++) results.push(await e.submit(req(i)).result);
    else results.push(...await Promise.all(Array.from({ length: batch }, (_, i) => e.submit(req(i)).result)));
    const ms = performance.now() - t0;
    const s = e.stats();
    return { ms, steps, tokens: results.reduce((n, r) => n + r.completionTokens, 0), drafted: s.specDraftTokens, accepted: s.specAcceptedTokens, ids: JSON.stringify(results.map((r) => [r.tokenIds, r.logprobs?.map((lp) => lp.id)])), lps: results.flatMap((r) => r.logprobs?.map((lp) => lp.logprob) ?? []) };
  } finally {
    await e.stop();
  }
}

console.log("| backend | workload | requests | speculation | steps | accepted / draft tokens | wall ms (median of 3) | tokens/s | vs off |");
console.log("|---|---|---|---|---|---|---|---|---|");
for (const name of backends) {
  const backend = name === "webgpu" ? await createWebGpuBackend() : createReferenceBackend();
  for (const [workload, prompt] of Object.entries(PROMPTS)) {
    const inTurn = !IN_TURN.has(workload) ? undefined : workload.includes("repeated") ? "same" as const : "seeds" as const;
    for (const batch of inTurn ? [8] : [1, 8]) {
      let offMs = 0, offIds = "", offLps: number[] = [];
      for (const [label, spec] of SETTINGS) {
        await once(backend, prompt, batch, spec, EXTRA[workload], inTurn); // warm-up (pipelines, caches)
        const m: Measured[] = [];
        for (let r = 0; r < runs; r++) m.push(await once(backend, prompt, batch, spec, EXTRA[workload], inTurn));
        const ms = median(m.map((x) => x.ms));
        if (!spec) [offMs, offIds, offLps] = [ms, m[0].ids, m[0].lps];
        else if (m[0].ids !== offIds) throw new Error(`${name} ${workload} ${label}: the outputs differ from speculation off`);
        // Draft rows run other kernels than one-token steps on WebGPU: equal within 1e-3 there, exactly on the reference.
        else if (m[0].lps.some((x, i) => Math.abs(x - offLps[i]) > (name === "webgpu" ? 1e-3 : 0))) throw new Error(`${name} ${workload} ${label}: the log probabilities differ from speculation off`);
        const rate = m[0].drafted ? `${m[0].accepted} / ${m[0].drafted} (${((100 * m[0].accepted) / m[0].drafted).toFixed(0)}%)` : "–";
        console.log(`| ${name} | ${workload} | ${batch} | ${label} | ${m[0].steps} | ${rate} | ${ms.toFixed(0)} | ${((1000 * m[0].tokens) / ms).toFixed(0)} | ${spec ? `${(offMs / ms).toFixed(2)}×` : "1.00×"} |`);
      }
    }
  }
}
