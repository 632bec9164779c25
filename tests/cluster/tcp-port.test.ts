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
  let timer: ReturnType<typeof setTimeout> | undefined;
  const got = await Promise.race([
    new Promise<unknown>((r) => client.onMessage(r)),
    // A lost message never comes: the deadline only ends the wait, so it is generous (a loaded CI machine).
    new Promise((_, reject) => (timer = setTimeout(() => reject(new Error("the early message was lost")), 30_000))),
  ]);
  clearTimeout(timer);
  assert.deepEqual(got, { op: "hello", n: 1 });
  await client.close();
  await new Promise<void>((r) => server.close(() => r()));
});

/** A socket stand-in that hands socketPort() the bytes it is given, in the chunks it is given. */
function chunkedSocket() {
  const handlers = new Map<string, (arg: unknown) => void>();
  const fake = {
    destroyed: false,
    setNoDelay: () => fake,
    on: (event: string, fn: (arg: unknown) => void) => (handlers.set(event, fn), fake),
    write: () => true,
    end: (cb?: () => void) => cb?.(),
    destroy: () => void (fake.destroyed = true),
  };
  return { socket: fake as unknown as net.Socket, feed: (chunk: Uint8Array) => handlers.get("data")!(chunk) };
}

/** The bytes one post() of `m` puts on the wire. */
function wireBytes(m: unknown): Uint8Array {
  const parts: Uint8Array[] = [];
  const fake = { setNoDelay: () => fake, on: () => fake, write: (b: Uint8Array) => (parts.push(b), true) };
  socketPort(fake as unknown as net.Socket).post(m);
  assert.equal(parts.length, 1);
  return parts[0];
}

test("socketPort() reads frames split anywhere across chunks, and several in one chunk", () => {
  const a = { op: "a", data: new Float32Array([1, 2, 3]) };
  const b = { op: "b", halves: Uint16Array.from([7, 8, 9]) };
  const wire = new Uint8Array([...wireBytes(a), ...wireBytes(b), ...wireBytes(a)]);
  for (const size of [1, 3, 5, 17, wire.length]) {
    const s = chunkedSocket();
    const port = socketPort(s.socket);
    const got: unknown[] = [];
    port.onMessage((m) => got.push(m));
    port.onError((e) => assert.fail(`chunks of ${size}: ${e.message}`));
    for (let o = 0; o < wire.length; o += size) s.feed(wire.subarray(o, o + size));
    assert.deepEqual(got.map((m) => (m as { op: string }).op), ["a", "b", "a"], `chunks of ${size}`);
    assert.deepEqual(Array.from((got[1] as { halves: Uint16Array }).halves), [7, 8, 9]);
    assert.deepEqual(Array.from((got[2] as { data: Float32Array }).data), [1, 2, 3]);
  }
});

test("socketPort() copies a large frame's bytes a bounded number of times, however many chunks it comes in (a KV move over TCP)", () => {
  const wire = wireBytes({ op: "import", kv: new Float32Array(256 * 1024) });
  const s = chunkedSocket();
  const port = socketPort(s.socket);
  let got: unknown;
  port.onMessage((m) => (got = m));
  // Count the bytes copied between typed arrays while the frame arrives in 16 KiB chunks.
  const set = Uint8Array.prototype.set;
  let copied = 0;
  Uint8Array.prototype.set = function (this: Uint8Array, src: ArrayLike<number>, offset?: number) {
    copied += src.length;
    return set.call(this, src, offset);
  };
  try {
    for (let o = 0; o < wire.length; o += 16 * 1024) s.feed(wire.slice(o, o + 16 * 1024));
  } finally {
    Uint8Array.prototype.set = set;
  }
  assert.equal((got as { kv: Float32Array }).kv.length, 256 * 1024);
  // Joining the buffer at every chunk copies a 1 MiB frame's bytes 32 times over; once is enough.
  assert.ok(copied <= 2 * wire.length, `copied ${copied} bytes for a ${wire.length}-byte frame`);
});
