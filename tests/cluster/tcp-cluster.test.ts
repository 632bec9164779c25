/** Workers as separate processes over TCP (`worker --listen`), driven by a cluster in this process. */
import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { startWorker } from "../worker-process.ts";
import { parseAddress, startTcpCluster } from "../../src/cluster/create-cluster.ts";
import { RemoteWorkerError } from "../../src/cluster/remote-engine.ts";
import { WorkerAuthError } from "../../src/cluster/worker-auth.ts";
import { greedy, model, modelPath, oneEngine, run, STORY } from "./fixtures.ts";

test("startTcpCluster() drives worker processes over TCP and moves a prefill's KV between them", async () => {
  const expected = await oneEngine(greedy(STORY));
  const workers = await Promise.all([startWorker(), startWorker()]);
  try {
    const cl = await startTcpCluster(model, modelPath, "reference", workers.map((w) => w.addr), {
      roles: ["prefill", "decode"], planner: "none", router: "kv-aware", routerOptions: { localPrefillThreshold: 0 }, engine: { numBlocks: 64 },
    });
    try {
      const { streamed, result } = await run(cl, greedy(STORY));
      assert.deepEqual(streamed, expected, "two processes stream what one engine generates");
      assert.equal(cl.counters.prefillHandoffs, 1);
      assert.equal(cl.counters.movedBlocks, Math.ceil(STORY.length / 16), "the prompt's blocks moved to the decode process, its partial last block too");
    assert.equal(cl.workers[1].engine.stats().prefixHitTokens, STORY.length - 1, "the decode process computed only the last prompt token again");
      assert.equal(result.cachedTokens, 0, "reported as cached: what was cached before the request (nothing)");
      const more = await Promise.all(Array.from({ length: 4 }, (_, i) => run(cl, greedy(STORY.slice(0, 20 + i), 6))));
      for (const m of more) assert.equal(m.result.completionTokens, 6, m.result.error);
    } finally {
      await cl.stop();
    }
    // The worker processes outlive the cluster: a new one connects and is served.
    const again = await startTcpCluster(model, modelPath, "reference", workers.map((w) => w.addr), { planner: "none", engine: { numBlocks: 64 } });
    try {
      const r = await run(again, greedy(STORY));
      assert.deepEqual(r.streamed, expected);
    } finally {
      await again.stop();
    }
    for (const w of workers) assert.equal(w.child.exitCode, null, "the worker is still running");
  } finally {
    for (const w of workers) w.child.kill();
  }
});

test("startTcpCluster() names a worker it cannot reach, and parseAddress() a bad address", async () => {
  await assert.rejects(
    startTcpCluster(model, modelPath, "reference", ["127.0.0.1:9"], { planner: "none" }),
    (e: unknown) => e instanceof RemoteWorkerError && /worker-0 at 127\.0\.0\.1:9 cannot be reached/.test(e.message),
  );
  assert.deepEqual(parseAddress("[::1]:9001"), { host: "::1", port: 9001 });
  assert.throws(() => parseAddress("localhost"), /host:port, got "localhost"/);
  assert.throws(() => parseAddress("h:70000"), /host:port, got "h:70000"/);
  assert.throws(() => parseAddress("127.0.0.1:0"), /host:port, got "127.0.0.1:0"/, "port 0 is no address to connect to");
  assert.deepEqual(parseAddress("127.0.0.1:0", 0), { host: "127.0.0.1", port: 0 }, "a worker may listen on any free port");
});

test("startServer({ transport: \"tcp\" }) serves the openai client from worker processes", async () => {
  const { startServer } = await import("../../src/serve/server.ts");
  const OpenAI = (await import("openai")).default;
  const workers = await Promise.all([startWorker(), startWorker()]);
  try {
    const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 64, transport: "tcp", workerAddrs: workers.map((w) => w.addr) });
    try {
      assert.match(s.backendReason, /in each of 2 worker processes/);
      const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 });
      const c = await client.completions.create({ model: "stories260K", prompt: "Once upon a time", max_tokens: 20, temperature: 0 });
      assert.equal(c.choices[0].text, ", there was a little girl named Lily. She loved to play outsid");
      const metrics = await (await fetch(`${s.url}/metrics`)).text();
      assert.match(metrics, /evolving:worker_role\{model_name="stories260K",worker="worker-1",role="mixed"\} 1/);
    } finally {
      await s.shutdown();
    }
  } finally {
    for (const w of workers) w.child.kill();
  }
});

test("startTcpCluster() with a worker token serves from a worker started with it, is refused by one with another, and refuses a worker with another model", async () => {
  const [good, other] = await Promise.all([startWorker("s3cret"), startWorker("another")]);
  try {
    assert.match(good.log(), /worker token required/);
    const cl = await startTcpCluster(model, modelPath, "reference", [good.addr], { planner: "none", engine: { numBlocks: 64 }, workerToken: "s3cret" });
    try {
      assert.deepEqual((await run(cl, greedy(STORY))).streamed, await oneEngine(greedy(STORY)));
    } finally {
      await cl.stop();
    }
    await assert.rejects(
      startTcpCluster(model, modelPath, "reference", [other.addr], { planner: "none", engine: { numBlocks: 64 }, workerToken: "s3cret" }),
      (e: unknown) => e instanceof WorkerAuthError && /refused the server: The server's worker token does not match/.test(e.message),
    );
    await assert.rejects(
      startTcpCluster(model, modelPath, "reference", [other.addr], { planner: "none", engine: { numBlocks: 64 } }),
      (e: unknown) => e instanceof WorkerAuthError && /requires the worker token/.test(e.message),
    );
    // A server whose model is not the one the worker loaded (here: one embedding byte differs) refuses it.
    const data = model.weights.tokenEmbedding.data.slice();
    data[0] ^= 0xff;
    const altered = { ...model, weights: { ...model.weights, tokenEmbedding: { ...model.weights.tokenEmbedding, data } } };
    await assert.rejects(
      startTcpCluster(altered, modelPath, "reference", [good.addr], { planner: "none", engine: { numBlocks: 64 }, workerToken: "s3cret" }),
      (e: unknown) => e instanceof RemoteWorkerError && /Worker worker-0 loaded another model than this server's \(fingerprint [0-9a-f]{12} against [0-9a-f]{12}\)/.test(e.message),
    );
    assert.equal(other.child.exitCode, null, "a refused server does not take the worker down");
    assert.match(other.log(), /refused a connection/);
  } finally {
    good.child.kill();
    other.child.kill();
  }
});
