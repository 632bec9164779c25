/**
 * Which workers a server has seen announce themselves on the control plane (nats-membership.ts), and
 * what to do about each announcement: join a new worker, drain one that is leaving, retry one that
 * could not be reached after a pause. Plain logic on an injected clock (milliseconds), no I/O.
 */

/** What a worker publishes about itself, every heartbeat and once when it leaves. */
export interface WorkerAnnouncement {
  /** The worker's name, unique in its cluster. */
  id: string;
  /** "host:port" where it accepts the cluster's connection (`deno task worker --listen`). */
  addr: string;
  /** "ready" while it takes work; "leaving" once it is shutting down (drain it). */
  state: "ready" | "leaving";
}

/** What the server should do after an announcement. */
export type DirectoryAction =
  | { kind: "join"; id: string; addr: string }
  | { kind: "leave"; id: string }
  /** The worker came back at another address (restarted): take the old one out, then join the new. */
  | { kind: "replace"; id: string; addr: string };

type Entry = { addr: string; status: "joining" | "member" | "leaving" | "failed"; retryAtMs: number };

/** Options of {@link WorkerDirectory}. */
export interface WorkerDirectoryOptions {
  /** Wait before joining a worker again after its connection failed (default 5000 ms). */
  retryMs?: number;
}

/** The server's record of announced workers. */
export class WorkerDirectory {
  private readonly entries = new Map<string, Entry>();
  private readonly retryMs: number;

  constructor(o: WorkerDirectoryOptions = {}) {
    this.retryMs = o.retryMs ?? 5000;
  }

  /** Records an announcement; returns what to do, or null when nothing changes. */
  observe(a: WorkerAnnouncement, nowMs: number): DirectoryAction | null {
    const e = this.entries.get(a.id);
    if (a.state === "leaving") {
      // A worker whose join failed is forgotten: nothing of it is in the cluster.
      if (e?.status === "failed") this.entries.delete(a.id);
      if (e === undefined || e.status === "leaving" || e.status === "failed") return null;
      // A worker still joining is taken out as soon as the join completes (see joined()).
      e.status = "leaving";
      return { kind: "leave", id: a.id };
    }
    if (e === undefined) {
      this.entries.set(a.id, { addr: a.addr, status: "joining", retryAtMs: 0 });
      return { kind: "join", id: a.id, addr: a.addr };
    }
    if (e.status === "failed") {
      if (nowMs < e.retryAtMs && e.addr === a.addr) return null;
      this.entries.set(a.id, { addr: a.addr, status: "joining", retryAtMs: 0 });
      return { kind: "join", id: a.id, addr: a.addr };
    }
    if (e.addr !== a.addr && e.status === "member") {
      this.entries.set(a.id, { addr: a.addr, status: "joining", retryAtMs: 0 });
      return { kind: "replace", id: a.id, addr: a.addr };
    }
    return null;
  }

  /**
   * The join of `id` succeeded. Returns false when the worker announced it was leaving meanwhile
   * (the caller takes it out again).
   */
  joined(id: string): boolean {
    const e = this.entries.get(id);
    if (e === undefined) return false;
    if (e.status === "leaving") return false;
    e.status = "member";
    return true;
  }

  /**
   * The join of `id` failed (unreachable, refused): its heartbeats are ignored for a while. Failed
   * workers past their retry time are forgotten (their next beat would join them at once anyway), so
   * that workers that failed and went quiet do not stay listed for good.
   */
  failed(id: string, nowMs: number): void {
    for (const [k, x] of this.entries) if (x.status === "failed" && nowMs >= x.retryAtMs) this.entries.delete(k);
    const e = this.entries.get(id);
    if (e !== undefined) {
      e.status = "failed";
      e.retryAtMs = nowMs + this.retryMs;
    }
  }

  /** `id` is out of the cluster (drained, or its connection dropped); a later heartbeat joins it again. */
  gone(id: string): void {
    this.entries.delete(id);
  }

  /** How many workers are listed. */
  get size(): number {
    return this.entries.size;
  }

  /** Status of `id` (undefined when unknown). */
  status(id: string): Entry["status"] | undefined {
    return this.entries.get(id)?.status;
  }
}
