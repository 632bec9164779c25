/**
 * Test driver (nats-announcer.test.ts): announces a worker from its thread on the NATS server at
 * argv[2], then, with "detach" as argv[3], detaches one buffer in this isolate, then leaves. Run
 * under V8's --trace-protector-invalidation, the detach prints a line only if this isolate had not
 * detached one before.
 */
import process from "node:process";
import { announceWorkerInThread } from "../../src/cluster/nats-announcer.ts";

const announcer = await announceWorkerInThread(process.argv[2], "driver", "driver", { id: "w-driver", addr: "127.0.0.1:9" }, { intervalMs: 50 });
if (process.argv[3] === "detach") {
  const buffer = new ArrayBuffer(8);
  structuredClone(buffer, { transfer: [buffer] });
}
await announcer.leave();
await announcer.close();
