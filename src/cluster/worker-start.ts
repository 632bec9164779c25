/**
 * A remote worker's start (remote-engine.ts): waits for its "ready" while watching for every way it
 * can fail to come: a "failed" message, an uncaught error, a thread that ends by itself without a word
 * (threads.ts ThreadExitError: its module ran out, `self.close()`, `process.exit(0)`), or silence past
 * a bounded wait (a worker stuck in its load). The wait restarts with every message the worker sends
 * while it starts, and is generous by default: loading a large model can take many minutes.
 */
import { envVar } from "../runtime/env.ts";
import { ThreadExitError, type ThreadPort } from "../runtime/threads.ts";
import type { FromWorker } from "./worker-protocol.ts";

/** Thrown when a worker (thread or process) cannot start or fails. */
export class RemoteWorkerError extends Error {
  override name = "RemoteWorkerError";
}

/** Seconds a worker may take to report ready, unless told otherwise (30 minutes: a large model's load). */
export const DEFAULT_WORKER_START_TIMEOUT_S = 1800;

/** The variable that sets the wait for every worker of a server (seconds). */
export const WORKER_START_TIMEOUT_VAR = "EVOLVING_WORKER_START_TIMEOUT_S";

/** Options of a remote worker's start. */
export interface RemoteStartOptions {
  /**
   * Seconds to wait for the worker to report ready, counted again from each message it sends while it
   * starts (default: EVOLVING_WORKER_START_TIMEOUT_S, else {@link DEFAULT_WORKER_START_TIMEOUT_S}).
   */
  startTimeoutS?: number;
}

/** The wait `o` asks for, or the variable's, or the default; a RangeError quoting a value that is not a positive number of seconds. */
export function workerStartTimeoutS(o: RemoteStartOptions = {}): number {
  const raw = o.startTimeoutS ?? envVar(WORKER_START_TIMEOUT_VAR);
  if (raw === undefined || raw === "") return DEFAULT_WORKER_START_TIMEOUT_S;
  const s = typeof raw === "number" ? raw : Number(raw);
  if (!(s > 0) || !Number.isFinite(s)) {
    throw new RangeError(`A worker start timeout must be a positive number of seconds, got ${JSON.stringify(raw)}${o.startTimeoutS === undefined ? ` (${WORKER_START_TIMEOUT_VAR})` : ""}`);
  }
  return s;
}

/** The worker's "ready" message. */
export type ReadyMessage = Extract<FromWorker, { op: "ready" }>;

/** What the worker's engine stand-in does with the port's traffic: messages past "ready", and its failure. */
export interface WorkerWatch {
  receive(m: FromWorker): void;
  fail(e: RemoteWorkerError): void;
}

/**
 * Takes over `port`'s handlers for good: resolves with worker `id`'s "ready", rejects (RemoteWorkerError
 * naming the worker) when it cannot start; every later message goes to `w.receive`, and a later error
 * or end of the thread to `w.fail`. `modelPath` is quoted in the timeout's message.
 */
export function watchWorkerStart(port: ThreadPort, id: string, modelPath: string, timeoutS: number, w: WorkerWatch): Promise<ReadyMessage> {
  let started = false;
  let timer: ReturnType<typeof setTimeout> | undefined;
  return new Promise<ReadyMessage>((resolve, reject) => {
    const give = (e: RemoteWorkerError) => {
      clearTimeout(timer);
      reject(e);
    };
    const arm = () => {
      clearTimeout(timer);
      timer = setTimeout(() => {
        give(new RemoteWorkerError(
          `Worker ${id} did not report ready within ${timeoutS} s of being asked to load "${modelPath}" (it may hang, or its model may take longer to load: set ${WORKER_START_TIMEOUT_VAR} to wait longer)`,
        ));
      }, timeoutS * 1000);
    };
    port.onError((e) => {
      const err = new RemoteWorkerError(
        e instanceof ThreadExitError
          ? `Worker ${id} ${started ? "stopped" : "could not start"}: its thread ended by itself (exit code ${e.exitCode}) without an error${started ? "" : ", before it was ready"}`
          : `Worker ${id} failed: ${e.message}`,
      );
      w.fail(err);
      give(err);
    });
    port.onMessage((m) => {
      const msg = m as FromWorker;
      if (started) return w.receive(msg);
      if (msg.op === "ready") {
        started = true;
        clearTimeout(timer);
        resolve(msg);
      } else if (msg.op === "failed") give(new RemoteWorkerError(`Worker ${id} could not start: ${msg.message}`));
      else {
        // Anything the worker says while it starts shows it is getting on: the wait starts again.
        arm();
        w.receive(msg);
      }
    });
    arm();
  });
}
