/**
 * The NATS control plane: workers announce themselves (`deno task worker --nats URL`) and a server
 * (`serve --nats URL`) joins each one it hears about, drains one that says it is leaving, and drops
 * one whose connection fails; workers may start before or after the server, and come and go while it
 * serves. NATS carries only membership; requests and KV travel on each worker's own TCP connection
 * (worker-protocol.ts), as Dynamo keeps its KV transfers off the message bus.
 *
 * Subjects (NAME: the cluster's name, so several clusters can share one NATS server):
 *   evolving.NAME.workers   a worker's {@link WorkerAnnouncement}, every heartbeat and when it leaves
 *   evolving.NAME.discover  a server's "announce yourselves now" (sent when it starts)
 * Missing heartbeats alone do not remove a worker: a NATS outage must not empty a serving cluster.
 */
import type { NatsConnection } from "@nats-io/transport-node";
import type { Cluster } from "./cluster.ts";
import { type WorkerAnnouncement, WorkerDirectory } from "./worker-directory.ts";
import type { WorkerEngine } from "./worker-engine.ts";

/** Thrown when the NATS server cannot be reached, or a cluster name is unusable in a subject. */
export class ControlPlaneError extends Error {
  override name = "ControlPlaneError";
}

/** Subjects of cluster `name`; throws ControlPlaneError quoting a name NATS cannot carry. */
export function controlSubjects(name: string): { workers: string; discover: string } {
  if (!/^[A-Za-z0-9_-]{1,64}$/.test(name)) throw new ControlPlaneError(`A cluster name must be 1-64 letters, digits, "_" or "-", got "${name}"`);
  return { workers: `evolving.${name}.workers`, discover: `evolving.${name}.discover` };
}

/**
 * Connects to the NATS server at `url` ("host:port", "nats://host:port", with credentials as NATS
 * writes them: "nats://TOKEN@host:port" or "nats://USER:PASSWORD@host:port"); reconnects forever
 * after. Errors quote the URL without its credentials.
 */
export async function connectControlPlane(url: string, clientName: string): Promise<NatsConnection> {
  const { server, auth } = splitCredentials(url);
  // Loaded here, not at start-up: a server without --nats never loads the NATS client, whose CommonJS,
  // compiled under tsx, grows a WebAssembly memory and so detaches a buffer (see body-read.ts for why
  // that matters on Node).
  const { connectNats } = await import("./nats-transport.ts");
  try {
    return await connectNats({ servers: server, name: clientName, maxReconnectAttempts: -1, reconnectTimeWait: 500, timeout: 5000, ...auth });
  } catch (e) {
    throw new ControlPlaneError(`Cannot reach the NATS server at "${server}": ${e instanceof Error ? e.message : String(e)}`);
  }
}

/** "nats://user:pass@host:4222" → the server without credentials, and the credentials as connect() options. */
export function splitCredentials(url: string): { server: string; auth: { token?: string; user?: string; pass?: string } } {
  const m = /^(\w+:\/\/)?([^@/]*)@(.+)$/.exec(url);
  if (!m) return { server: url, auth: {} };
  const [user, ...rest] = m[2].split(":");
  const server = `${m[1] ?? ""}${m[3]}`;
  if (rest.length === 0) return { server, auth: { token: decodeURIComponent(user) } };
  return { server, auth: { user: decodeURIComponent(user), pass: decodeURIComponent(rest.join(":")) } };
}

/** Parses an announcement; null for anything that is not one (logged by the caller, never thrown). */
export function parseAnnouncement(data: string): WorkerAnnouncement | null {
  let v: unknown;
  try {
    v = JSON.parse(data);
  } catch {
    return null;
  }
  if (typeof v !== "object" || v === null) return null;
  const { id, addr, state } = v as Record<string, unknown>;
  if (typeof id !== "string" || id.length === 0 || id.length > 200) return null;
  if (typeof addr !== "string" || !/^(\[[^\]]+\]|[^:\s]+):\d{1,5}$/.test(addr)) return null;
  if (state !== "ready" && state !== "leaving") return null;
  return { id, addr, state };
}

/** A worker's side: heartbeats until {@link leave}. */
export interface WorkerAnnouncer {
  /** Announces "leaving" (servers drain this worker) and stops the heartbeats. */
  leave(): Promise<void>;
  /** Stops the heartbeats and closes the NATS connection. */
  close(): Promise<void>;
}

