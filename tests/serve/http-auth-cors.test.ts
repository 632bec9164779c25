/**
 * The HTTP layer around the routes, in-process (`app.request`): the API key (OpenAI's 401 shape,
 * a case-insensitive Bearer scheme, /health and /version open as vLLM's), CORS as vLLM's default
 * (any origin, preflight answered before the key is asked for) and GET /version.
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { projectRoot, test } from "../harness.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { createEngine } from "../../src/engine/engine-factory.ts";
import { loadModel } from "../../src/model/load.ts";
import { createApp, SERVER_VERSION } from "../../src/serve/app.ts";

const model = await loadModel(`${projectRoot}/models/stories260K.gguf`);
const engine = createEngine(createReferenceBackend(), model, { numBlocks: 64, maxModelLen: 256 });
const app = createApp({ engine, model, modelName: "stories260K", apiKey: "sk-test" });

test("createApp() with apiKey answers a missing or wrong key with OpenAI's 401 and takes the Bearer scheme in any case", async () => {
  for (const headers of [{}, { authorization: "Bearer sk-tesT" }, { authorization: "Bearer sk-test-longer" }, { authorization: "sk-test" }, { "x-api-key": "nope" }] as Record<string, string>[]) {
    const r = await app.request("/v1/models", { headers });
    assert.equal(r.status, 401, JSON.stringify(headers));
    const body = await r.json() as { error: { type: string; code: string; message: string; param: null } };
    assert.equal(body.error.code, "invalid_api_key");
    assert.equal(body.error.type, "invalid_request_error");
    assert.equal(body.error.param, null);
  }
  for (const authorization of ["Bearer sk-test", "bearer sk-test", "BEARER sk-test"]) {
    assert.equal((await app.request("/v1/models", { headers: { authorization } })).status, 200, authorization);
  }
  assert.equal((await app.request("/v1/models", { headers: { "x-api-key": "sk-test" } })).status, 200);
  assert.equal((await app.request("/health")).status, 200, "/health needs no key");
  assert.equal((await app.request("/version")).status, 200, "/version needs no key");
});

test("createApp() answers a CORS preflight with 204 before asking for the API key, and marks answers for any origin", async () => {
  const pre = await app.request("/v1/chat/completions", {
    method: "OPTIONS",
    headers: { origin: "http://localhost:3000", "access-control-request-method": "POST", "access-control-request-headers": "authorization,content-type" },
  });
  assert.equal(pre.status, 204);
  assert.equal(pre.headers.get("access-control-allow-origin"), "*");
  assert.match(pre.headers.get("access-control-allow-methods") ?? "", /POST/);
  assert.match(pre.headers.get("access-control-allow-headers") ?? "", /authorization/);
  const denied = await app.request("/v1/models", { headers: { origin: "http://localhost:3000" } });
  assert.equal(denied.status, 401);
  assert.equal(denied.headers.get("access-control-allow-origin"), "*", "a browser can read the 401");
  const ok = await app.request("/v1/models", { headers: { origin: "http://localhost:3000", authorization: "Bearer sk-test" } });
  assert.equal(ok.headers.get("access-control-allow-origin"), "*");
});

test("GET /version reports package.json's version; other methods get 405", async () => {
  const pkg = JSON.parse(readFileSync(`${projectRoot}/package.json`, "utf8")) as { version: string };
  assert.equal(SERVER_VERSION, pkg.version);
  const r = await app.request("/version");
  assert.deepEqual(await r.json(), { version: pkg.version });
  const post = await app.request("/version", { method: "POST" });
  assert.equal(post.status, 405);
  assert.equal(post.headers.get("allow"), "GET, HEAD");
});

test("createApp() with allowedOrigins marks answers only for those origins", async () => {
  const narrow = createApp({ engine, model, modelName: "stories260K", allowedOrigins: ["https://chat.example.com"] });
  const preflight = (origin: string) => narrow.request("/v1/chat/completions", { method: "OPTIONS", headers: { origin, "access-control-request-method": "POST" } });
  assert.equal((await preflight("https://chat.example.com")).headers.get("access-control-allow-origin"), "https://chat.example.com");
  assert.equal((await preflight("https://evil.example.com")).headers.get("access-control-allow-origin"), null);
  const get = await narrow.request("/v1/models", { headers: { origin: "https://evil.example.com" } });
  assert.equal(get.status, 200);
  assert.equal(get.headers.get("access-control-allow-origin"), null, "a browser on another origin cannot read it");
  const mine = await narrow.request("/v1/models", { headers: { origin: "https://chat.example.com" } });
  assert.equal(mine.headers.get("access-control-allow-origin"), "https://chat.example.com");
  assert.match(mine.headers.get("vary") ?? "", /Origin/, "caches keep one answer per origin");
  const stream = await narrow.request("/v1/completions", {
    method: "POST", headers: { origin: "https://chat.example.com", "content-type": "application/json" },
    body: JSON.stringify({ model: "stories260K", prompt: "Once", max_tokens: 2, stream: true }),
  });
  assert.equal(stream.status, 200);
  assert.equal(stream.headers.get("access-control-allow-origin"), "https://chat.example.com", "a streamed answer is marked too");
  await stream.text();
});
