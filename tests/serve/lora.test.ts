/**
 * LoRA adapters over HTTP with the real `openai` client: `--lora-modules` adapters listed as models
 * whose parent is the base, requests for them answered as the merged weights would answer, runtime
 * loading and unloading (vLLM's routes, behind --allow-runtime-lora-updating), and `cache_salt`.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import OpenAI from "openai";
import { loadModel } from "../../src/model/load.ts";
import { loadLoraAdapter } from "../../src/model/lora-load.ts";
import { writeFile } from "../../src/runtime/fs.ts";
import { parseLoraModules } from "../../src/serve/lora.ts";
import { type RunningServer, startServer } from "../../src/serve/server.ts";
import { projectRoot, test } from "../harness.ts";
import { loraGgufBytes, mergeLora } from "../model/lora-files.ts";

const modelPath = `${projectRoot}/models/stories260K.gguf`;
const model = await loadModel(modelPath);
const dir = mkdtempSync(`${tmpdir()}/lora-serve-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
const c = model.config;
const targets = Array.from({ length: c.numLayers }, (_, layer) => (["wq", "wk", "wv", "wo", "wGate", "wUp", "wDown"] as const).map((target) => ({ layer, target }))).flat();
const pirate = `${dir}/pirate.gguf`, parrot = `${dir}/parrot.gguf`, wrongArch = `${dir}/qwen.gguf`;
await writeFile(pirate, loraGgufBytes(c, { seed: 7, rank: 8, alpha: 16, targets, magnitude: 0.5 }));
await writeFile(parrot, loraGgufBytes(c, { seed: 8, rank: 4, alpha: 0, targets: targets.slice(0, 7), magnitude: 0.6 }));
await writeFile(wrongArch, loraGgufBytes({ ...c, architecture: "qwen2" }, { seed: 9, rank: 2, alpha: 0, targets: targets.slice(0, 1) }));

const PROMPT = "Once upon a time, there was a little girl named Lily. She loved to play";
const ask = { prompt: PROMPT, max_tokens: 16, temperature: 0, ignore_eos: true } as const;

async function serve(options: { merged?: string; lora?: boolean; runtime?: boolean }): Promise<RunningServer> {
  const m = options.merged ? mergeLora(model, await loadLoraAdapter(options.merged, c)) : model;
  return await startServer({
    modelPath, model: m, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 256,
    ...(options.lora ? { loraModules: parseLoraModules(`pirate=${pirate}`) } : {}),
    ...(options.runtime ? { allowRuntimeLora: true } : {}),
  });
}
const clientOf = (s: RunningServer) => new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 });
const post = async (s: RunningServer, path: string, body: unknown) => {
  const res = await fetch(`${s.url}${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  return { status: res.status, text: await res.text() };
};

/** What a server with `adapter` merged into its weights answers. */
async function mergedText(adapter: string): Promise<string> {
  const s = await serve({ merged: adapter });
  try {
    return (await clientOf(s).completions.create({ model: "stories260K", ...ask })).choices[0].text;
  } finally {
    await s.shutdown();
  }
}
const pirateText = await mergedText(pirate);
const parrotText = await mergedText(parrot);

test("--lora-modules serves each adapter as a model whose parent is the base, answering as its merged weights", async () => {
  const s = await serve({ lora: true });
  try {
    const client = clientOf(s);
    const cards = (await client.models.list()).data as (OpenAI.Model & { parent: string | null; root: string | null })[];
    assert.deepEqual(cards.map((m) => [m.id, m.parent, m.root]), [["stories260K", null, "stories260K"], ["pirate", "stories260K", pirate]]);
    const [base, adapted] = await Promise.all([
      client.completions.create({ model: "stories260K", ...ask }),
      client.completions.create({ model: "pirate", ...ask }),
    ]);
    assert.notEqual(adapted.choices[0].text, base.choices[0].text, "the adapter changes the answer");
    assert.equal(adapted.choices[0].text, pirateText);
    assert.equal(adapted.model, "pirate");
    const chat = await client.chat.completions.create({ model: "pirate", messages: [{ role: "user", content: "Hi" }], max_tokens: 4 });
    assert.equal(chat.model, "pirate");
    const response = await client.responses.create({ model: "pirate", input: "Hi", max_output_tokens: 4 });
    assert.equal(response.model, "pirate");
    await assert.rejects(client.completions.create({ model: "parrot", ...ask }), (e: unknown) => {
      return e instanceof OpenAI.NotFoundError && /The model 'parrot' does not exist; this server serves 'stories260K' and its LoRA adapters 'pirate'/.test(e.message);
    });
    const metrics = await (await fetch(`${s.url}/metrics`)).text();
    assert.match(metrics, /vllm:lora_requests_info\{model_name="stories260K",max_lora="64",running_lora_adapters="",waiting_lora_adapters=""\} \d/);
    assert.match(metrics, /evolving:lora_adapters_loaded\{model_name="stories260K"\} 1\n/);
    const off = await post(s, "/v1/load_lora_adapter", { lora_name: "parrot", lora_path: parrot });
    assert.equal(off.status, 404);
    assert.match(off.text, /start the server with --allow-runtime-lora-updating/);
  } finally {
    await s.shutdown();
  }
});

