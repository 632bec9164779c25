/**
 * Worker threads on Deno (Web Workers) and Node (`node:worker_threads`) behind one message port.
 * A thread runs a module; both sides post structured-cloneable messages, ArrayBuffers moved when
 * listed in `transfer`. A Node thread with a `.ts` module starts from thread-boot.mjs (tsx).
 */
import { runtimeName } from "./env.ts";

/** One side of the channel between a thread and its parent. */
export interface ThreadPort {
  post(message: unknown, transfer?: ArrayBuffer[]): void;
  /** Sets the handler of incoming messages (one at a time). */
  onMessage(fn: (message: unknown) => void): void;
  /** Sets the handler of an uncaught error inside the thread (parent side only). */
  onError(fn: (error: Error) => void): void;
  /** Ends the thread (parent side) or closes this port (thread side). */
  close(): Promise<void>;
}

interface WebWorkerLike {
  postMessage(m: unknown, transfer?: ArrayBuffer[]): void;
  onmessage: ((e: { data: unknown }) => void) | null;
  onerror: ((e: { message?: string; error?: unknown; preventDefault?: () => void }) => void) | null;
  terminate(): void;
}

/** Starts a thread running the module at `url`. */
export async function spawnThread(url: URL): Promise<ThreadPort> {
  if (runtimeName() === "deno") {
    const W = (globalThis as unknown as { Worker: new (u: string, o: { type: "module" }) => WebWorkerLike }).Worker;
    const w = new W(url.href, { type: "module" });
    return {
      post: (m, t) => w.postMessage(m, t ?? []),
      onMessage: (fn) => (w.onmessage = (e) => fn(e.data)),
      onError: (fn) => (w.onerror = (e) => {
        e.preventDefault?.();
        fn(e.error instanceof Error ? e.error : new Error(e.message ?? "Worker thread failed"));
      }),
      close: () => {
        w.terminate();
        return Promise.resolve();
      },
    };
  }
  const { Worker } = await import("node:worker_threads");
  const { fileURLToPath } = await import("node:url");
  // A thread does not inherit the parent's module hooks: a TypeScript entry starts from a bootstrap
  // that registers tsx, then imports it.
  const w = url.pathname.endsWith(".ts")
    ? new Worker(fileURLToPath(new URL("./thread-boot.mjs", import.meta.url)), { workerData: { entry: url.href } })
    : new Worker(fileURLToPath(url));
  return {
    post: (m, t) => w.postMessage(m, t ?? []),
    onMessage: (fn) => {
      w.removeAllListeners("message");
      w.on("message", fn);
    },
    onError: (fn) => {
      w.removeAllListeners("error");
      w.on("error", fn);
    },
    close: async () => {
      await w.terminate();
    },
  };
}

/** The parent's port, from inside a thread. */
export async function parentThreadPort(): Promise<ThreadPort> {
  if (runtimeName() === "deno") {
    const self = globalThis as unknown as { postMessage(m: unknown, t?: ArrayBuffer[]): void; onmessage: ((e: { data: unknown }) => void) | null; close(): void };
    return {
      post: (m, t) => self.postMessage(m, t ?? []),
      onMessage: (fn) => (self.onmessage = (e) => fn(e.data)),
      onError: () => {},
      close: () => {
        self.close();
        return Promise.resolve();
      },
    };
  }
  const { parentPort } = await import("node:worker_threads");
  if (parentPort === null) throw new Error("parentThreadPort() called outside a worker thread");
  const p = parentPort;
  return {
    post: (m, t) => p.postMessage(m, t ?? []),
    onMessage: (fn) => {
      p.removeAllListeners("message");
      p.on("message", fn);
    },
    onError: () => {},
    close: () => {
      p.close();
      return Promise.resolve();
    },
  };
}
