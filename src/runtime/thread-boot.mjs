// Entry of a Node worker thread whose module is TypeScript: threads do not inherit the parent's
// module hooks, so tsx is registered here before the real entry (workerData.entry) is imported.
import { workerData } from "node:worker_threads";
import { register } from "tsx/esm/api";

register();
await import(workerData.entry);
