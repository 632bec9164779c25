/** spawnThread() delivers what the parent posts, on Deno and Node alike. */
import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { spawnThread } from "../../src/runtime/threads.ts";

test("spawnThread() delivers messages posted at once to an entry that listens only after a slow start, in order", async () => {
  const port = await spawnThread(new URL("./fixtures/thread-slow-listener.ts", import.meta.url));
  try {
    const got: unknown[] = [];
    const all = new Promise<void>((resolve, reject) => {
      port.onMessage((m) => {
        got.push(m);
        if (got.length === 3) resolve();
      });
      port.onError(reject);
      setTimeout(() => reject(new Error(`only ${got.length} of 3 echoes in 10 s: ${JSON.stringify(got)}`)), 10_000);
    });
    // Posted before the entry has run: Deno's worker would drop them (no handler yet) unless they wait.
    const buf = new Float32Array([1.5, -2]).buffer;
    port.post({ n: 1 });
    port.post({ n: 2, buf }, [buf]);
    port.post({ n: 3 });
    assert.equal(buf.byteLength, 0, "a transferred buffer is detached however long the message waits");
    await all;
    assert.deepEqual(got.map((m) => (m as { echo: { n: number } }).echo.n), [1, 2, 3]);
    assert.deepEqual([...new Float32Array((got[1] as { echo: { buf: ArrayBuffer } }).echo.buf)], [1.5, -2]);
  } finally {
    await port.close();
  }
});
