/**
 * Entry of a Deno worker thread (threads.ts): imports the real entry, named by the worker's `name`,
 * and reports an uncaught error to the parent as one message, then ends the thread, as a Node thread
 * does; left to itself Deno prints the error's stack on stderr as well as telling the parent.
 * It also tells the parent when the thread ends by itself, which Deno does not: `self.close()`,
 * `Deno.exit()` (and node:process's `exit`, which calls it), or a module that ran out without
 * listening for messages (Node ends such a thread; Deno would keep it, deaf, for good). Once the entry
 * has run and listens, it says so: the parent posts nothing before (a message that reached the thread
 * while the import was pending would be dropped, Deno's worker having no handler yet).
 */
import { THREAD_BOOTED, THREAD_ERROR, THREAD_EXIT, threadErrorLine } from "./threads.ts";

interface WorkerScope {
  name: string;
  onmessage: unknown;
  postMessage(message: unknown): void;
  close(): void;
  addEventListener(type: string, fn: (e: never) => void, options?: unknown): void;
}

interface DenoExit {
  exit(code?: number): never;
  exitCode: number;
}

const scope = globalThis as unknown as WorkerScope;
const deno = (globalThis as unknown as { Deno: DenoExit }).Deno;
const close = scope.close.bind(scope);
const exit = deno.exit.bind(deno);
// Once the parent has heard why the thread ends, it hears nothing more.
let told = false;
let listening = false;

function tell(report: Record<string, unknown>): void {
  if (told) return;
  told = true;
  scope.postMessage(report);
}

function fail(error: unknown, message?: string): void {
  tell({ [THREAD_ERROR]: threadErrorLine(error, message) });
  close();
}

scope.close = () => {
  tell({ [THREAD_EXIT]: 0 });
  close();
};
deno.exit = (code?: number): never => {
  tell({ [THREAD_EXIT]: code ?? deno.exitCode ?? 0 });
  return exit(code);
};
const listen = scope.addEventListener.bind(scope);
scope.addEventListener = (type, fn, options) => {
  if (type === "message") listening = true;
  listen(type, fn, options);
};

scope.addEventListener("error", (e: { error?: unknown; message?: string; preventDefault(): void }) => {
  e.preventDefault();
  fail(e.error, e.message);
});
scope.addEventListener("unhandledrejection", (e: { reason?: unknown; preventDefault(): void }) => {
  e.preventDefault();
  fail(e.reason);
});
listening = false;
try {
  await import(scope.name);
  // Nothing can reach a module that ended without listening: the thread ends, as Node's would.
  if (!listening && scope.onmessage === null && !told) scope.close();
  // Deno drops a message that came while the import was pending and nothing listened: the parent
  // holds what it posts until it hears this (threads.ts).
  else if (!told) scope.postMessage({ [THREAD_BOOTED]: true });
} catch (e) {
  fail(e);
}
