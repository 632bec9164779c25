/**
 * The cluster protocol over TCP (node:net, on Deno and Node): a worker process listens
 * (`src/cli/worker.ts`), the cluster connects. Each message is one frame: a 4-byte length, a 4-byte
 * header length, the message as JSON with every Float32Array and Uint16Array replaced by a reference,
 * then those arrays' bytes (KV moves as raw f32 values or half bits, not as JSON numbers).
 */
import net from "node:net";
import type { ThreadPort } from "../runtime/threads.ts";

/** Thrown when a frame cannot be read (a peer speaking something else). */
export class FrameError extends Error {
  override name = "FrameError";
}

/** A typed array sent after the JSON: its index among the frame's arrays, by kind. */
type BufferRef = { $f32: number } | { $u16: number };

type RawArray = Float32Array | Uint16Array;

function encode(message: unknown): Uint8Array {
  const arrays: RawArray[] = [];
  // An array met twice is sent once (an MLA layer's values are its keys' array): both references
  // come back as one array.
  const seen = new Map<RawArray, number>();
  const json = JSON.stringify(message, (_k, v) => {
    if (v instanceof Float32Array || v instanceof Uint16Array) {
      let at = seen.get(v);
      if (at === undefined) seen.set(v, (at = arrays.push(v) - 1));
      return (v instanceof Float32Array ? { $f32: at } : { $u16: at }) satisfies BufferRef;
    }
    return v;
  });
  const header = new TextEncoder().encode(json);
  const size = 8 + header.length + arrays.reduce((a, x) => a + 4 + x.byteLength, 0);
  const out = new Uint8Array(size);
  const view = new DataView(out.buffer);
  view.setUint32(0, size - 4);
  view.setUint32(4, header.length);
  out.set(header, 8);
  let o = 8 + header.length;
  for (const a of arrays) {
    view.setUint32(o, a.byteLength);
    out.set(new Uint8Array(a.buffer, a.byteOffset, a.byteLength), o + 4);
    o += 4 + a.byteLength;
  }
  return out;
}

function decode(frame: Uint8Array): unknown {
  const view = new DataView(frame.buffer, frame.byteOffset, frame.byteLength);
  const headerLength = view.getUint32(0);
  if (4 + headerLength > frame.length) throw new FrameError(`A frame of ${frame.length} bytes announces a ${headerLength}-byte header`);
  const json = new TextDecoder().decode(frame.subarray(4, 4 + headerLength));
  // Raw bytes by index; each becomes a typed array of the kind its reference names.
  const raw: ArrayBuffer[] = [];
  let o = 4 + headerLength;
  while (o < frame.length) {
    const n = view.getUint32(o);
    // Copy: the frame's bytes need not be aligned.
    raw.push(frame.slice(o + 4, o + 4 + n).buffer);
    o += 4 + n;
  }
  const typed = new Map<number, RawArray>();
  const arrayAt = (at: number, make: (b: ArrayBuffer) => RawArray, width: number): RawArray => {
    if (raw[at] === undefined) throw new FrameError(`A frame refers to array ${at} but carries ${raw.length}`);
    if (raw[at].byteLength % width !== 0) throw new FrameError(`A frame's array ${at} of ${raw[at].byteLength} bytes is not of ${width}-byte values`);
    let a = typed.get(at);
    if (a === undefined) typed.set(at, (a = make(raw[at])));
    return a;
  };
  return JSON.parse(json, (_k, v) => {
    if (v === null || typeof v !== "object") return v;
    if (typeof (v as { $f32?: unknown }).$f32 === "number") return arrayAt((v as { $f32: number }).$f32, (b) => new Float32Array(b), 4);
    if (typeof (v as { $u16?: unknown }).$u16 === "number") return arrayAt((v as { $u16: number }).$u16, (b) => new Uint16Array(b), 2);
    return v;
  });
}

/** A socket's port, whose largest accepted frame can change (small until the peer has greeted). */
export interface SocketPort extends ThreadPort {
  /** Frames announcing more bytes fail the port (FrameError) and close the socket. */
  setMaxFrameBytes(n: number): void;
}

