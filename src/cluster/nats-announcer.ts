/**
 * A worker process's NATS announcements (`worker --nats`), made from a thread of their own so that
 * the NATS client never loads in the worker's main isolate, where its engines run: see
 * nats-announcer-thread.ts for why that matters on Node.
 */
import { spawnThread } from "../runtime/threads.ts";
import type { WorkerAnnouncement } from "./worker-directory.ts";
import { ControlPlaneError, type WorkerAnnouncer } from "./nats-membership.ts";

/** What the parent asks the announcing thread. */
export type AnnouncerRequest =
  | { kind: "start"; url: string; clientName: string; clusterName: string; me: Omit<WorkerAnnouncement, "state">; intervalMs?: number }
  | { kind: "leave" }
  | { kind: "close" };

/** What the announcing thread answers: each request is answered once, in order. */
export type AnnouncerReply = { kind: "started" | "left" | "closed" } | { kind: "failed"; message: string };

/** Whether `m` is an {@link AnnouncerRequest} (the thread ignores anything else). */
export function isAnnouncerRequest(m: unknown): m is AnnouncerRequest {
  const kind = (m as { kind?: unknown } | null)?.kind;
  return kind === "start" || kind === "leave" || kind === "close";
}

/** Options of {@link announceWorkerInThread}. */
export interface ThreadAnnouncerOptions {
  /** Heartbeat interval (default 1000 ms, announceWorker's). */
  intervalMs?: number;
  /** Told once if the thread ends while announcing (no more heartbeats; servers keep the worker). */
  onLost?: (error: Error) => void;
  /** The announcing thread's module (default nats-announcer-thread.ts; tests give one that fails). */
  threadModule?: URL;
}

/**
 * Connects to the NATS server at `url` (as connectControlPlane) in a thread and announces worker `me`
 * on cluster `clusterName` every heartbeat interval (and when a server asks) until `leave()`. Throws
 * {@link ControlPlaneError} when the server cannot be reached (the thread is ended then).
 */
export async function announceWorkerInThread(
  url: string, clientName: string, clusterName: string, me: Omit<WorkerAnnouncement, "state">, o: ThreadAnnouncerOptions = {},
): Promise<WorkerAnnouncer> {
  const port = await spawnThread(o.threadModule ?? new URL("./nats-announcer-thread.ts", import.meta.url));
  const waiting: ((r: AnnouncerReply) => void)[] = [];
  let lost: Error | undefined;
  port.onMessage((m) => waiting.shift()?.(m as AnnouncerReply));
  let announcing = false;
  port.onError((e) => {
    lost = e;
    for (const w of waiting.splice(0)) w({ kind: "failed", message: `The NATS announcing thread stopped: ${e.message}` });
    if (announcing) o.onLost?.(e);
  });
  const ask = (req: AnnouncerRequest): Promise<AnnouncerReply> =>
    lost ? Promise.resolve({ kind: "failed", message: `The NATS announcing thread stopped: ${lost.message}` }) : new Promise((resolve) => {
      waiting.push(resolve);
      port.post(req);
    });
  const started = await ask({ kind: "start", url, clientName, clusterName, me, ...(o.intervalMs !== undefined ? { intervalMs: o.intervalMs } : {}) });
  if (started.kind === "failed") {
    await port.close();
    throw new ControlPlaneError(started.message);
  }
  announcing = true;
  let closed = false;
  return {
    async leave() {
      if (closed) return;
      announcing = false;
      const r = await ask({ kind: "leave" });
      if (r.kind === "failed") throw new ControlPlaneError(r.message);
    },
    async close() {
      if (closed) return;
      closed = true;
      announcing = false;
      await ask({ kind: "close" });
      // An error while the thread ends is of no use to anyone.
      await port.close().catch(() => {});
    },
  };
}
