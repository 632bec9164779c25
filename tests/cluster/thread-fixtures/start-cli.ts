/** Starts a worker on the thread entry named by argv[2] as serve starts its workers, and reports as serve does (robustness-hunt6.test.ts). */
import { RemoteEngine, RemoteWorkerError } from "../../../src/cluster/remote-engine.ts";
import { cliArgs, exitProcess } from "../../../src/runtime/env.ts";
import { spawnThread } from "../../../src/runtime/threads.ts";

const [entry] = cliArgs();
try {
  const port = await spawnThread(new URL(`./${entry}`, import.meta.url));
  await RemoteEngine.over(port, "worker-0", { path: "model.gguf" }, "reference", {}, () => {});
  console.error("serve: started");
} catch (e) {
  console.error(e instanceof RemoteWorkerError ? `serve: ${e.message}` : `serve: unexpected error: ${String(e)}`);
  exitProcess(2);
}
