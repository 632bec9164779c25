/**
 * How long the engine's incremental detokenizer (src/engine/engine-text.ts `OutputText`) takes over
 * one long output: every output token goes through it on the server's event loop. The output is
 * stories260K's tokens of a repeated story (SentencePiece, leading spaces); the median of 3 runs per
 * length is printed.
 *
 *   npx tsx scripts/bench-detokenize.ts [TOKENS ...]    (default: 2000 8000 32000)
 */
import { OutputText } from "../src/engine/engine-text.ts";
import { loadModel } from "../src/model/load.ts";

const model = await loadModel(new URL("../models/stories260K.gguf", import.meta.url).pathname);
const story = "Once upon a time there was a little girl named Lily. She liked to play outside in the sun. ";
const sizes = process.argv.slice(2).map(Number);
console.log("| output tokens | output chars | median ms (3 runs) | µs per token |");
console.log("|---:|---:|---:|---:|");
for (const n of sizes.length > 0 ? sizes : [2000, 8000, 32000]) {
  const ids = model.tokenizer.encode(story.repeat(Math.ceil(n / 20))).slice(0, n);
  let chars = 0;
  const times = Array.from({ length: 3 }, () => {
    const out = new OutputText(model.tokenizer, ["THE END"]);
    const t0 = performance.now();
    let text = "";
    for (const id of ids) text += out.push(id);
    text += out.flush();
    chars = text.length;
    return performance.now() - t0;
  }).sort((a, b) => a - b);
  console.log(`| ${ids.length} | ${chars} | ${times[1].toFixed(1)} | ${((times[1] * 1000) / ids.length).toFixed(1)} |`);
}