/** A port over a connected socket; frames over `maxFrameBytes` (default 4 GiB − 1: any) fail it. */
export function socketPort(socket: net.Socket, maxFrameBytes = 0xffffffff): SocketPort {
  let maxFrame = maxFrameBytes;
  // Messages that arrive before a handler is set (a peer that speaks first, as a worker's greeting
  // does, can beat the caller's onMessage) wait for it instead of being lost.
  let onMessage: ((m: unknown) => void) | undefined;
  const early: unknown[] = [];
  let onError: (e: Error) => void = () => {};
  // Received bytes not yet read as frames, as the chunks they came in: a frame is joined once, when
  // all its bytes are here (joining at every chunk copied a large KV move's bytes once per chunk).
  const chunks: Uint8Array[] = [];
  let buffered = 0;
  /** The first `n` buffered bytes, taken out of the buffer (a view when one chunk holds them). */
  const take = (n: number): Uint8Array => {
    if (n === 0) return new Uint8Array(0);
    buffered -= n;
    const first = chunks[0];
    if (first.length >= n) {
      if (first.length === n) chunks.shift();
      else chunks[0] = first.subarray(n);
      // A plain view: a Node Buffer's slice() would be a view too, and decode() copies with slice().
      return new Uint8Array(first.buffer, first.byteOffset, n);
    }
    const out = new Uint8Array(n);
    let o = 0;
    while (o < n) {
      const c = chunks[0];
      const k = Math.min(c.length, n - o);
      out.set(k === c.length ? c : c.subarray(0, k), o);
      o += k;
      if (k === c.length) chunks.shift();
      else chunks[0] = c.subarray(k);
    }
    return out;
  };
  /** The length prefix of the next frame, without taking it. */
  const peekLength = (): number => {
    const head = chunks[0].length >= 4 ? chunks[0] : (() => {
      const b = new Uint8Array(4);
      let o = 0;
      for (const c of chunks) {
        const k = Math.min(c.length, 4 - o);
        b.set(c.subarray(0, k), o);
        if ((o += k) === 4) break;
      }
      return b;
    })();
    return new DataView(head.buffer, head.byteOffset, 4).getUint32(0);
  };
  socket.setNoDelay(true);
  socket.on("data", (chunk: Uint8Array) => {
    if (chunk.length === 0) return;
    chunks.push(chunk);
    buffered += chunk.length;
    while (buffered >= 4) {
      const n = peekLength();
      if (n > maxFrame) {
        // Refused before its bytes are buffered: an unauthenticated peer cannot make us hold gigabytes.
        onError(new FrameError(`A frame of ${n} bytes is over the ${maxFrame}-byte limit`));
        socket.destroy();
        return;
      }
      if (buffered - 4 < n) return;
      take(4);
      let message: unknown;
      try {
        message = decode(take(n));
      } catch (e) {
        onError(e instanceof Error ? e : new Error(String(e)));
        socket.destroy();
        return;
      }
      if (onMessage) onMessage(message);
      else early.push(message);
    }
  });
  socket.on("error", (e) => onError(e));
  socket.on("close", () => onError(new Error("The connection closed")));
  return {
    setMaxFrameBytes: (n) => void (maxFrame = n),
    post: (m) => void socket.write(encode(m)),
    onMessage: (fn) => {
      onMessage = fn;
      while (early.length > 0 && onMessage === fn) fn(early.shift());
    },
    onError: (fn) => (onError = fn),
    close: () => new Promise<void>((resolve) => {
      if (socket.destroyed) return resolve();
      socket.end(() => resolve());
      socket.destroy();
    }),
  };
}

/** Connects to a worker listening at `host:port`. */
export function connectPort(host: string, port: number): Promise<ThreadPort> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ host, port }, () => {
      socket.off("error", reject);
      resolve(socketPort(socket));
    });
    socket.once("error", reject);
  });
}