/** Announces worker `me` on cluster `clusterName` every `intervalMs`, and at once when a server asks. */
export function announceWorker(nc: NatsConnection, clusterName: string, me: Omit<WorkerAnnouncement, "state">, intervalMs = 1000): WorkerAnnouncer {
  const subj = controlSubjects(clusterName);
  const ready = JSON.stringify({ ...me, state: "ready" } satisfies WorkerAnnouncement);
  const beat = () => nc.publish(subj.workers, ready);
  const sub = nc.subscribe(subj.discover, { callback: () => beat() });
  const timer = setInterval(beat, intervalMs);
  beat();
  let stopped = false;
  const stop = () => {
    stopped = true;
    clearInterval(timer);
    sub.unsubscribe();
  };
  return {
    async leave() {
      if (stopped) return;
      stop();
      nc.publish(subj.workers, JSON.stringify({ ...me, state: "leaving" } satisfies WorkerAnnouncement));
      await nc.flush();
    },
    async close() {
      stop();
      await nc.drain().catch(() => {});
    },
  };
}

/** Options of {@link watchWorkers}. */
export interface WatchWorkersOptions {
  clusterName: string;
  /** Connects to the worker at "host:port" as engine `id` (started: its model loaded). */
  connect: (id: string, addr: string) => Promise<WorkerEngine>;
  /** How long a leaving worker's requests may run before it is stopped (default 60 s). */
  drainMs?: number;
  /** How often dead workers are looked for (default 1000 ms). */
  checkMs?: number;
  /** Wait before joining a worker again after its join failed (default 5000 ms); each failure is logged and counted (`cluster.counters.joinFailures`). */
  retryMs?: number;
  log?: (line: string) => void;
}

/** Keeps `cluster`'s worker set to the workers announced on NATS until the returned stop() is called. */
export function watchWorkers(nc: NatsConnection, cluster: Cluster, o: WatchWorkersOptions): { stop(): void } {
  const subj = controlSubjects(o.clusterName);
  const dir = new WorkerDirectory({ retryMs: o.retryMs });
  const log = o.log ?? ((line: string) => console.error(line));
  const now = () => performance.now();
  let stopped = false;

  async function join(id: string, addr: string): Promise<void> {
    let engine: WorkerEngine;
    try {
      engine = await o.connect(id, addr);
    } catch (e) {
      dir.failed(id, now());
      cluster.counters.joinFailures++;
      return log(`Worker "${id}" at ${addr} could not join: ${e instanceof Error ? e.message : String(e)}`);
    }
    if (stopped) return void engine.stop().catch(() => {});
    try {
      cluster.addWorker(engine);
    } catch (e) {
      dir.failed(id, now());
      cluster.counters.joinFailures++;
      await engine.stop().catch(() => {});
      return log(`Worker "${id}" at ${addr} was refused: ${e instanceof Error ? e.message : String(e)}`);
    }
    log(`Worker "${id}" at ${addr} joined (${cluster.workers.length} in the cluster)`);
    if (!dir.joined(id)) await leave(id);
  }

  /** Takes `id` out of the cluster; unless it is being replaced, its next heartbeat joins it again. */
  async function leave(id: string, drainMs = o.drainMs ?? 60_000, forget = true): Promise<void> {
    if (await cluster.removeWorker(id, drainMs)) log(`Worker "${id}" left (${cluster.workers.length} in the cluster)`);
    if (forget) dir.gone(id);
  }

  const sub = nc.subscribe(subj.workers, {
    callback: (err, msg) => {
      if (err || stopped) return;
      const a = parseAnnouncement(msg.string());
      if (a === null) return log(`Ignored a message on ${subj.workers} that is not a worker announcement: ${JSON.stringify(msg.string().slice(0, 200))}`);
      const act = dir.observe(a, now());
      if (act?.kind === "join") void join(act.id, act.addr);
      else if (act?.kind === "leave") void (dir.status(act.id) === "leaving" && cluster.workers.some((w) => w.id === act.id) ? leave(act.id) : undefined);
      else if (act?.kind === "replace") void leave(act.id, 0, false).then(() => join(act.id, act.addr));
    },
  });
  // A worker whose connection failed leaves at once; its next heartbeat joins it again.
  const timer = setInterval(() => {
    for (const w of cluster.workers) if (!w.engine.alive && !w.draining) void leave(w.id, 0);
  }, o.checkMs ?? 1000);
  nc.publish(subj.discover, "");
  return {
    stop() {
      stopped = true;
      clearInterval(timer);
      sub.unsubscribe();
    },
  };
}
