/**
 * LFM2 (src/model/lfm2.ts) loads alike from an `lfm2` GGUF and an Lfm2ForCausalLM checkpoint (its
 * feed-forward width derived as transformers derives it, `tie_embedding`), and what does not fit is
 * refused by name (llama.cpp's check of the same weights: tests/oracle/llama-cpp.test.ts).
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import { test } from "../harness.ts";
import { loadModel } from "../../src/model/load.ts";
import { gguf } from "../../src/model/gguf-writer.ts";
import { GgufType } from "../../src/model/gguf-types.ts";
import { expectLoadError, type ModelFileSpec, writeTestGguf, writeTestHfDirectory } from "./model-files.ts";

const SPEC: ModelFileSpec = {
  architecture: "lfm2", hidden: 32, layers: 3, heads: 4, kvHeads: 2, headDim: 8, ffn: 64, vocab: 300, tied: true, dtype: "f32", seed: 351,
  shortConv: { kernel: 3, attention: [1] },
};
const dir = mkdtempSync(`${tmpdir()}/lfm2-load-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));

test("loadModel() reads LFM2's layers, tying and feed-forward width from a GGUF and an Lfm2ForCausalLM checkpoint alike", async () => {
  const g = await loadModel(await writeTestGguf(dir, "l", SPEC));
  assert.deepEqual(g.config.shortConv, { layers: [true, false, true], kernel: 3 });
  assert.equal(g.config.numKvHeads, 2);
  assert.equal(g.config.tiedEmbeddings, true);
  // Lfm2MLP's width: two thirds of block_ff_dim 96, rounded up to a multiple of 32.
  const h = await loadModel(await writeTestHfDirectory(dir, "hf", SPEC, (c) => ({ ...c, block_ff_dim: 96, block_auto_adjust_ff_dim: true, block_multiple_of: 32, block_ffn_dim_multiplier: null })));
  assert.deepEqual([h.config.shortConv, h.config.intermediateSize, h.config.tiedEmbeddings, h.config.rmsNormEps], [g.config.shortConv, 64, true, 1e-5]);
});

test("loadModel() refuses an LFM2 whose layers cannot be told apart or whose convolution has a bias, naming why", async () => {
  const short = await writeTestGguf(dir, "short", SPEC, { metadata: [["lfm2.attention.head_count_kv", gguf.arr(GgufType.UINT32, [0, 2])]] });
  await expectLoadError(loadModel(short), /lists "lfm2\.attention\.head_count_kv" for 2 layers of its 3/);
  const mixed = await writeTestGguf(dir, "mixed", SPEC, { metadata: [["lfm2.attention.head_count_kv", gguf.arr(GgufType.UINT32, [0, 2, 4])]] });
  await expectLoadError(loadModel(mixed), /expected 0 for each convolution layer and one KV head count for the attention layers/);
  const bias = await writeTestHfDirectory(dir, "bias", SPEC, (c) => ({ ...c, conv_bias: true }));
  await expectLoadError(loadModel(bias), /sets conv_bias, which LFM2 support here does not run/);
});
