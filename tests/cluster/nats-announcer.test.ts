import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import process from "node:process";
import { projectRoot, test } from "../harness.ts";
import { announceWorkerInThread } from "../../src/cluster/nats-announcer.ts";
import { connectControlPlane, ControlPlaneError, parseAnnouncement } from "../../src/cluster/nats-membership.ts";
import type { WorkerAnnouncement } from "../../src/cluster/worker-directory.ts";
import { startNatsServer } from "./nats-server.ts";

test("announceWorkerInThread() announces a worker on NATS until it leaves, and names a NATS server it cannot reach", async () => {
  const nats = await startNatsServer();
  const nc = await connectControlPlane(nats.url, "test");
  try {
    const heard: WorkerAnnouncement[] = [];
    let wake = () => {};
    nc.subscribe("evolving.thread-test.workers", {
      callback: (_e, m) => {
        const a = parseAnnouncement(new TextDecoder().decode(m.data));
        if (a) heard.push(a);
        wake();
      },
    });
    await nc.flush();
    const until = async (what: string, ok: () => boolean) => {
      const deadline = Date.now() + 20_000;
      while (!ok()) {
        if (Date.now() > deadline) throw new Error(`No ${what} within 20 s; heard ${JSON.stringify(heard)}`);
        await new Promise<void>((r) => ((wake = r), setTimeout(r, 200)));
      }
    };
    const announcer = await announceWorkerInThread(nats.url, "test-worker", "thread-test", { id: "w-t", addr: "127.0.0.1:9001" }, { intervalMs: 50 });
    await until("two heartbeats", () => heard.filter((a) => a.state === "ready").length >= 2);
    assert.deepEqual(heard[0], { id: "w-t", addr: "127.0.0.1:9001", state: "ready" });
    await announcer.leave();
    await until("leaving", () => heard.some((a) => a.state === "leaving"));
    await announcer.close();
    const after = heard.length;
    await new Promise((r) => setTimeout(r, 300));
    assert.equal(heard.length, after, "no heartbeat after leaving");
  } finally {
    await nc.close();
    nats.stop();
  }
  await assert.rejects(
    announceWorkerInThread("127.0.0.1:1", "test-worker", "thread-test", { id: "w-x", addr: "127.0.0.1:9002" }),
    (e: unknown) => e instanceof ControlPlaneError && /Cannot reach the NATS server at "127\.0\.0\.1:1"/.test(e.message),
  );
});

test("announceWorkerInThread() tells onLost once when its thread dies while announcing, and then refuses to leave, naming why", async () => {
  const lost: Error[] = [];
  let wake = () => {};
  const announcer = await announceWorkerInThread("127.0.0.1:4222", "test-worker", "lost-test", { id: "w-l", addr: "127.0.0.1:9003" }, {
    threadModule: new URL("./thread-fixtures/announces-then-dies.ts", import.meta.url),
    onLost: (e) => {
      lost.push(e);
      wake();
    },
  });
  const deadline = Date.now() + 20_000;
  while (lost.length === 0 && Date.now() < deadline) await new Promise<void>((r) => ((wake = r), setTimeout(r, 200)));
  assert.equal(lost.length, 1, "onLost told once");
  assert.match(lost[0].message, /announcer bug/);
  await assert.rejects(announcer.leave(), (e: unknown) => e instanceof ControlPlaneError && /^The NATS announcing thread stopped: .*announcer bug/.test(e.message));
  await announcer.close();
  assert.equal(lost.length, 1, "nothing more once closed");
});

test("announceWorkerInThread() on Node loads the NATS client outside the calling isolate, whose ArrayBuffers stay undetached", async () => {
  const nats = await startNatsServer();
  try {
    // The driver detaches one buffer of its own after announcing, or not: under the trace, that adds a
    // line only if its isolate had detached none before (V8 invalidates the protector once per isolate).
    const run = (mode: string) => {
      const r = spawnSync("node", ["--trace-protector-invalidation", "--import", `${projectRoot}/node_modules/tsx/dist/loader.mjs`, `${projectRoot}/tests/cluster/announce-driver.ts`, nats.url, mode], {
        encoding: "utf8", env: { ...process.env, NODE_OPTIONS: "" }, timeout: 60_000,
      });
      assert.equal(r.status, 0, r.stderr);
      return r.stdout.split("Invalidating protector cell ArrayBufferDetaching").length - 1;
    };
    const kept = run("keep");
    const detached = run("detach");
    assert.equal(detached - kept, 1, `the calling isolate had detached a buffer already (${kept} invalidations without the driver's own, ${detached} with)`);
  } finally {
    nats.stop();
  }
});
