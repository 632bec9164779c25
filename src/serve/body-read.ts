/**
 * Reads a request's body before its route runs, so a route only ever sees a whole body: larger than
 * the limit → 413 (by its `Content-Length` at once, else as soon as the bytes that arrived pass it,
 * never holding more than the limit); no bytes for `idleMs` → 408 (Deno's server never times an
 * upload out, Node's only after 5 minutes: a client that stalls mid-body held its connection, and
 * was counted as a generation in flight, for that long); a body whose stream fails (a broken chunked
 * upload, a client gone) → 400, not a 500. Each of these answers closes its connection: the rest of
 * the body was not read, so the connection cannot carry another request.
 */
import type { Context, MiddlewareHandler } from "hono";
import { ApiError } from "./errors.ts";

/** How long the server waits for the next bytes of a request body by default (`bodyTimeoutMs`). */
export const DEFAULT_BODY_TIMEOUT_MS = 30_000;

/** What {@link readBodyFirst} allows and how it answers. */
export interface BodyReadOptions {
  /** Largest body accepted, in bytes. */
  maxBytes: number;
  /** Longest wait for the next bytes of a body, in ms. */
  idleMs: number;
  /** Writes an error response (the app's, in OpenAI's or Anthropic's shape). */
  fail: (c: Context, e: ApiError) => Response;
}

/** A read that did not come in time. */
const TIMED_OUT = Symbol("timed out");

/** The next read of `reader`, or TIMED_OUT after `ms`. */
async function readWithin(reader: ReadableStreamDefaultReader<Uint8Array>, ms: number): Promise<ReadableStreamReadResult<Uint8Array> | typeof TIMED_OUT> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  try {
    return await Promise.race([reader.read(), new Promise<typeof TIMED_OUT>((r) => (timer = setTimeout(() => r(TIMED_OUT), ms)))]);
  } finally {
    clearTimeout(timer);
  }
}

/** The middleware: reads the body whole (see the module's comment), then runs the route on it. */
export function readBodyFirst(o: BodyReadOptions): MiddlewareHandler {
  const refuse = (c: Context, e: ApiError) => {
    c.header("Connection", "close");
    return o.fail(c, e);
  };
  const tooLarge = () => new ApiError(413, `The request body is larger than ${o.maxBytes} bytes (the server's --max-body-bytes)`, null, "body_too_large");
  return async (c, next) => {
    const body = c.req.raw.body;
    if (!body) return next();
    const declared = c.req.header("content-length");
    if (declared !== undefined && c.req.header("transfer-encoding") === undefined && Number(declared) > o.maxBytes) return refuse(c, tooLarge());
    const reader = body.getReader();
    const chunks: Uint8Array[] = [];
    let size = 0;
    for (;;) {
      let read: Awaited<ReturnType<typeof readWithin>>;
      try {
        read = await readWithin(reader, o.idleMs);
      } catch (e) {
        const why = e instanceof Error ? e.message : String(e);
        return refuse(c, new ApiError(400, `The request body could not be read after ${size} bytes: ${why}`, null, "body_unreadable"));
      }
      if (read === TIMED_OUT) {
        reader.cancel().catch(() => {});
        return refuse(c, new ApiError(408, `The client sent no bytes of the request body for ${o.idleMs / 1000} s (after ${size} bytes); send the whole body at once`, null, "body_timeout"));
      }
      if (read.done) break;
      size += read.value.length;
      if (size > o.maxBytes) {
        reader.cancel().catch(() => {});
        return refuse(c, tooLarge());
      }
      chunks.push(read.value);
    }
    const whole = new Uint8Array(size);
    let at = 0;
    for (const chunk of chunks) {
      whole.set(chunk, at);
      at += chunk.length;
    }
    // A plain stream, not the bytes themselves: Node's fetch serves a byte array body through a byte
    // stream, which detaches an ArrayBuffer as it is read, and on Node 20 one detach slows every
    // typed-array kernel of the isolate for good (docs/results/bench-detach.md).
    const once = new ReadableStream<Uint8Array>({ start: (ctl) => (ctl.enqueue(whole), ctl.close()) });
    c.req.raw = new Request(c.req.raw, { body: once, duplex: "half" } as RequestInit);
    return next();
  };
}
