/**
 * Host cost of a suffix draft (suffix-draft.ts) against an n-gram one, per decode step, on a 19k-token
 * context with a full cache (10000 outputs of 500 tokens, pseudo-random ids from 32000: many distinct
 * pairs, the index's worst case), and the heap the cache takes. Figures: docs/results/bench-spec.md.
 *
 *   ./node_modules/.bin/deno run -A --no-check scripts/bench-suffix-cost.ts
 */
import process from "node:process";
import { SuffixCache } from "../src/engine/suffix-draft.ts";
import { ngramDraft } from "../src/engine/ngram-draft.ts";
let x = 12345; const rnd = () => (x = (x * 1103515245 + 12345) % 2 ** 31) % 32000;
const c = new SuffixCache(10000);
const before = process.memoryUsage().heapUsed;
for (let r = 0; r < 12000; r++) c.add(Array.from({ length: 500 }, rnd));
console.log(`cache: ${c.size} outputs kept of 12000 added, heap +${((process.memoryUsage().heapUsed - before) / 2 ** 20).toFixed(0)} MB`);
const ctx = Array.from({ length: 19000 }, rnd);
const S = { maxDepth: 24, maxSpecFactor: 1, minTokenProb: 0.1 };
for (const [name, f] of [["suffix", () => c.draft(ctx, S, 24)], ["suffix, empty cache", () => new SuffixCache(0).draft(ctx, S, 24)], ["ngram", () => ngramDraft(ctx, { maxN: 5, minN: 2 }, 5)]] as const) {
  for (let i = 0; i < 200; i++) f();
  const t = performance.now();
  for (let i = 0; i < 2000; i++) { ctx[ctx.length - 1] = rnd(); f(); }
  console.log(name, ((performance.now() - t) / 2000).toFixed(4), "ms/step");
}
