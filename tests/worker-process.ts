/** A worker process (`src/cli/worker.ts --listen`) for the tests that drive one over TCP. */
import { type ChildProcess, spawn } from "node:child_process";
import process from "node:process";
import { projectRoot } from "./harness.ts";

/** Starts `worker --listen 127.0.0.1:0` under Node (with `token` in its environment); resolves with its address once it listens. */
export function startWorker(token?: string): Promise<{ addr: string; child: ChildProcess; log: () => string }> {
  const child = spawn("node", ["--import", `${projectRoot}/node_modules/tsx/dist/loader.mjs`, `${projectRoot}/src/cli/worker.ts`, "--listen", "127.0.0.1:0"], {
    cwd: projectRoot, stdio: ["ignore", "ignore", "pipe"], env: { ...process.env, NODE_OPTIONS: "", EVOLVING_WORKER_TOKEN: token ?? "" },
  });
  let log = "";
  // The deadline only turns a start that hangs into a failure: generous, as a loaded CI machine is slow.
  let timer: ReturnType<typeof setTimeout> | undefined;
  return new Promise<{ addr: string; child: ChildProcess; log: () => string }>((resolve, reject) => {
    child.stderr!.on("data", (d: Uint8Array) => {
      log += new TextDecoder().decode(d);
      const m = /listening on (\S+)/.exec(log);
      if (m) resolve({ addr: m[1], child, log: () => log });
    });
    child.on("exit", (code) => reject(new Error(`worker exited with ${code}: ${log}`)));
    timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`worker did not listen within 120 s: ${log}`));
    }, 120_000);
  }).finally(() => clearTimeout(timer));
}

