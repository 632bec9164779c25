/**
 * A remote worker's start (remote-engine.ts): waits for its "ready" while watching for every way it
 * can fail to come: a "failed" message, an uncaught error, a thread that ends by itself without a word
 * (threads.ts ThreadExitError: its module ran out, `self.close()`, `process.exit(0)`), or silence past
 * a bounded wait (a worker stuck in its load). The wait restarts with every message the worker sends
 * while it starts: a worker says "loading" at each stage of its start and about once a second while
 * it reads the weights (worker-host.ts), so the wait bounds silence, not the whole load of a large
 * model. An older worker that says nothing until "ready" must load within the one wait.
 */
import { envVar } from "../runtime/env.ts";
import { ThreadExitError, type ThreadPort } from "../runtime/threads.ts";
import type { FromWorker } from "./worker-protocol.ts";

/** Thrown when a worker (thread or process) cannot start or fails. */
export class RemoteWorkerError extends Error {
  override name = "RemoteWorkerError";
}

/**
 * Seconds a starting worker may stay silent, unless told otherwise (10 minutes: longer than any one
 * step of a start that reports no progress, such as uploading a large model's weights).
 */
export const DEFAULT_WORKER_START_TIMEOUT_S = 600;

/** The variable that sets the wait for every worker of a server (seconds). */
export const WORKER_START_TIMEOUT_VAR = "EVOLVING_WORKER_START_TIMEOUT_S";

/** Options of a remote worker's start. */
export interface RemoteStartOptions {
  /**
   * Seconds the worker may stay silent before it reports ready, counted again from each message it
   * sends while it starts, its "loading" progress included (default: EVOLVING_WORKER_START_TIMEOUT_S,
   * else {@link DEFAULT_WORKER_START_TIMEOUT_S}).
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

/** A worker's report of how its start gets on. */
type LoadingMessage = Extract<FromWorker, { op: "loading" }>;

/** How far a stage got, as " (1.5 of 12.0 MiB read)", or nothing when the message does not say. */
function progressOf(m: LoadingMessage): string {
  const { done, total } = m;
  if (typeof done !== "number" || typeof total !== "number" || !Number.isFinite(done) || !Number.isFinite(total)) return "";
  const mib = (n: number) => (n / 2 ** 20).toFixed(1);
  return ` (${mib(done)} of ${mib(total)} MiB read)`;
}

/** Why the start of worker `id` was given up on after `timeoutS` s of silence: what it last reported, if anything. */
function silenceMessage(id: string, modelPath: string, timeoutS: number, last: LoadingMessage | undefined): string {
  const longer = `set ${WORKER_START_TIMEOUT_VAR} to wait longer`;
  if (last === undefined) {
    return `Worker ${id} did not report ready: it was silent for ${timeoutS} s after being asked to load "${modelPath}", and reported no progress (it may hang, or be an older worker that says nothing until its model is loaded: ${longer})`;
  }
  return `Worker ${id} did not report ready: it was silent for ${timeoutS} s while loading "${modelPath}", since it reported stage ${JSON.stringify(last.stage)}${progressOf(last)} (it may hang, or that stage may take longer: ${longer})`;
}

/** What the worker's engine stand-in does with the port's traffic: messages past "ready", and its failure. */
export interface WorkerWatch {
  receive(m: FromWorker): void;
  fail(e: RemoteWorkerError): void;
}

/**
 * Takes over `port`'s handlers for good: resolves with worker `id`'s "ready", rejects (RemoteWorkerError
 * naming the worker) when it cannot start or stays silent for `timeoutS` s (the last stage it reported
 * quoted); every later message goes to `w.receive`, and a later error or end of the thread to `w.fail`.
 * "loading" messages only restart the wait: `w.receive` never sees them. `modelPath` is quoted in the
 * timeout's message.
 */
export function watchWorkerStart(port: ThreadPort, id: string, modelPath: string, timeoutS: number, w: WorkerWatch): Promise<ReadyMessage> {
  let started = false;
  let timer: ReturnType<typeof setTimeout> | undefined;
  let last: LoadingMessage | undefined;
  return new Promise<ReadyMessage>((resolve, reject) => {
    const give = (e: RemoteWorkerError) => {
      clearTimeout(timer);
      reject(e);
    };
    const arm = () => {
      clearTimeout(timer);
      timer = setTimeout(() => give(new RemoteWorkerError(silenceMessage(id, modelPath, timeoutS, last))), timeoutS * 1000);
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
      if (msg.op === "loading") {
        // Progress of the start: it restarts the wait, and is nothing for the engine's stand-in.
        if (started) return;
        last = msg;
        return arm();
      }
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
