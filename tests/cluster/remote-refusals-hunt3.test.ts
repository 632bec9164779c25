/**
 * Bug hunt: what only a worker thread's (or process's) engine can refuse — a full queue, an adapter it
 * does not have, a reasoning budget or grammar it cannot follow — arrives after `submit` returned a
 * handle. It reaches the cluster as the same typed error one engine throws, and the client as the same
 * status one engine's server gives (429, 404, 400), streamed or not: never a 500.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { test } from "../harness.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { startThreadCluster } from "../../src/cluster/create-cluster.ts";
import { relayHandle } from "../../src/cluster/relay-handle.ts";
import { RemoteEngine } from "../../src/cluster/remote-engine.ts";
import type { FromWorker, ToWorker } from "../../src/cluster/worker-protocol.ts";
import { LoraAdapterError } from "../../src/engine/engine-adapters.ts";
import { createEngine } from "../../src/engine/engine-factory.ts";
import {
  ContextLengthError, EngineOverloadedError, type GenerateRequest, RequestParamError, SessionRefusedError,
} from "../../src/engine/engine-types.ts";
import { loadLoraAdapter } from "../../src/model/lora-load.ts";
import { writeFile } from "../../src/runtime/fs.ts";
import { startServer } from "../../src/serve/server.ts";
import { loraGgufBytes } from "../model/lora-files.ts";
import { greedy, model, modelPath, scriptedPort, STORY } from "./fixtures.ts";

const post = (url: string, path: string, body: unknown) =>
  fetch(`${url}${path}`, { method: "POST", headers: { "content-type": "application/json", "anthropic-version": "2023-06-01" }, body: JSON.stringify(body) });

/** Status, Retry-After and body of a response (the body read whole, a stream's too). */
async function answer(r: Response): Promise<{ status: number; retryAfter: string | null; body: string }> {
  return { status: r.status, retryAfter: r.headers.get("retry-after"), body: await r.text() };
}


test("RemoteEngine: a worker's 'rejected' reaches the handle as the typed error its engine threw", async () => {
  const { port, sent, reply } = scriptedPort();
  const remote = await RemoteEngine.over(port, "w0", { path: "model.gguf" }, "reference", {}, () => {});
  try {
    const cases: [Omit<Extract<FromWorker, { op: "rejected" }>, "op" | "rid">, (e: unknown) => boolean][] = [
      [{ name: "EngineOverloadedError", message: "1 requests are already waiting" }, (e) => e instanceof EngineOverloadedError],
      [{ name: "SessionRefusedError", message: "No room" }, (e) => e instanceof SessionRefusedError],
      [{ name: "RequestParamError", message: "A reasoning budget needs the model's reasoning tokens" }, (e) => e instanceof RequestParamError],
      [{ name: "ContextLengthError", message: "The prompt has 9 tokens" }, (e) => e instanceof ContextLengthError],
      [{ name: "LoraAdapterError", message: 'The LoRA adapter "a" is not loaded', notFound: true }, (e) => e instanceof LoraAdapterError && e.notFound],
    ];
    for (const [rejected, typed] of cases) {
      const h = remote.submit({ prompt: [1, 2, 3], maxTokens: 2 });
      const rid = (sent.at(-1) as Extract<ToWorker, { op: "submit" }>).rid;
      reply({ op: "rejected", rid, ...rejected });
      const refusal = await h.refusal;
      const r = await h.result;
      assert.ok(typed(r.refused), `${rejected.name} comes back as its class, got ${String(r.refused)}`);
      assert.equal(r.refused!.message, rejected.message);
      assert.equal(refusal, r.refused, "the handle's refusal is the result's");
      assert.equal(r.error, `${rejected.name}: ${rejected.message}`);
    }
    // A worker's fault is no refusal: its result says so as before, and nothing is typed.
    const odd = remote.submit({ prompt: [1, 2, 3], maxTokens: 2 });
    reply({ op: "rejected", rid: (sent.at(-1) as Extract<ToWorker, { op: "submit" }>).rid, name: "TypeError", message: "x is undefined" });
    assert.equal(await odd.refusal, undefined);
    assert.deepEqual([(await odd.result).refused, (await odd.result).error], [undefined, "TypeError: x is undefined"]);
    // Taken: the refusal settles with nothing before any token.
    const ok = remote.submit({ prompt: [1, 2, 3], maxTokens: 2 });
    reply({ op: "accepted", rid: (sent.at(-1) as Extract<ToWorker, { op: "submit" }>).rid });
    assert.equal(await ok.refusal, undefined);
    ok.cancel();
  } finally {
    await remote.stop();
  }
});

test("relayHandle(): a hand-off whose decoding worker refuses the request carries the typed refusal", async () => {
  const full = new EngineOverloadedError("1 requests are already waiting");
  const h = relayHandle(0, 3, undefined, Promise.reject(full), () => {});
  assert.equal(await h.refusal, full);
  assert.equal((await h.result).refused, full);
  // A hop that fails otherwise (a worker gone) is no refusal.
  const gone = relayHandle(1, 3, undefined, Promise.reject(new Error("Worker w1 failed")), () => {});
  assert.equal(await gone.refusal, undefined);
  assert.deepEqual([(await gone.result).refused, (await gone.result).error], [undefined, "Error: Worker w1 failed"]);
});

