/** Entry point of a worker thread that runs one engine for a cluster (worker-host.ts). */
import { parentThreadPort } from "../runtime/threads.ts";
import { serveWorker } from "./worker-host.ts";

serveWorker(await parentThreadPort());
