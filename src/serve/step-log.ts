/**
 * `--step-log FILE`: writes every engine step's shape and measured time as one JSON line, the format
 * `deno task sim --calibrate FILE` fits the simulator's cost model to. Lines are buffered and
 * appended in the background so a step never waits on the disk. `--planner-log FILE` writes the
 * planner's decisions, `--route-log FILE` the router's, with the same writer.
 */
import { appendFile, writeFile } from "node:fs/promises";
import type { PlannerAction } from "../../planner/types.ts";
import type { ClusterDecision, RouteDecision } from "../cluster/cluster.ts";
import type { StepRecord } from "../engine/step-record.ts";

/** Buffered JSONL writer of step records (by default) or of any JSON-serialisable record. */
export class StepLogWriter<T = StepRecord & { worker?: string }> {
  private buffer: string[] = [];
  private flushing: Promise<void> = Promise.resolve();
  private failed: Error | null = null;

  private constructor(readonly path: string, private readonly what: string) {}

  /** Creates (or truncates) `path` and returns a writer for it. */
  static async open<T = StepRecord & { worker?: string }>(path: string, what = "step log"): Promise<StepLogWriter<T>> {
    try {
      await writeFile(path, "");
    } catch (e) {
      throw new RangeError(`Cannot write ${what} "${path}": ${e instanceof Error ? e.message : String(e)}`);
    }
    return new StepLogWriter<T>(path, what);
  }

  /** Queues one record (a step with the worker's id when the server runs several); writes happen in the background. */
  record(r: T): void {
    if (this.failed !== null) return;
    this.buffer.push(JSON.stringify(r));
    if (this.buffer.length === 1) this.flushing = this.flushing.then(() => this.flush());
  }

  /** Writes what is buffered; resolves when the file holds every record so far. */
  async close(): Promise<void> {
    this.flushing = this.flushing.then(() => this.flush());
    await this.flushing;
    if (this.failed !== null) throw this.failed;
  }

  private async flush(): Promise<void> {
    if (this.buffer.length === 0 || this.failed !== null) return;
    const lines = this.buffer.join("\n") + "\n";
    this.buffer = [];
    try {
      await appendFile(this.path, lines);
    } catch (e) {
      // A full disk must not take the server down: stop logging and report it at shutdown.
      this.failed = new Error(`${this.what[0].toUpperCase()}${this.what.slice(1)} "${this.path}" stopped: ${e instanceof Error ? e.message : String(e)}`);
    }
  }
}

/** One line of `--planner-log`: when, the planner's action as it gave it, and what it changed. */
export type PlannerLogRecord = { unixS: number; changed: boolean; from?: string } & PlannerAction;

/** The planner-log line of decision `d` applied at Unix time `unixS`. */
export function plannerLogRecord(d: ClusterDecision, unixS: number): PlannerLogRecord {
  return { unixS, ...d.action, changed: d.changed, ...(d.from !== undefined ? { from: d.from } : {}) };
}

/** One line of `--route-log`: when, the request as the router saw it, every candidate worker and the route taken. */
export type RouteLogRecord = { unixS: number } & RouteDecision;

/** The route-log line of routing decision `d` made at Unix time `unixS`. */
export function routeLogRecord(d: RouteDecision, unixS: number): RouteLogRecord {
  return { unixS, ...d };
}
