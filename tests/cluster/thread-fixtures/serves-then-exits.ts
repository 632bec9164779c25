/** A worker thread that serves (worker-host.ts), then exits without an error once sent a request (robustness-hunt6.test.ts). */
import process from "node:process";
import { parentThreadPort } from "../../../src/runtime/threads.ts";
import { serveWorker } from "../../../src/cluster/worker-host.ts";

const port = await parentThreadPort();
const inner = port.onMessage.bind(port);
port.onMessage = (fn) =>
  inner((m) => {
    if ((m as { op?: string }).op === "submit") process.exit(0);
    fn(m);
  });
serveWorker(port);
