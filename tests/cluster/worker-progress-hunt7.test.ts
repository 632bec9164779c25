/**
 * A starting worker reports its progress ("loading"), so the start timeout bounds its silence, not its
 * whole load: a worker that keeps talking past the timeout starts, one that falls silent is given up
 * on naming the last stage it reported, and a real worker (thread or TCP) says "loading" before "ready".
 */
import assert from "node:assert/strict";
import net from "node:net";
import { test } from "../harness.ts";
import { RemoteEngine, RemoteWorkerError } from "../../src/cluster/remote-engine.ts";
import { connectPort, socketPort } from "../../src/cluster/tcp-port.ts";
import { serveWorker } from "../../src/cluster/worker-host.ts";
import type { FromWorker } from "../../src/cluster/worker-protocol.ts";
import { watchWorkerStart } from "../../src/cluster/worker-start.ts";
import { spawnThread, type ThreadPort } from "../../src/runtime/threads.ts";
import { modelPath } from "./fixtures.ts";

/** Rejects when `p` has not settled within `ms`. */
function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`${what} did not settle within ${ms} ms`)), ms)));
  return Promise.race([p, late]).finally(() => clearTimeout(timer));
}

/**
 * A thread of the fixture that starts slowly, once it listens (its "up" taken): its boot, slow on a
 * busy machine, does not count against a start timeout of a fraction of a second.
 */
async function slowStarter(): Promise<ThreadPort> {
  const port = await spawnThread(new URL("./thread-fixtures/loads-slowly.ts", import.meta.url));
  await within(new Promise<void>((resolve) => port.onMessage(() => resolve())), 30_000, "the fixture thread's boot");
  return port;
}

/** `port`, keeping each message that comes from the worker in `heard`. */
function recording(port: ThreadPort, heard: FromWorker[]): ThreadPort {
  return {
    post: (m, transfer) => port.post(m, transfer),
    onMessage: (fn) =>
      port.onMessage((m) => {
        heard.push(m as FromWorker);
        fn(m);
      }),
    onError: (fn) => port.onError(fn),
    close: () => port.close(),
  };
}


test("a worker that says \"loading\" every 100 ms for 2.5 s starts under a 1 s start timeout, and its progress never reaches the engine's stand-in", async () => {
  const port = await slowStarter();
  const received: FromWorker[] = [];
  const failed: Error[] = [];
  try {
    const ready = watchWorkerStart(port, "worker-0", "talks.gguf", 1, { receive: (m) => received.push(m), fail: (e) => failed.push(e) });
    const t0 = Date.now();
    port.post({ op: "init", modelPath: "talks.gguf", backend: "reference", workerId: "worker-0", engine: {} });
    const msg = await within(ready, 30_000, "the start of a worker that reports progress");
    assert.equal(msg.op, "ready");
    assert.ok(Date.now() - t0 >= 2400, "it took longer than the timeout");
    assert.deepEqual(received.map((m) => m.op), [], "progress is no message for the engine's stand-in");
    assert.deepEqual(failed, []);
  } finally {
    await port.close();
  }
  // Through RemoteEngine.over() as a server starts it.
  const remote = await within(
    RemoteEngine.over(await slowStarter(), "worker-1", { path: "talks.gguf" }, "reference", {}, () => {}, { startTimeoutS: 1 }),
    30_000, "RemoteEngine.over() of a worker that reports progress",
  );
  assert.equal(remote.alive, true);
  assert.equal(remote.maxModelLen, 512);
  await remote.stop();
});

test("a worker that reports progress, then falls silent, is given up on after the timeout, naming the last stage it reported and how far it got", async () => {
  const port = await slowStarter();
  const t0 = Date.now();
  await within(
    assert.rejects(RemoteEngine.over(port, "worker-2", { path: "falls-silent.gguf" }, "reference", {}, () => {}, { startTimeoutS: 0.5 }), (e: unknown) => {
      assert.ok(e instanceof RemoteWorkerError, String(e));
      assert.match(
        e.message,
        /^Worker worker-2 did not report ready: it was silent for 0\.5 s while loading "falls-silent\.gguf", since it reported stage "model" \(\d+\.\d of 8\.0 MiB read\) .*set EVOLVING_WORKER_START_TIMEOUT_S to wait longer\)$/,
      );
      return true;
    }),
    30_000, "the start of a worker that fell silent",
  );
  // Its last progress came about 0.2 s in: the wait counted from there, not from the start.
  assert.ok(Date.now() - t0 >= 600, `gave up after ${Date.now() - t0} ms`);
});

/** The ops a real worker sent until "ready", asserting the stages it reported in order. */
function assertReportedStages(heard: FromWorker[]): void {
  const upToReady = heard.slice(0, heard.findIndex((m) => m.op === "ready") + 1);
  assert.equal(upToReady.at(-1)?.op, "ready", JSON.stringify(heard.map((m) => m.op)));
  const stages = upToReady.flatMap((m) => (m.op === "loading" && m.done === undefined ? [m.stage] : []));
  assert.deepEqual(stages, ["model", "backend", "engine"]);
  for (const m of upToReady) {
    if (m.op !== "loading" || m.done === undefined) continue;
    assert.ok(m.total !== undefined && m.done > 0 && m.done <= m.total, JSON.stringify(m));
  }
}

test("a worker thread on the bundled model says \"loading\" at each stage of its start before \"ready\"", async () => {
  const heard: FromWorker[] = [];
  const port = recording(await spawnThread(new URL("../../src/cluster/thread-host.ts", import.meta.url)), heard);
  const remote = await RemoteEngine.over(port, "worker-3", { path: modelPath }, "reference", { numBlocks: 16 }, () => {});
  try {
    assertReportedStages(heard);
  } finally {
    await remote.stop();
  }
});

test("a worker served over TCP says \"loading\" at each stage of its start before \"ready\", through the framing", async () => {
  const served: Promise<void>[] = [];
  const server = net.createServer((s) => void served.push(serveWorker(socketPort(s))));
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()));
  const heard: FromWorker[] = [];
  try {
    const port = recording(await connectPort("127.0.0.1", (server.address() as net.AddressInfo).port), heard);
    const remote = await RemoteEngine.over(port, "worker-4", { path: modelPath }, "reference", { numBlocks: 16 }, () => {});
    try {
      assertReportedStages(heard);
    } finally {
      await remote.stop();
    }
    await Promise.all(served);
  } finally {
    await new Promise<void>((r) => server.close(() => r()));
  }
});
