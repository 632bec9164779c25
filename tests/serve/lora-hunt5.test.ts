/**
 * Hunt 5 over LoRA serving over HTTP: loads and unloads racing each other and the traffic (many loads
 * of one name, an unload of a name being loaded, in-place replacements at once), a name reloaded with
 * other weights answering from the new ones, the slot limit answered 400, and `/v1/models` keeping
 * `parent` and `root` in step with the engine's set through all of it.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import OpenAI from "openai";
import { loadModel } from "../../src/model/load.ts";
import { writeFile } from "../../src/runtime/fs.ts";
import { startServer } from "../../src/serve/server.ts";
import { projectRoot, test } from "../harness.ts";
import { loraGgufBytes } from "../model/lora-files.ts";

const modelPath = `${projectRoot}/models/stories260K.gguf`;
const model = await loadModel(modelPath);
const dir = mkdtempSync(`${tmpdir()}/lora-hunt5-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
const c = model.config;
const targets = Array.from({ length: c.numLayers }, (_, layer) => (["wq", "wv", "wUp"] as const).map((target) => ({ layer, target }))).flat();
const first = `${dir}/first.gguf`, second = `${dir}/second.gguf`, tiny = `${dir}/tiny.gguf`;
await writeFile(first, loraGgufBytes(c, { seed: 41, rank: 4, alpha: 8, targets, magnitude: 0.5 }));
await writeFile(second, loraGgufBytes(c, { seed: 42, rank: 2, alpha: 8, targets, magnitude: 0.5 }));
await writeFile(tiny, loraGgufBytes(c, { seed: 43, rank: 1, alpha: 1, targets: [{ layer: 0, target: "wq" }] }));

type Card = OpenAI.Model & { parent: string | null; root: string | null };

async function withServer(fn: (url: string, client: OpenAI) => Promise<void>): Promise<void> {
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 192, allowRuntimeLora: true });
  try {
    await fn(s.url, new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 }));
  } finally {
    await s.shutdown();
  }
}
const post = async (url: string, route: string, body: unknown) => {
  const res = await fetch(`${url}/v1/${route}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  return { status: res.status, text: await res.text() };
};
const PROMPT = "Once upon a time, there was a little girl named Lily. She loved to";
const complete = async (client: OpenAI, name: string) => (await client.completions.create({ model: name, prompt: PROMPT, max_tokens: 10, temperature: 0 })).choices[0].text;
const cards = async (client: OpenAI) => ((await client.models.list()).data as Card[]).map((m) => [m.id, m.parent, m.root]);

test("many concurrent loads of one name: one succeeds, the rest are 400s, and traffic meanwhile is answered", async () => {
  await withServer(async (url, client) => {
    const baseText = await complete(client, "stories260K");
    const loads = Array.from({ length: 8 }, (_, i) => post(url, "load_lora_adapter", { lora_name: "x", lora_path: i % 2 ? first : second }));
    const traffic = Array.from({ length: 4 }, () => complete(client, "stories260K"));
    const done = await Promise.all(loads);
    assert.deepEqual(done.map((d) => d.status).sort(), [200, 400, 400, 400, 400, 400, 400, 400], JSON.stringify(done));
    for (const d of done.filter((d) => d.status === 400)) assert.match(d.text, /already (been )?loaded/);
    assert.deepEqual(await Promise.all(traffic), [baseText, baseText, baseText, baseText]);
    // The path /v1/models names is the one whose weights answer.
    const winner = (await cards(client)).find(([id]) => id === "x")!;
    assert.equal(winner[1], "stories260K");
    const winnerPath = winner[2] as string;
    await post(url, "load_lora_adapter", { lora_name: "check", lora_path: winnerPath });
    assert.equal(await complete(client, "x"), await complete(client, "check"));
  });
});

test("an unload racing a load of the same name leaves the set and /v1/models agreeing", async () => {
  await withServer(async (url, client) => {
    for (let round = 0; round < 4; round++) {
      const [load, unload] = await Promise.all([
        post(url, "load_lora_adapter", { lora_name: "y", lora_path: first }),
        post(url, "unload_lora_adapter", { lora_name: "y" }),
      ]);
      assert.ok([200, 400].includes(load.status) && [200, 404].includes(unload.status), `${load.status} ${load.text} / ${unload.status} ${unload.text}`);
      const listed = (await cards(client)).some(([id]) => id === "y");
      const serving = await client.completions.create({ model: "y", prompt: "Hi", max_tokens: 1 }).then(() => true, (e) => {
        assert.ok(e instanceof OpenAI.NotFoundError, String(e));
        return false;
      });
      assert.equal(listed, serving, `round ${round}: /v1/models lists "y" exactly when it serves it`);
      if (serving) assert.equal((await post(url, "unload_lora_adapter", { lora_name: "y" })).status, 200);
    }
  });
});

test("concurrent in-place replacements end with one file's weights, the one /v1/models names", async () => {
  await withServer(async (url, client) => {
    const check = async (path: string) => {
      await post(url, "load_lora_adapter", { lora_name: "probe", lora_path: path });
      const t = await complete(client, "probe");
      await post(url, "unload_lora_adapter", { lora_name: "probe" });
      return t;
    };
    const [firstText, secondText] = [await check(first), await check(second)];
    assert.notEqual(firstText, secondText);
    assert.equal((await post(url, "load_lora_adapter", { lora_name: "z", lora_path: first })).status, 200);
    const done = await Promise.all([second, first, second].map((p) => post(url, "load_lora_adapter", { lora_name: "z", lora_path: p, load_inplace: true })));
    for (const d of done) assert.ok(d.status === 200 || d.status === 400, `${d.status} ${d.text}`);
    assert.ok(done.some((d) => d.status === 200));
    const z = (await cards(client)).filter(([id]) => id === "z");
    assert.equal(z.length, 1, "z is listed once");
    assert.equal(await complete(client, "z"), z[0][2] === first ? firstText : secondText, `z answers as ${z[0][2]}`);
  });
});

test("the adapter slot limit is a 400 naming it, and an unload makes room", async () => {
  await withServer(async (url, client) => {
    for (let i = 0; i < 64; i++) assert.equal((await post(url, "load_lora_adapter", { lora_name: `t${i}`, lora_path: tiny })).status, 200);
    const over = await post(url, "load_lora_adapter", { lora_name: "over", lora_path: tiny });
    assert.equal(over.status, 400, over.text);
    assert.match(over.text, /64 LoRA adapters are already loaded; unload one first/);
    assert.equal((await cards(client)).length, 65, "the refused one is not listed");
    assert.equal((await post(url, "unload_lora_adapter", { lora_name: "t3" })).status, 200);
    assert.equal((await post(url, "load_lora_adapter", { lora_name: "over", lora_path: first })).status, 200);
    assert.deepEqual((await cards(client)).at(-1), ["over", "stories260K", first]);
  });
});
