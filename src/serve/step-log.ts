/**
 * `--step-log FILE`: writes every engine step's shape and measured time as one JSON line, the format
 * `deno task sim --calibrate FILE` fits the simulator's cost model to. Lines are buffered and
 * appended in the background so a step never waits on the disk.
 */
import { appendFile, writeFile } from "node:fs/promises";
import type { StepRecord } from "../engine/step-record.ts";

/** Buffered JSONL writer of step records. */
export class StepLogWriter {
  private buffer: string[] = [];
  private flushing: Promise<void> = Promise.resolve();
  private failed: Error | null = null;

  private constructor(readonly path: string) {}

  /** Creates (or truncates) `path` and returns a writer for it. */
  static async open(path: string): Promise<StepLogWriter> {
    try {
      await writeFile(path, "");
    } catch (e) {
      throw new RangeError(`Cannot write step log "${path}": ${e instanceof Error ? e.message : String(e)}`);
    }
    return new StepLogWriter(path);
  }

  /** Queues one record (with the worker's id when the server runs several); writes happen in the background. */
  record(r: StepRecord & { worker?: string }): void {
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
      this.failed = new Error(`Step log "${this.path}" stopped: ${e instanceof Error ? e.message : String(e)}`);
    }
  }
}
