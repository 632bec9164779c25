/**
 * What a JSON-schema `enum` of many values costs an output grammar: the time to compile it and to
 * compute each token mask while writing its last value, over stories260K's vocabulary (512 tokens;
 * a real vocabulary has far more trie nodes to step, so real costs are larger). Figures:
 * docs/results/bench-grammar-enum.md.
 *
 *   ./node_modules/.bin/deno run -A --no-check scripts/bench-grammar-enum.ts [--repeats 5]
 */
import { parseArgs } from "../src/cli/args.ts";
import { cliArgs } from "../src/runtime/env.ts";
import { loadModel } from "../src/model/load.ts";
import { OutputConstraint } from "../src/engine/output-constraint.ts";
import { TokenTrie } from "../src/engine/token-trie.ts";

const { repeats = 5 } = parseArgs(cliArgs(), { repeats: { kind: "int", min: 1, help: "rounds per size (median reported)" } });
const model = await loadModel(new URL("../models/stories260K.gguf", import.meta.url).pathname);
const tok = model.tokenizer;
const trie = new TokenTrie(Array.from({ length: tok.vocabSize }, (_, i) => tok.tokenText!(i)));
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
console.log(`vocabulary ${tok.vocabSize} tokens; median of ${repeats} rounds`);
for (const n of [10, 100, 1000, 5000, 20000]) {
  const values = Array.from({ length: n }, (_, i) => `file_${(i * 7919) % 100000}_name.ts`);
  const target = tok.encode(JSON.stringify(values[n - 1]));
  const compile: number[] = [], mask: number[] = [];
  for (let r = 0; r < repeats; r++) {
    const t0 = performance.now();
    const c = new OutputConstraint({ kind: "json", schema: { enum: values } }, trie, model.config.eosTokenIds);
    const t1 = performance.now();
    const out: number[] = [];
    for (const id of target) {
      c.next(out, 0);
      out.push(id);
    }
    compile.push(t1 - t0);
    mask.push((performance.now() - t1) / target.length);
  }
  console.log(`enum of ${String(n).padStart(5)}: compile ${median(compile).toFixed(1)} ms, ${median(mask).toFixed(2)} ms a mask (${target.length} masks)`);
}