for (const handOff of [false, true]) test(`startThreadCluster(): what only the worker's engine refuses comes back as one engine's typed error${handOff ? " on the hand-off path" : ""}`, async () => {
  const one = createEngine(createReferenceBackend(), model, { numBlocks: 64 });
  const cl = await startThreadCluster(model, modelPath, "reference", {
    planner: "none", engine: { numBlocks: 64 },
    ...(handOff ? { workers: 2, roles: ["prefill", "decode"], router: "kv-aware", routerOptions: { localPrefillThreshold: 0 } } : { workers: 1 }),
  });
  try {
    const refused: GenerateRequest[] = [
      { ...greedy(STORY, 2), reasoningBudget: 2 },
      { ...greedy(STORY, 2), grammar: { kind: "choice", choices: [] } },
    ];
    for (const req of refused) {
      let alone: unknown;
      try {
        one.submit(req).cancel();
      } catch (e) {
        alone = e;
      }
      assert.ok(alone instanceof RequestParamError);
      const h = cl.submit(req);
      const r = await h.result;
      assert.ok(r.refused instanceof RequestParamError, `the worker's refusal is a RequestParamError, got ${String(r.refused)}`);
      assert.equal(r.refused.message, alone.message);
      assert.equal(await h.refusal, r.refused);
    }
    const ok = cl.submit(greedy(STORY, 2));
    assert.equal(await ok.refusal, undefined);
    assert.equal((await ok.result).completionTokens, 2);
    assert.equal(cl.counters.prefillHandoffs, handOff ? 1 : 0);
  } finally {
    await one.stop();
    await cl.stop();
  }
});

test("A worker thread's full queue is the 429 one engine's server gives, streamed or not", async () => {
  const bodies = [
    ["/v1/completions", { model: "stories260K", prompt: "Once upon a time", max_tokens: 4, n: 8 }],
    ["/v1/completions", { model: "stories260K", prompt: "Once upon a time", max_tokens: 4, n: 8, stream: true }],
    ["/v1/chat/completions", { model: "stories260K", messages: [{ role: "user", content: "Hi" }], max_tokens: 4, n: 8, stream: true }],
  ] as const;
  const answers = async (workers: number) => {
    // Each engine takes one waiting request: n = 8 in one burst fills every queue.
    const s = await startServer({
      modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 64, workers, maxWaiting: 1, planner: "none",
      ...(workers > 1 ? { transport: "threads" as const } : {}),
    });
    try {
      const out = [];
      for (const [path, body] of bodies) out.push(await answer(await post(s.url, path, body)));
      // Still serving.
      const ok = await post(s.url, "/v1/completions", { model: "stories260K", prompt: "Once upon a time", max_tokens: 2 });
      assert.equal(ok.status, 200, await ok.text());
      return out;
    } finally {
      await s.shutdown();
    }
  };
  const alone = await answers(1);
  assert.equal(alone[0].status, 429);
  assert.deepEqual(await answers(2), alone);
});

test("A LoRA adapter missing on the worker threads is the 404 of a model that is not served, streamed or not", async () => {
  const dir = mkdtempSync(`${tmpdir()}/remote-refusals-`);
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 64, workers: 2, transport: "threads", planner: "none" });
  try {
    const path = `${dir}/a.gguf`;
    await writeFile(path, loraGgufBytes(model.config, { seed: 3, rank: 4, alpha: 8, targets: [{ layer: 0, target: "wq" }], magnitude: 0.5 }));
    await s.cluster!.loadAdapter("a", await loadLoraAdapter(path, model.config));
    // The workers lose it behind the cluster's back (as a worker process restarted under its name would).
    for (const w of s.cluster!.workers) await w.engine.unloadAdapter("a");
    const error = { message: 'The LoRA adapter "a" is not loaded', type: "invalid_request_error", param: "model", code: "model_not_found" };
    for (const stream of [false, true]) {
      const r = await answer(await post(s.url, "/v1/completions", { model: "a", prompt: "Once upon a time", max_tokens: 4, stream }));
      assert.deepEqual([r.status, JSON.parse(r.body)], [404, { error }], `stream ${stream}: ${r.body}`);
      const m = await answer(await post(s.url, "/v1/messages", { model: "a", messages: [{ role: "user", content: "Hi" }], max_tokens: 4, stream }));
      assert.deepEqual([m.status, JSON.parse(m.body)], [404, { type: "error", error: { type: "not_found_error", message: error.message } }], m.body);
    }
    const base = await post(s.url, "/v1/completions", { model: "stories260K", prompt: "Once upon a time", max_tokens: 2 });
    assert.equal(base.status, 200, await base.text());
  } finally {
    await s.shutdown();
    rmSync(dir, { recursive: true, force: true });
  }
});
