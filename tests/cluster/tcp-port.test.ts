import assert from "node:assert/strict";
import net from "node:net";
import { test } from "../harness.ts";
import { connectPort, FrameError, socketPort } from "../../src/cluster/tcp-port.ts";

/** A loopback server whose one connection gets a socketPort with `maxFrameBytes`. */
async function pair(maxFrameBytes: number) {
  let resolveServerSide!: (p: ReturnType<typeof socketPort>) => void;
  const serverSide = new Promise<ReturnType<typeof socketPort>>((r) => (resolveServerSide = r));
  const server = net.createServer((s) => resolveServerSide(socketPort(s, maxFrameBytes)));
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()));
  const client = await connectPort("127.0.0.1", (server.address() as net.AddressInfo).port);
  return { client, server: await serverSide, close: () => new Promise<void>((r) => server.close(() => r())) };
}

test("socketPort() carries JSON with Float32Arrays both ways, and fails a frame over its limit before buffering it", async () => {
  const p = await pair(64 * 1024);
  const got = new Promise<unknown>((r) => p.server.onMessage(r));
  p.client.post({ op: "x", data: new Float32Array([1.5, -2, 3]) });
  const m = got as Promise<{ op: string; data: Float32Array }>;
  assert.deepEqual(Array.from((await m).data), [1.5, -2, 3]);
  const failed = new Promise<Error>((r) => p.server.onError(r));
  p.client.post({ op: "big", data: new Float32Array(64 * 1024) });
  const e = await failed;
  assert.ok(e instanceof FrameError, String(e));
  assert.match(e.message, /A frame of \d+ bytes is over the 65536-byte limit/);
  await p.client.close();
  await p.close();
});

test("socketPort() sends an array referenced twice once, and it arrives as one array (MLA's keys are its values)", async () => {
  const k = new Float32Array(1000).map((_, i) => i / 7);
  // A 6000-byte frame limit fits one copy of the 4000-byte array, not two.
  const p = await pair(6000);
  const got = new Promise<unknown>((resolve, reject) => {
    p.server.onMessage(resolve);
    p.server.onError(reject);
  });
  p.client.post({ kv: { k: [k], v: [k] }, extra: new Float32Array([4, 5]) });
  const m = (await got) as { kv: { k: Float32Array[]; v: Float32Array[] }; extra: Float32Array };
  assert.equal(m.kv.v[0], m.kv.k[0], "one array on the receiving side");
  assert.deepEqual(Array.from(m.kv.k[0]), Array.from(k));
  assert.deepEqual(Array.from(m.extra), [4, 5]);
  await p.client.close();
  await p.close();
});

test("socketPort() carries Uint16Arrays (an f16 cache's KV as half bits) as Uint16Arrays, beside Float32Arrays", async () => {
  const halves = Uint16Array.from({ length: 999 }, (_, i) => (i * 131) & 0xffff);
  // 999 half values are 1998 bytes: an odd count of 2-byte values, as f32 they could not be read back.
  const p = await pair(64 * 1024);
  const got = new Promise<unknown>((resolve, reject) => {
    p.server.onMessage(resolve);
    p.server.onError(reject);
  });
  p.client.post({ kv: { dtype: "f16", k: [halves], v: [halves] }, f32: new Float32Array([0.25]) });
  const m = (await got) as { kv: { k: unknown[]; v: unknown[] }; f32: unknown };
  assert.ok(m.kv.k[0] instanceof Uint16Array, `arrived as ${Object.prototype.toString.call(m.kv.k[0])}`);
  assert.equal(m.kv.v[0], m.kv.k[0], "one array on the receiving side");
  assert.deepEqual(Array.from(m.kv.k[0]), Array.from(halves));
  assert.ok(m.f32 instanceof Float32Array);
  assert.deepEqual(Array.from(m.f32), [0.25]);
  await p.client.close();
  await p.close();
});

test("socketPort() keeps messages that arrive before its handler is set (a worker greets first)", async () => {
  const server = net.createServer((s) => socketPort(s).post({ op: "hello", n: 1 }));
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()));
  const client = await connectPort("127.0.0.1", (server.address() as net.AddressInfo).port);
  await new Promise((r) => setTimeout(r, 100)); // the greeting has arrived by now, with no handler set
  const got = await Promise.race([
    new Promise<unknown>((r) => client.onMessage(r)),
    new Promise((_, reject) => setTimeout(() => reject(new Error("the early message was lost")), 2000)),
  ]);
  assert.deepEqual(got, { op: "hello", n: 1 });
  await client.close();
  await new Promise<void>((r) => server.close(() => r()));
});