test("POST /v1/load_lora_adapter and /v1/unload_lora_adapter change the served adapters while the server runs", async () => {
  const s = await serve({ runtime: true });
  try {
    const client = clientOf(s);
    const loaded = await post(s, "/v1/load_lora_adapter", { lora_name: "parrot", lora_path: parrot });
    assert.deepEqual([loaded.status, loaded.text], [200, "Success: LoRA adapter 'parrot' added successfully."]);
    assert.equal((await client.completions.create({ model: "parrot", ...ask })).choices[0].text, parrotText);
    const again = await post(s, "/v1/load_lora_adapter", { lora_name: "parrot", lora_path: pirate });
    assert.equal(again.status, 400);
    assert.match(again.text, /The LoRA adapter 'parrot' has already been loaded/);
    const missing = await post(s, "/v1/load_lora_adapter", { lora_name: "ghost", lora_path: `${dir}/none.gguf` });
    assert.equal(missing.status, 404, missing.text);
    const foreign = await post(s, "/v1/load_lora_adapter", { lora_name: "qwen", lora_path: wrongArch });
    assert.equal(foreign.status, 400);
    assert.match(foreign.text, /is for architecture \\"qwen2\\", the base model is \\"llama\\"/);
    const base = await post(s, "/v1/load_lora_adapter", { lora_name: "stories260K", lora_path: pirate });
    assert.equal(base.status, 400);
    assert.equal((await post(s, "/v1/load_lora_adapter", { lora_name: "pirate", lora_path: pirate })).status, 200);
    assert.equal((await client.completions.create({ model: "pirate", ...ask })).choices[0].text, pirateText);
    const gone = await post(s, "/v1/unload_lora_adapter", { lora_name: "parrot" });
    assert.deepEqual([gone.status, gone.text], [200, "Success: LoRA adapter 'parrot' removed successfully."]);
    assert.equal((await post(s, "/v1/unload_lora_adapter", { lora_name: "parrot" })).status, 404);
    assert.deepEqual((await client.models.list()).data.map((m) => m.id), ["stories260K", "pirate"]);
    await assert.rejects(client.completions.create({ model: "parrot", ...ask }), OpenAI.NotFoundError);
    assert.equal((await client.completions.create({ model: "pirate", ...ask })).choices[0].text, pirateText, "the remaining adapter is unchanged");
  } finally {
    await s.shutdown();
  }
});

test("cache_salt keeps prompts of different salts from sharing the prefix cache", async () => {
  const s = await serve({});
  try {
    const client = clientOf(s);
    const cached = async (salt?: string) => {
      const r = await client.completions.create({ model: "stories260K", ...ask, ...(salt === undefined ? {} : { cache_salt: salt }) } as OpenAI.CompletionCreateParamsNonStreaming);
      return (r.usage as OpenAI.CompletionUsage & { prompt_tokens_details: { cached_tokens: number } }).prompt_tokens_details.cached_tokens;
    };
    assert.equal(await cached(), 0);
    assert.ok(await cached() > 0, "unsalted, the second request hits the cache");
    assert.equal(await cached("tenant-a-secret"), 0, "a salt does not see unsalted KV");
    assert.equal(await cached("tenant-b-secret"), 0, "nor another salt's");
    assert.ok(await cached("tenant-a-secret") > 0, "the same salt does");
    const bad = await post(s, "/v1/completions", { model: "stories260K", ...ask, cache_salt: "" });
    assert.equal(bad.status, 400);
    assert.match(bad.text, /cache_salt.*must be a non-empty string/);
  } finally {
    await s.shutdown();
  }
});
