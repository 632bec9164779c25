/**
 * `/detokenize` on a Hugging Face directory model (tokenizer.json through tokenizers.js) with ids
 * that decode to nothing: none at all, or only special tokens that decoding skips.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import { loadModel } from "../../src/model/load.ts";
import { startServer } from "../../src/serve/server.ts";
import { test } from "../harness.ts";
import { type ModelFileSpec, randomHfWeights, vocabFor, writeHfDirectory } from "../model/model-files.ts";

const dir = mkdtempSync(`${tmpdir()}/tokenize-hunt-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
const SPEC: ModelFileSpec = { architecture: "qwen2", hidden: 32, layers: 1, heads: 4, kvHeads: 2, headDim: 8, ffn: 48, vocab: 300, tied: false, dtype: "f32", seed: 31 };
const modelPath = `${dir}/tiny`;
await writeHfDirectory(modelPath, SPEC, randomHfWeights(SPEC));

test("detokenize() answers 200 with \"\" for no ids and for only a skipped special token (HfTokenizer.decode)", async () => {
  const model = await loadModel(modelPath);
  const eos = vocabFor(SPEC).eosId;
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 16 });
  try {
    const post = async (body: unknown) => {
      const res = await fetch(`${s.url}/detokenize`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
      return { status: res.status, json: await res.json() as Record<string, unknown> };
    };
    for (const tokens of [[], [eos], [eos, eos]]) {
      const r = await post({ tokens });
      assert.equal(r.status, 200, `${JSON.stringify(tokens)}: ${JSON.stringify(r.json)}`);
      assert.deepEqual(r.json, { prompt: "" });
    }
    const hello = model.tokenizer.encode("hello");
    assert.deepEqual((await post({ tokens: [...hello, eos] })).json, { prompt: "hello" });
  } finally {
    await s.shutdown();
  }
});
