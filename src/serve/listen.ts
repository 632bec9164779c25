/**
 * Serves a fetch handler on a TCP port: `Deno.serve` under Deno, `@hono/node-server` under Node.
 * Port 0 picks a free port (tests); the chosen port is returned.
 */
import { runtimeName } from "../runtime/env.ts";

/** A listening server. */
export interface Listening {
  host: string;
  port: number;
  /** Stops accepting and closes open connections (idle ones at once, busy ones after 200 ms). */
  close(): Promise<void>;
}

/** The address could not be listened on (in use, not this machine's, a host name that does not resolve, no permission). */
export class ListenError extends Error {
  override name = "ListenError";
  constructor(host: string, port: number, cause: unknown) {
    const reason = cause instanceof Error ? cause.message : String(cause);
    super(`Cannot listen on ${host.includes(":") ? `[${host}]` : host}:${port}: ${reason}`);
  }
}

type FetchHandler = (req: Request) => Response | Promise<Response>;

interface DenoServeApi {
  serve(
    opts: { hostname: string; port: number; onListen?: (addr: { port: number }) => void; signal?: AbortSignal },
    handler: (req: Request, info: { completed?: Promise<void> }) => Response | Promise<Response>,
  ): { addr: { port: number }; finished: Promise<void>; shutdown(): Promise<void> };
}

/** How long a busy connection may go on writing once the server closes (both runtimes). */
const CLOSE_GRACE_MS = 200;

/** Starts serving `fetch` on host:port; a {@link ListenError} when the address cannot be had. */
export async function listen(fetch: FetchHandler, host: string, port: number): Promise<Listening> {
  try {
    return await listenOn(fetch, host, port);
  } catch (e) {
    throw new ListenError(host, port, e);
  }
}

async function listenOn(fetch: FetchHandler, host: string, port: number): Promise<Listening> {
  if (runtimeName() === "deno") {
    const deno = (globalThis as unknown as { Deno: DenoServeApi }).Deno;
    // Responses not yet fully sent: from the handler's start until info.completed settles.
    let busy = 0;
    let idle: (() => void) | undefined;
    const done = () => {
      if (--busy === 0) idle?.();
    };
    // Deno's legacy request.signal also aborts after successful responses. The app gets its own
    // signal: aborted when the client leaves while the handler is still working (req.signal, listened
    // to only until the handler returns) or when the response could not be delivered (info.completed).
    const handler = async (req: Request, info: { completed?: Promise<void> }) => {
      busy++;
      const ctl = new AbortController();
      const abort = () => ctl.abort();
      req.signal.addEventListener("abort", abort);
      const hasBody = req.method !== "GET" && req.method !== "HEAD";
      const init = { method: req.method, headers: req.headers, body: hasBody ? req.body : null, signal: ctl.signal, duplex: "half" };
      let answered = false;
      try {
        const res = await fetch(new Request(req.url, init as RequestInit));
        answered = true;
        return res;
      } finally {
        req.signal.removeEventListener("abort", abort);
        info?.completed?.catch(abort);
        if (answered && info?.completed) info.completed.then(done, done);
        else done();
      }
    };
    // Deno's shutdown() waits for every busy connection (a client that stalls mid-upload, or stops
    // reading a stream, holds it forever); aborting the serve signal closes them all at once. So a
    // close waits for what is in flight for a moment, then aborts.
    const stop = new AbortController();
    const server = deno.serve({ hostname: host, port, onListen: () => {}, signal: stop.signal }, handler);
    const close = async () => {
      if (busy > 0) {
        let timer: ReturnType<typeof setTimeout> | undefined;
        await new Promise<void>((r) => {
          idle = r;
          timer = setTimeout(r, CLOSE_GRACE_MS);
        });
        clearTimeout(timer);
      }
      stop.abort();
      await server.finished;
    };
    return { host, port: server.addr.port, close };
  }
  const { serve } = await import("@hono/node-server");
  return await new Promise<Listening>((resolve, reject) => {
    const server = serve({ fetch, hostname: host, port }, (info) => {
      resolve({
        host,
        port: info.port,
        close: () =>
          new Promise<void>((done) => {
            const s = server as unknown as { close(cb: () => void): void; closeIdleConnections?: () => void; closeAllConnections?: () => void };
            // Idle keep-alive connections go now; one still writing its last bytes gets a moment.
            const cut = setTimeout(() => s.closeAllConnections?.(), CLOSE_GRACE_MS);
            s.close(() => {
              clearTimeout(cut);
              done();
            });
            s.closeIdleConnections?.();
          }),
      });
    });
    server.once("error", reject);
  });
}
