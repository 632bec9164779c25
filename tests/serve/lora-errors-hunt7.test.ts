/**
 * LoRA errors name the field at fault in `error.param`: a request's adapter is asked for in `model`
 * (LoraAdapterError's engine field is the request's `adapter`, which refusals.ts names `model`; any
 * LoraAdapterError on a request path named no field before unless it was a not-found one), and the
 * load and unload routes name vLLM's `lora_name` and `lora_path`.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import OpenAI from "openai";
import { LoraAdapterError } from "../../src/engine/engine-adapters.ts";
import type { GenerateResult } from "../../src/engine/engine-types.ts";
import { loadModel } from "../../src/model/load.ts";
import { writeFile } from "../../src/runtime/fs.ts";
import { refusalError } from "../../src/serve/refusals.ts";
import { failure } from "../../src/serve/respond.ts";
import { startServer } from "../../src/serve/server.ts";
import { projectRoot, test } from "../harness.ts";
import { loraGgufBytes } from "../model/lora-files.ts";

const modelPath = `${projectRoot}/models/stories260K.gguf`;
const model = await loadModel(modelPath);
const dir = mkdtempSync(`${tmpdir()}/lora-errors-hunt7-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
const adapter = `${dir}/tiny.gguf`, junk = `${dir}/junk.gguf`;
await writeFile(adapter, loraGgufBytes(model.config, { seed: 43, rank: 1, alpha: 1, targets: [{ layer: 0, target: "wq" }] }));
writeFileSync(junk, "not a gguf");

test("An engine's LoraAdapterError names model, as the request asked for the adapter: not loaded (404) or refused otherwise (400), at submit or after", () => {
  const gone = refusalError(new LoraAdapterError('The LoRA adapter "a" is not loaded', true));
  assert.deepEqual([gone?.status, gone?.param, gone?.code], [404, "model", "model_not_found"]);
  const refused = refusalError(new LoraAdapterError("This engine's runner cannot apply LoRA adapters"));
  assert.deepEqual([refused?.status, refused?.param, refused?.code], [400, "model", "invalid_value"]);
  // A worker's refusal found after submit (GenerateResult.refused) is answered alike.
  const later = failure([{ refused: new LoraAdapterError("This engine's runner cannot apply LoRA adapters") } as unknown as GenerateResult]);
  assert.deepEqual([later?.status, later?.param], [400, "model"]);
});

test("Over HTTP: an unloaded adapter in model is a 404 naming model; load and unload requests name lora_name or lora_path", async () => {
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 64, allowRuntimeLora: true });
  const post = async (route: string, body: unknown) => {
    const res = await fetch(`${s.url}/v1/${route}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
    const text = await res.text();
    return { status: res.status, param: res.ok ? undefined : (JSON.parse(text) as { error: { param: string | null } }).error.param };
  };
  try {
    const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 });
    assert.deepEqual(await post("load_lora_adapter", { lora_name: "x", lora_path: adapter }), { status: 200, param: undefined });
    assert.equal((await client.completions.create({ model: "x", prompt: "Once", max_tokens: 2 })).model, "x");
    assert.deepEqual(await post("load_lora_adapter", { lora_name: "x", lora_path: adapter }), { status: 400, param: "lora_name" }, "loaded twice");
    assert.deepEqual(await post("load_lora_adapter", { lora_name: "stories260K", lora_path: adapter }), { status: 400, param: "lora_name" }, "the base model's name");
    assert.deepEqual(await post("load_lora_adapter", { lora_path: adapter }), { status: 400, param: "lora_name" }, "no name");
    assert.deepEqual(await post("load_lora_adapter", { lora_name: "y" }), { status: 400, param: "lora_path" }, "no path");
    assert.deepEqual(await post("load_lora_adapter", { lora_name: "y", lora_path: `${dir}/missing.gguf` }), { status: 404, param: "lora_path" }, "no such file");
    assert.deepEqual(await post("load_lora_adapter", { lora_name: "y", lora_path: junk }), { status: 400, param: "lora_path" }, "not an adapter");
    assert.deepEqual(await post("unload_lora_adapter", { lora_name: "y" }), { status: 404, param: "lora_name" }, "unload of a name not loaded");
    assert.deepEqual(await post("unload_lora_adapter", { lora_name: "x" }), { status: 200, param: undefined });
    await assert.rejects(
      client.completions.create({ model: "x", prompt: "Once", max_tokens: 2 }),
      (e: unknown) => e instanceof OpenAI.NotFoundError && (e.error as { param?: string }).param === "model",
    );
  } finally {
    await s.shutdown();
  }
});
