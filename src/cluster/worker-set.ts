/**
 * The workers of a cluster as they come and go: each one's KV events feed one global block index
 * (what the router reads for prefix overlap), and a worker taken out first drains its requests,
 * then leaves the index. The cluster (cluster.ts) routes over {@link WorkerSet.all}.
 */
import { GlobalBlockIndex } from "../../kv/index.ts";
import type { Role } from "../../planner/types.ts";
import { ClusterWorker } from "./cluster-worker.ts";
import type { WorkerEngine } from "./worker-engine.ts";
import type { EngineStats } from "../engine/engine-types.ts";
import { countersOf, sumStats } from "./cluster-stats.ts";

/** A cluster's workers and the global block index their KV events keep. */
export class WorkerSet {
  /** Which worker holds which block, from the workers' KV events. */
  readonly index: GlobalBlockIndex = new GlobalBlockIndex();
  private list: ClusterWorker[] = [];
  private readonly byId = new Map<string, ClusterWorker>();
  private readonly unsubscribe = new Map<string, () => void>();
  /** Counters of the workers that have left, and the workers still stopping after they left. */
  private retired: EngineStats = sumStats([]);
  private readonly leaving = new Set<ClusterWorker>();

  constructor(private readonly initialPrefillRate: number, private readonly now: () => number) {}

  /** Every worker, draining ones included, in the order they were added. */
  get all(): readonly ClusterWorker[] {
    return this.list;
  }

  get(id: string): ClusterWorker | undefined {
    return this.byId.get(id);
  }

  /** Adds a started engine; throws RangeError when its name is taken. */
  add(engine: WorkerEngine, role: Role): ClusterWorker {
    if (this.byId.has(engine.id)) throw new RangeError(`A worker named "${engine.id}" is already in the cluster`);
    const w = new ClusterWorker(engine, role, this.initialPrefillRate);
    this.byId.set(w.id, w);
    this.list.push(w);
    this.unsubscribe.set(w.id, engine.kvEvents.subscribe((e) => this.index.apply(e)));
    return w;
  }

  /**
   * Marks worker `id` draining (routers skip it), waits up to `drainMs` for its requests in flight,
   * then removes it, forgets its blocks and stops its engine. False when there is no such worker
   * (or it is already leaving).
   */
  async remove(id: string, drainMs: number): Promise<boolean> {
    const w = this.byId.get(id);
    if (w === undefined || w.draining) return false;
    w.draining = true;
    const deadline = this.now() + drainMs;
    while (w.inFlight > 0 && w.engine.alive && this.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    this.leaving.add(w);
    this.list = this.list.filter((x) => x !== w);
    this.byId.delete(id);
    this.unsubscribe.get(id)?.();
    this.unsubscribe.delete(id);
    this.index.removeWorker(id);
    await w.engine.stop().catch(() => {});
    this.retired = sumStats([this.retired, countersOf(w.engine.stats())]);
    this.leaving.delete(w);
    return true;
  }

  /**
   * The counters of every worker that has left (gauges zero): the cluster adds them to its workers'
   * sums, so that its counters (preemptions, prefix-cache queries, drafts, ...) never go back when a
   * worker leaves.
   */
  retiredCounters(): EngineStats {
    return sumStats([this.retired, ...[...this.leaving].map((w) => countersOf(w.engine.stats()))]);
  }
}
