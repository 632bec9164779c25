/**
 * Worker threads on Deno (Web Workers) and Node (`node:worker_threads`) behind one message port.
 * A thread runs a module; both sides post structured-cloneable messages, ArrayBuffers moved when
 * listed in `transfer`. A Node thread with a `.ts` module starts from thread-boot.mjs (tsx); every
 * Deno thread starts from thread-boot-deno.ts, which reports an uncaught error as one message, the
 * thread's end as another (Deno tells the parent nothing when a worker closes itself or exits), and
 * the moment its entry listens as a third (until then the parent holds what it posts).
 * A thread that ends without an error and without being asked to (its module ran out with nothing
 * listening, `self.close()`, `process.exit(0)`) is reported as a {@link ThreadExitError} on both.
 */
import { runtimeName } from "./env.ts";

/** One side of the channel between a thread and its parent. */
export interface ThreadPort {
  post(message: unknown, transfer?: ArrayBuffer[]): void;
  /** Sets the handler of incoming messages (one at a time). */
  onMessage(fn: (message: unknown) => void): void;
  /**
   * Sets the handler of an uncaught error inside the thread, or of its end when the parent did not ask
   * for it (a {@link ThreadExitError}); parent side only.
   */
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

/** An uncaught error inside a thread, on one line on both runtimes: "RangeError: what it said". */
export class ThreadError extends Error {
  override name = "ThreadError";
}

/**
 * A thread that ended by itself with no uncaught error (its module ran out with nothing listening,
 * it closed itself, it called `process.exit`): reported through `onError`, as nothing else will come.
 */
export class ThreadExitError extends ThreadError {
  override name = "ThreadExitError";
  constructor(readonly exitCode: number) {
    super(`The thread ended by itself with exit code ${exitCode} and no error`);
  }
}

/** The key of the message a Deno thread's boot (thread-boot-deno.ts) sends for an uncaught error. */
export const THREAD_ERROR = "evolvingThreadError";

/** The key of the message a Deno thread's boot sends as the thread ends by itself (its exit code). */
export const THREAD_EXIT = "evolvingThreadExit";

/** The key of the message a Deno thread's boot sends once its entry has run and listens for messages. */
export const THREAD_BOOTED = "evolvingThreadBooted";

/** Deno's "Uncaught (in promise) X: y" and its colours, or an Error, as "X: y" on one line. */
export function threadErrorLine(e: unknown, denoMessage?: string): string {
  const text = e instanceof Error ? `${e.name}: ${e.message}` : denoMessage ?? String(e);
  // deno-lint-ignore no-control-regex
  const line = text.replace(/\x1b\[[0-9;]*m/g, "").replace(/^Uncaught (\(in promise\) )?/, "").split("\n")[0].trim();
  return /^\w*(Error|Exception)\b/.test(line) ? line : `Error: ${line}`;
}

function isErrorReport(m: unknown): m is Record<typeof THREAD_ERROR, string> {
  return typeof m === "object" && m !== null && typeof (m as Record<string, unknown>)[THREAD_ERROR] === "string";
}

function isExitReport(m: unknown): m is Record<typeof THREAD_EXIT, number> {
  return typeof m === "object" && m !== null && typeof (m as Record<string, unknown>)[THREAD_EXIT] === "number";
}

function isBootReport(m: unknown): boolean {
  return typeof m === "object" && m !== null && (m as Record<string, unknown>)[THREAD_BOOTED] === true;
}

/**
 * Holds what a thread sends before its handler is set (a thread may fail before the parent has
 * said what to do: unheard, Deno's error would end the parent), then passes it on.
 */
function relay<T>(): { emit(value: T): void; listen(fn: (value: T) => void): void } {
  let held: T[] | undefined = [];
  let handler: (value: T) => void = () => {};
  return {
    emit: (value) => (held ? held.push(value) : handler(value)),
    listen: (fn) => {
      handler = fn;
      const waiting = held ?? [];
      held = undefined;
      for (const v of waiting) fn(v);
    },
  };
}

/** Starts a thread running the module at `url`. */
export async function spawnThread(url: URL): Promise<ThreadPort> {
  const messages = relay<unknown>();
  const errors = relay<ThreadError>();
  const port = (post: ThreadPort["post"], close: ThreadPort["close"]): ThreadPort => ({
    post, close, onMessage: messages.listen, onError: errors.listen,
  });
  if (runtimeName() === "deno") {
    const W = (globalThis as unknown as { Worker: new (u: string, o: { type: "module"; name: string }) => WebWorkerLike }).Worker;
    // The boot imports the entry named by `name` and reports its uncaught errors as a message.
    const w = new W(new URL("./thread-boot-deno.ts", import.meta.url).href, { type: "module", name: url.href });
    // A Deno worker drops a message that arrives while its module is still evaluating (the boot's
    // import is asynchronous) with no handler set yet: what the parent posts waits here until the boot
    // says the entry has run and listens. Node's port queues by itself.
    let waiting: [unknown, ArrayBuffer[] | undefined][] | undefined = [];
    w.onmessage = (e) => {
      if (isErrorReport(e.data)) errors.emit(new ThreadError(e.data[THREAD_ERROR]));
      else if (isExitReport(e.data)) errors.emit(new ThreadExitError(e.data[THREAD_EXIT]));
      else if (isBootReport(e.data)) {
        const held = waiting ?? [];
        waiting = undefined;
        for (const [m, t] of held) w.postMessage(m, t ?? []);
      } else messages.emit(e.data);
    };
    w.onerror = (e) => {
      e.preventDefault?.();
      errors.emit(new ThreadError(threadErrorLine(e.error, e.message ?? "Worker thread failed")));
    };
    // A held message moves its buffers at once, as a posted one does: the clone takes them over.
    const hold = (m: unknown, t: ArrayBuffer[] = []) => {
      const moved = structuredClone({ m, t }, { transfer: t });
      waiting!.push([moved.m, moved.t]);
    };
    return port((m, t) => waiting ? hold(m, t) : w.postMessage(m, t ?? []), () => {
      waiting = undefined;
      w.terminate();
      return Promise.resolve();
    });
  }
  const { Worker } = await import("node:worker_threads");
  const { fileURLToPath } = await import("node:url");
  // A thread does not inherit the parent's module hooks: a TypeScript entry starts from a bootstrap
  // that registers tsx, then imports it.
  const w = url.pathname.endsWith(".ts")
    ? new Worker(fileURLToPath(new URL("./thread-boot.mjs", import.meta.url)), { workerData: { entry: url.href } })
    : new Worker(fileURLToPath(url));
  // Node's "exit" follows every end: reported only when no error came first and the parent did not end it.
  let over = false;
  w.on("message", (m: unknown) => messages.emit(m));
  w.on("error", (e: unknown) => {
    over = true;
    errors.emit(new ThreadError(threadErrorLine(e)));
  });
  w.on("exit", (code: number) => {
    if (!over) errors.emit(new ThreadExitError(code));
    over = true;
  });
  return port((m, t) => w.postMessage(m, t ?? []), async () => {
    over = true;
    await w.terminate();
  });
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
