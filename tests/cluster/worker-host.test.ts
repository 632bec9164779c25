import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { serveWorker } from "../../src/cluster/worker-host.ts";
import type { ThreadPort } from "../../src/runtime/threads.ts";
import { modelPath } from "./fixtures.ts";

/** A port whose peer is the test: what the worker posts is kept; `deliver` and `drop` act as the cluster. */
function fakePort() {
  const posted: { op: string }[] = [];
  let seen: () => void = () => {};
  let onMessage: (m: unknown) => void = () => {};
  let onError: (e: Error) => void = () => {};
  const port: ThreadPort = {
    post: (m) => {
      posted.push(m as { op: string });
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
  return { port, posted, posts, deliver: (m: unknown) => onMessage(m), drop: () => onError(new Error("The connection closed")) };
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
  const posted: { m: { op: string; value?: unknown }; transfer: unknown }[] = [];
  let seen: () => void = () => {};
  let onMessage: (m: unknown) => void = () => {};
  let onError: (e: Error) => void = () => {};
  const port: ThreadPort = {
    post: (m, transfer) => {
      posted.push({ m: m as { op: string }, transfer });
      seen();
    },
    onMessage: (fn) => void (onMessage = fn),
    onError: (fn) => void (onError = fn),
    close: () => Promise.resolve(),
  };
  const posts = async (op: string) => {
    while (!posted.some((p) => p.m.op === op)) await new Promise<void>((r) => (seen = r));
    return posted.find((p) => p.m.op === op)!;
  };
  const done = serveWorker(port);
  onMessage(init);
  await posts("ready");
  const prompt = Array.from({ length: 40 }, (_, i) => 10 + i);
  onMessage({ op: "submit", rid: 1, req: { prompt, maxTokens: 2, temperature: 0 } });
  await posts("result");
  onMessage({ op: "export", cid: 7, tokens: prompt });
  const reply = await posts("reply");
  const prefix = reply.m.value as { kv: { k: Float32Array[] } } | null;
  assert.ok(prefix && prefix.kv.k.length > 0 && prefix.kv.k[0].length > 0, "the cached prompt's blocks were exported");
  assert.deepEqual(posted.filter((p) => p.transfer !== undefined && (p.transfer as unknown[]).length > 0).map((p) => p.m.op), [], "no message transfers a buffer");
  onError(new Error("The connection closed"));
  await done;
});
