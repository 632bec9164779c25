/**
 * Entry of the thread that announces a worker process on NATS (nats-announcer.ts). The NATS client
 * loads here, in this thread's isolate: under tsx on Node its CommonJS is compiled by a lexer that
 * grows a WebAssembly memory, and the detached buffer that leaves would slow every typed-array kernel
 * of the isolate it happens in for good (docs/results/bench-detach.md): the worker's engines run in
 * the main one.
 */
import { parentThreadPort } from "../runtime/threads.ts";
import { announceWorker, connectControlPlane, type WorkerAnnouncer } from "./nats-membership.ts";
import { type AnnouncerReply, isAnnouncerRequest } from "./nats-announcer.ts";

const port = await parentThreadPort();
let announcer: WorkerAnnouncer | undefined;
const reply = (m: AnnouncerReply) => port.post(m);
port.onMessage((m) => {
  if (!isAnnouncerRequest(m)) return;
  const failed = (e: unknown) => reply({ kind: "failed", message: e instanceof Error ? e.message : String(e) });
  if (m.kind === "start") {
    connectControlPlane(m.url, m.clientName).then((nc) => {
      announcer = announceWorker(nc, m.clusterName, m.me, m.intervalMs);
      reply({ kind: "started" });
    }, failed);
  } else if (m.kind === "leave") {
    (announcer?.leave() ?? Promise.resolve()).then(() => reply({ kind: "left" }), failed);
  } else {
    (announcer?.close() ?? Promise.resolve()).then(() => reply({ kind: "closed" }), failed);
  }
});
