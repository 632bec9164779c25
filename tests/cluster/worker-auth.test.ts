import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { greetServer, greetWorker, WorkerAuthError } from "../../src/cluster/worker-auth.ts";
import type { ThreadPort } from "../../src/runtime/threads.ts";

/** Two ports joined back to back, delivering each message on a later turn (as a socket would). */
function portPair(): [ThreadPort, ThreadPort] {
  const make = (): ThreadPort & { peer?: ThreadPort & { deliver(m: unknown): void }; deliver(m: unknown): void } => {
    let handler: (m: unknown) => void = () => {};
    const p = {
      peer: undefined as (ThreadPort & { deliver(m: unknown): void }) | undefined,
      deliver: (m: unknown) => void setTimeout(() => handler(structuredClone(m)), 0),
      post: (m: unknown) => p.peer!.deliver(m),
      onMessage: (fn: (m: unknown) => void) => void (handler = fn),
      onError: () => {},
      close: () => Promise.resolve(),
    };
    return p;
  };
  const a = make(), b = make();
  a.peer = b;
  b.peer = a;
  return [a, b];
}

async function greet(serverToken: string | undefined, workerToken: string | undefined) {
  const [server, worker] = portPair();
  const w = greetServer(worker, workerToken, 2000);
  const s = greetWorker(server, "w0", "10.0.0.1:9001", serverToken, 2000);
  const [ws, ss] = await Promise.allSettled([w, s]);
  return { worker: ws, server: ss };
}

const reason = (r: PromiseSettledResult<void>) => (r.status === "rejected" ? (r.reason as Error) : undefined);

test("greetWorker() and greetServer() agree without a token and with the same token", async () => {
  for (const [s, w] of [[undefined, undefined], ["s3cret", "s3cret"]] as const) {
    const r = await greet(s, w);
    assert.equal(r.server.status, "fulfilled", String(reason(r.server)));
    assert.equal(r.worker.status, "fulfilled", String(reason(r.worker)));
  }
});

test("greetWorker() and greetServer() refuse a wrong or missing token on either side, naming the worker", async () => {
  const wrong = await greet("one", "two");
  assert.match(reason(wrong.worker)!.message, /The server's worker token does not match this worker's/);
  assert.ok(reason(wrong.server) instanceof WorkerAuthError);
  assert.match(reason(wrong.server)!.message, /Worker w0 at 10\.0\.0\.1:9001 refused the server: The server's worker token does not match/);
  const serverless = await greet(undefined, "two");
  assert.match(reason(serverless.server)!.message, /Worker w0 at 10\.0\.0\.1:9001 requires the worker token/);
  const workerless = await greet("one", undefined);
  assert.match(reason(workerless.server)!.message, /does not check the worker token; start it with the same --worker-token/);
});

test("greetWorker() refuses a worker that claims to check the token but cannot prove it knows it", async () => {
  const [server, fake] = portPair();
  fake.onMessage((m) => {
    if ((m as { op: string }).op === "auth") fake.post({ op: "authed", mac: "0".repeat(64) });
  });
  fake.post({ op: "hello", v: 1, nonce: "abc", auth: true });
  // (A generous deadline: the refusal comes at once; only a loaded machine's slow turns could reach it.)
  await assert.rejects(greetWorker(server, "w0", "10.0.0.1:9001", "s3cret", 30_000), /did not prove it knows the worker token/);
  // A peer that says nothing (not a worker) is named after the timeout.
  const [server2] = portPair();
  await assert.rejects(greetWorker(server2, "w1", "10.0.0.2:1", undefined, 50), /Worker w1 at 10\.0\.0\.2:1 did not greet/);
});
