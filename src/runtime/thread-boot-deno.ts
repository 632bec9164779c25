/**
 * Entry of a Deno worker thread (threads.ts): imports the real entry, named by the worker's `name`,
 * and reports an uncaught error to the parent as one message, then ends the thread, as a Node thread
 * does; left to itself Deno prints the error's stack on stderr as well as telling the parent.
 */
import { THREAD_ERROR, threadErrorLine } from "./threads.ts";

interface WorkerScope {
  name: string;
  postMessage(message: unknown): void;
  close(): void;
  addEventListener(type: "error", fn: (e: { error?: unknown; message?: string; preventDefault(): void }) => void): void;
  addEventListener(type: "unhandledrejection", fn: (e: { reason?: unknown; preventDefault(): void }) => void): void;
}

const scope = globalThis as unknown as WorkerScope;

function fail(error: unknown, message?: string): void {
  scope.postMessage({ [THREAD_ERROR]: threadErrorLine(error, message) });
  scope.close();
}

scope.addEventListener("error", (e) => {
  e.preventDefault();
  fail(e.error, e.message);
});
scope.addEventListener("unhandledrejection", (e) => {
  e.preventDefault();
  fail(e.reason);
});
try {
  await import(scope.name);
} catch (e) {
  fail(e);
}
