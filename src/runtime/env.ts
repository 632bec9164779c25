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

/**
 * Command-line arguments after the script name, less one leading "--": `deno task serve -- --port 1`
 * hands the script that "--" where `npm run serve -- --port 1` does not, and both mean the same.
 */
export function cliArgs(): string[] {
  const deno = denoGlobal();
  const args = deno ? [...deno.args] : process.argv.slice(2);
  return args[0] === "--" ? args.slice(1) : args;
}

/**
 * Reads an environment variable (undefined when unset). A name no variable can have (empty, or
 * holding "=" or NUL) is unset on both runtimes: Deno would throw where Node answers undefined.
 */
export function envVar(name: string): string | undefined {
  if (name === "" || name.includes("=") || name.includes("\0")) return undefined;
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
