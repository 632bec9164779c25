import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { serveWorker } from "../../src/cluster/worker-host.ts";
import type { ThreadPort } from "../../src/runtime/threads.ts";
import { modelPath } from "./fixtures.ts";

/**
 * A port whose peer is the test: what the worker posts is kept, with the ops of messages posted with
 * a non-empty transfer list; `deliver` and `drop` act as the cluster.
 */
function fakePort() {
  const posted: { op: string; value?: unknown }[] = [];
  const transferred: string[] = [];
  let seen: () => void = () => {};
  let onMessage: (m: unknown) => void = () => {};
  let onError: (e: Error) => void = () => {};
  const port: ThreadPort = {
    post: (m, transfer) => {
      posted.push(m as { op: string });
      if (transfer !== undefined && transfer.length > 0) transferred.push((m as { op: string }).op);
      seen();
    },
    onMessage: (fn) => void (onMessage = fn),
    onError: (fn) => void (onError = fn),
    close: () => Promise.resolve(),
  };
  /** Resolves once the worker has posted a message with one of `ops`. */
  const posts = async (ops: string[]) => {
    while (!posted.some((m) => ops.includes(m.op))) await new Promise<void>((r) => (seen = r));
  };
  return { port, posted, transferred, posts, deliver: (m: unknown) => onMessage(m), drop: () => onError(new Error("The connection closed")) };
}

const init = { op: "init", modelPath, backend: "reference", workerId: "w0", engine: {} };

test("serveWorker() starts no engine for a cluster whose connection dropped while the model loaded", async () => {
  // Control: the same init on a port that stays up serves.
  const up = fakePort();
  const upDone = serveWorker(up.port);
  up.deliver(init);
  await up.posts(["ready", "failed"]);
  assert.deepEqual(up.posted.map((m) => m.op).filter((op) => op === "ready" || op === "failed"), ["ready"]);
  up.drop();
  await upDone;

  // The server goes away (killed, restarted) before the load completes: no engine may be left
  // running with a backend that nothing will ever stop.
  const p = fakePort();
  const done = serveWorker(p.port);
  p.deliver(init);
  p.drop();
  await done;
  assert.deepEqual(p.posted.map((m) => m.op), [], "nothing started or announced after the drop");
});

test("serveWorker() answers an export with a copy of the prefix, transferring no buffer", async () => {
  // A transfer would detach the worker's own buffers, and one detach slows every CPU kernel its
  // thread runs from then on (V8's ArrayBufferDetaching protector; scripts/bench-detach.ts).
  const p = fakePort();
  const done = serveWorker(p.port);
  p.deliver(init);
  await p.posts(["ready"]);
  const prompt = Array.from({ length: 40 }, (_, i) => 10 + i);
  p.deliver({ op: "submit", rid: 1, req: { prompt, maxTokens: 2, temperature: 0 } });
  await p.posts(["result"]);
  p.deliver({ op: "export", cid: 7, tokens: prompt });
  await p.posts(["reply"]);
  const prefix = p.posted.find((m) => m.op === "reply")!.value as { kv: { k: Float32Array[] } } | null;
  assert.ok(prefix && prefix.kv.k.length > 0 && prefix.kv.k[0].length > 0, "the cached prompt's blocks were exported");
  assert.deepEqual(p.transferred, [], "no message transfers a buffer");
  p.drop();
  await done;
});
