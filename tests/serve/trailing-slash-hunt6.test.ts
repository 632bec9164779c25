/**
 * A route written with a trailing slash (`/v1/chat/completions/`, `/v1/models/`) is the same route,
 * as FastAPI's `redirect_slashes` makes it on vLLM: clients whose base URL ends in a slash, or that
 * join paths that way, get an answer instead of a 404.
 */
import assert from "node:assert/strict";
import OpenAI from "openai";
import { projectRoot, test } from "../harness.ts";
import { loadModel } from "../../src/model/load.ts";
import { startServer } from "../../src/serve/server.ts";

const modelPath = `${projectRoot}/models/stories260K.gguf`;
const model = await loadModel(modelPath);

test("createApp() serves a route written with a trailing slash as the route itself", async () => {
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 64 });
  try {
    const ask = { model: "stories260K", messages: [{ role: "user", content: "Once" }], max_tokens: 4, temperature: 0 };
    const plain = await fetch(`${s.url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(ask) });
    const slashed = await fetch(`${s.url}/v1/chat/completions/`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(ask) });
    assert.equal(plain.status, 200);
    assert.equal(slashed.status, 200, await slashed.clone().text());
    const a = (await plain.json()) as { choices: { message: { content: string } }[] };
    const b = (await slashed.json()) as { choices: { message: { content: string } }[] };
    assert.equal(b.choices[0].message.content, a.choices[0].message.content);

    const models = await fetch(`${s.url}/v1/models/`);
    assert.equal(models.status, 200);
    assert.ok(((await models.json()) as { data: unknown[] }).data.length >= 1);
    // The openai client with a base URL ending in a slash.
    const client = new OpenAI({ baseURL: `${s.url}/v1/`, apiKey: "none", maxRetries: 0 });
    const c = await client.completions.create({ model: "stories260K", prompt: "Once", max_tokens: 3, temperature: 0 });
    assert.equal(c.choices.length, 1);
    // A wrong method on the slashed path is still the 405 naming the method, and an unknown path a 404.
    const get = await fetch(`${s.url}/v1/chat/completions/`);
    assert.equal(get.status, 405);
    await get.body?.cancel();
    const unknown = await fetch(`${s.url}/v1/nothing/`);
    assert.equal(unknown.status, 404);
    await unknown.body?.cancel();
  } finally {
    await s.shutdown();
  }
});
