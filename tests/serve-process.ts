/** A `serve` process started as users start it, for tests of the CLI itself (signals, environment). */
import { type ChildProcess, spawn } from "node:child_process";
import process from "node:process";
import { projectRoot } from "./harness.ts";

/** `serve` under each runtime: the command and the arguments before serve's own. */
export const SERVE_COMMANDS: Record<"node" | "deno", [string, string[]]> = {
  node: ["node", ["--import", `${projectRoot}/node_modules/tsx/dist/loader.mjs`, `${projectRoot}/src/cli/serve.ts`]],
  // The binary itself: node_modules/.bin/deno is npm's shim, which runs it as a child and does not pass signals on.
  deno: [`${projectRoot}/node_modules/deno/deno`, ["run", "-A", `${projectRoot}/src/cli/serve.ts`]],
};

/** How long {@link spawnServe} waits for `serve` to listen before it kills it and fails. */
const START_DEADLINE_MS = 120_000;

/** A running `serve`: its process, the URL it listens on, what it has written to stderr and stdout so far, and its exit. */
export interface ServeProcess {
  child: ChildProcess;
  url: string;
  stderr(): string;
  stdout(): string;
  /** The exit code, or the signal that ended it. */
  exited: Promise<number | string | null>;
}

/**
 * Starts `serve` with `args` (and `env` over this process's) and resolves once it says where it listens;
 * rejects if it exits first. `runtimeFlags` go to the runtime (`--v8-flags=…` under Deno).
 */
export async function spawnServe(runtime: "node" | "deno", args: readonly string[], env: Record<string, string> = {}, runtimeFlags: readonly string[] = []): Promise<ServeProcess> {
  const [cmd, script] = SERVE_COMMANDS[runtime];
  // Deno takes its flags after "run".
  const before = runtime === "node" ? [...runtimeFlags, ...script] : [script[0], ...runtimeFlags, ...script.slice(1)];
  const child = spawn(cmd, [...before, ...args], { cwd: projectRoot, env: { ...process.env, NO_COLOR: "1", NODE_OPTIONS: "", ...env }, stdio: ["ignore", "pipe", "pipe"] });
  let stdout = "";
  child.stdout!.on("data", (d: Buffer) => (stdout += d.toString()));
  let stderr = "";
  const exited = new Promise<number | string | null>((r) => child.on("exit", (code, signal) => r(code ?? signal)));
  // The deadline only turns a start that hangs into a failure (loading a model and starting workers
  // can take many seconds on a loaded CI machine); a normal start resolves as soon as it listens.
  let timer: ReturnType<typeof setTimeout> | undefined;
  const url = await new Promise<string>((resolve, reject) => {
    child.stderr!.on("data", (d: Buffer) => {
      stderr += d.toString();
      const m = /listening on (http:\/\/\S+)/.exec(stderr);
      if (m) resolve(m[1]);
    });
    void exited.then((code) => reject(new Error(`serve exited with ${code} before listening: ${stderr}`)));
    timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`serve did not listen within ${START_DEADLINE_MS / 1000} s: ${stderr}`));
    }, START_DEADLINE_MS);
  }).finally(() => clearTimeout(timer));
  return { child, url, stderr: () => stderr, stdout: () => stdout, exited };
}
