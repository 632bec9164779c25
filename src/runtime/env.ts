/**
 * The few places where Deno and Node differ, behind one small API. Everything else in the
 * project imports from here instead of touching `Deno` or `process` directly.
 */

/** The JavaScript runtime this process runs on. */
export type RuntimeName = "deno" | "node";

interface DenoLike {
  args: string[];
  env: { get(name: string): string | undefined };
  exit(code?: number): never;
  addSignalListener(signal: ShutdownSignal, handler: () => void): void;
  readFile(path: string): Promise<Uint8Array>;
  stat(path: string): Promise<{ isFile: boolean; isDirectory: boolean; size: number }>;
}

function denoGlobal(): DenoLike | undefined {
  return (globalThis as unknown as { Deno?: DenoLike }).Deno;
}

/** Which runtime is executing this code. */
export function runtimeName(): RuntimeName {
  return denoGlobal() !== undefined ? "deno" : "node";
}

/** Command-line arguments after the script name. */
export function cliArgs(): string[] {
  const deno = denoGlobal();
  if (deno) return [...deno.args];
  return process.argv.slice(2);
}

/** Reads an environment variable (undefined when unset). */
export function envVar(name: string): string | undefined {
  const deno = denoGlobal();
  if (deno) return deno.env.get(name);
  return process.env[name];
}

/** Ends the process with an exit code. */
export function exitProcess(code: number): never {
  const deno = denoGlobal();
  if (deno) deno.exit(code);
  process.exit(code);
}

/** The signals a server stops on: Ctrl-C, and what `kill` and container runtimes send. */
export type ShutdownSignal = "SIGINT" | "SIGTERM";

/** Calls `handler` with the signal's name each time SIGINT or SIGTERM arrives (instead of exiting). */
export function onShutdownSignal(handler: (signal: ShutdownSignal) => void): void {
  const deno = denoGlobal();
  for (const signal of ["SIGINT", "SIGTERM"] as const) {
    if (deno) deno.addSignalListener(signal, () => handler(signal));
    else process.on(signal, () => handler(signal));
  }
}
