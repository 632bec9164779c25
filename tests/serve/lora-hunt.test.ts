/**
 * LoRA serving as vLLM users drive it: `--lora-modules` in vLLM's JSON form (an object with name, path
 * and base_model_name, whose commas a pair list would split apart), and `/v1/load_lora_adapter` with
 * `load_inplace` (vLLM's LoadLoRAAdapterRequest), which replaces an adapter under the same name.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import OpenAI from "openai";
import { loadModel } from "../../src/model/load.ts";
import { writeFile } from "../../src/runtime/fs.ts";
import { parseLoraModules } from "../../src/serve/lora.ts";
import { startServer } from "../../src/serve/server.ts";
import { projectRoot, test } from "../harness.ts";
import { loraGgufBytes } from "../model/lora-files.ts";

test("parseLoraModules() reads vLLM's JSON form of --lora-modules", () => {
  assert.deepEqual(parseLoraModules('{"name": "sql-lora", "path": "/adapters/sql", "base_model_name": "llama"}'), [{ name: "sql-lora", path: "/adapters/sql" }]);
  assert.deepEqual(
    parseLoraModules('[{"name": "a", "path": "/x/a.gguf"}, {"name": "b", "path": "/x/b"}]'),
    [{ name: "a", path: "/x/a.gguf" }, { name: "b", path: "/x/b" }],
  );
  // The pair form is unchanged, a path with "=" included.
  assert.deepEqual(parseLoraModules("a=/x/a.gguf, b=/x/b=2"), [{ name: "a", path: "/x/a.gguf" }, { name: "b", path: "/x/b=2" }]);
  const refuses = (spec: string, re: RegExp) => assert.throws(() => parseLoraModules(spec), (e: Error) => e instanceof RangeError && re.test(e.message));
  refuses('{"name": "a"}', /--lora-modules JSON entries are \{"name": …, "path": …\} objects .*got \{"name":"a"\}/);
  refuses('{"name": "a", "path": "/p", "rank": 8}', /JSON entries are/);
  refuses('[{"name": "a", "path": "/p"}, {"name": "a", "path": "/q"}]', /--lora-modules names "a" twice/);
  refuses('{"name": "a", "path": ', /--lora-modules JSON is not valid/);
  refuses("a", /takes name=path pairs/);
});

const modelPath = `${projectRoot}/models/stories260K.gguf`;
const model = await loadModel(modelPath);
const dir = mkdtempSync(`${tmpdir()}/lora-hunt-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
const c = model.config;
const targets = Array.from({ length: c.numLayers }, (_, layer) => (["wq", "wv", "wUp"] as const).map((target) => ({ layer, target }))).flat();
const first = `${dir}/first.gguf`, second = `${dir}/second.gguf`;
await writeFile(first, loraGgufBytes(c, { seed: 11, rank: 4, alpha: 8, targets, magnitude: 0.5 }));
await writeFile(second, loraGgufBytes(c, { seed: 12, rank: 4, alpha: 8, targets, magnitude: 0.5 }));

test("POST /v1/load_lora_adapter with load_inplace replaces the adapter of that name, as vLLM's", async () => {
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 128, allowRuntimeLora: true });
  const post = async (body: unknown) => {
    const res = await fetch(`${s.url}/v1/load_lora_adapter`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
    return { status: res.status, text: await res.text() };
  };
  try {
    const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 });
    const text = async (name: string) => (await client.completions.create({ model: name, prompt: "Once upon a time", max_tokens: 12, temperature: 0 })).choices[0].text;
    assert.equal((await post({ lora_name: "live", lora_path: first })).status, 200);
    assert.equal((await post({ lora_name: "reference", lora_path: second })).status, 200);
    const [firstText, secondText] = [await text("live"), await text("reference")];
    assert.notEqual(firstText, secondText, "the two adapters answer differently");
    assert.equal((await post({ lora_name: "live", lora_path: second })).status, 400, "without load_inplace a loaded name is refused");
    assert.equal((await post({ lora_name: "live", lora_path: `${dir}/none.gguf`, load_inplace: true })).status, 404);
    assert.equal(await text("live"), firstText, "a replacement that cannot be read leaves the adapter serving");
    // Refused while a request uses the adapter; the request runs on.
    const running = await client.completions.create({ model: "live", prompt: "Once upon a time", max_tokens: 300, temperature: 0, stream: true, ignore_eos: true } as OpenAI.CompletionCreateParamsStreaming);
    const chunks = running[Symbol.asyncIterator]();
    await chunks.next();
    const busy = await post({ lora_name: "live", lora_path: second, load_inplace: true });
    assert.equal(busy.status, 400, busy.text);
    assert.match(busy.text, /The LoRA adapter \\"live\\" is in use by 1 request/);
    let n = 1;
    while (!(await chunks.next()).done) n++;
    assert.ok(n > 1);
    const replaced = await post({ lora_name: "live", lora_path: second, load_inplace: true });
    assert.deepEqual([replaced.status, replaced.text], [200, "Success: LoRA adapter 'live' added successfully."]);
    assert.equal(await text("live"), secondText);
    const models = (await client.models.list()).data as (OpenAI.Model & { root: string })[];
    assert.deepEqual(models.map((m) => [m.id, m.root]), [["stories260K", "stories260K"], ["reference", second], ["live", second]]);
  } finally {
    await s.shutdown();
  }
});
