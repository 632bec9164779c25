/**
 * The worker side of the cluster protocol (worker-protocol.ts), over any port: a worker thread
 * (thread-host.ts) or a TCP connection (src/cli/worker.ts). Loads the model and backend named in the
 * "init" message (saying how the load gets on: "loading" at each stage, and while the weights are
 * read), runs one engine, and reports its state after every change (coalesced to one message per turn
 * of the event loop). remote-engine.ts is the cluster's side.
 */
import { selectBackend } from "../backend/select.ts";
import type { Backend } from "../backend/types.ts";
import { createEngine } from "../engine/engine-factory.ts";
import type { Engine } from "../engine/engine.ts";
import type { RequestHandle } from "../engine/engine-types.ts";
import { modelFingerprint } from "../model/fingerprint.ts";
import { loadModel, type LoadProgress } from "../model/load.ts";
import { loadDraftModel } from "../engine/draft-model.ts";
import { blockLoadOptions } from "../engine/mtp-drafts.ts";
import type { ModelConfig } from "../model/config.ts";
import { loadLoraAdapter } from "../model/lora-load.ts";
import type { ThreadPort } from "../runtime/threads.ts";
import type { KvEvent } from "../../kv/index.ts";
import type { StepRecord } from "../engine/step-record.ts";
import { type FromWorker, type LoadingStage, rejection, type WorkerReport, type ToWorker } from "./worker-protocol.ts";

/** The least time between two progress messages of one stage of a start. */
const PROGRESS_EVERY_MS = 1000;

/**
 * What tells the cluster how a start gets on (worker-start.ts counts the silence between messages):
 * called with a stage, it says so at once and returns that stage's load progress callback, which
 * says how far the load got at most once every {@link PROGRESS_EVERY_MS}.
 */
function startReporter(say: (m: Extract<FromWorker, { op: "loading" }>) => void, now: () => number = Date.now) {
  return (stage: LoadingStage): ((p: LoadProgress) => void) => {
    say({ op: "loading", stage });
    let last = now();
    return (p) => {
      if (now() - last < PROGRESS_EVERY_MS) return;
      last = now();
      say({ op: "loading", stage, done: p.bytesRead, total: p.totalBytes });
    };
  };
}

/**
 * Serves one engine over `port` until the cluster stops it. Resolves once the port has dropped and
 * everything it held is released (a model still loading when it dropped included).
 */
export function serveWorker(port: ThreadPort): Promise<void> {
  // Never with a transfer list: a worker thread detaches none of its buffers (see "export" below).
  const send = (m: FromWorker) => port.post(m);
  let engine: Engine | undefined;
  let backend: Backend | undefined;
  // What adapters are checked against (not the host weights: those are let go once uploaded).
  let base: { config: ModelConfig; hasOutput: boolean } | undefined;
  const handles = new Map<number, RequestHandle>();
  let events: KvEvent[] = [];
  let steps: StepRecord[] = [];
  let reportQueued = false;
  // Once the port drops, nothing more is started: a model still loading is let go when it arrives.
  let dropped = false;
  let loading: Promise<void> | undefined;

  function state(e: Engine): WorkerReport {
    const out: WorkerReport = {
      stats: e.stats(), queue: e.scheduler.queueState(), freeBlocks: e.pool.numFreeBlocks(), sessions: e.sessionStatusCounts(),
      stepMixing: e.stepMixing, finished: [...e.metrics.finished], promptTokens: e.metrics.promptTokens,
      generationTokens: e.metrics.generationTokens, events, steps,
    };
    events = [];
    steps = [];
    return out;
  }

  /** Reports once per turn of the event loop, however many changes it had. */
  function report(): void {
    if (reportQueued || engine === undefined) return;
    reportQueued = true;
    setTimeout(() => {
      reportQueued = false;
      if (engine) send({ op: "state", state: state(engine) });
    }, 0);
  }

  async function init(m: Extract<ToWorker, { op: "init" }>): Promise<void> {
    // A turn first: a cluster gone already (its port dropped with the "init") gets no load and no word.
    await Promise.resolve();
    if (dropped) return;
    const stage = startReporter((msg) => {
      if (!dropped) send(msg);
    });
    try {
      const quantize = m.quantize ? { quantize: m.quantize } : {};
      const spec = m.engine.speculative;
      const model = await loadModel(m.modelPath, { ...quantize, ...blockLoadOptions(spec), ...(m.mmproj !== undefined ? { mmproj: m.mmproj } : {}), onProgress: stage("model") });
      const draft = spec?.method === "draft_model" ? await loadDraftModel(spec, model, { ...quantize, onProgress: stage("draft") }) : undefined;
      base = { config: model.config, hasOutput: model.weights.output !== undefined };
      stage("backend");
      const picked = await selectBackend(m.backend);
      if (dropped) {
        // The cluster went away during the load: no one will ever stop this engine.
        picked.backend.destroy();
        return;
      }
      backend = picked.backend;
      const reason = picked.reason;
      stage("engine");
      const { warmUp, ...options } = m.engine;
      const e = createEngine(picked.backend, model, {
        ...options, workerId: m.workerId,
        onStep: (r) => {
          steps.push(r);
          report();
        },
      }, draft);
      e.kvEvents.subscribe((ev) => {
        events.push(ev);
        report();
      });
      if (warmUp) stage("warm-up");
      const warmUpMs = warmUp ? await e.warmUp() : undefined;
      engine = e;
      send({
        op: "ready", maxModelLen: e.maxModelLen, blockSize: e.pool.blockSize, vocabSize: model.config.vocabSize, backend: reason, fingerprint: modelFingerprint(model),
        state: state(e), ...(warmUpMs !== undefined ? { warmUpMs } : {}),
      });
    } catch (err) {
      send({ op: "failed", message: err instanceof Error ? err.message : String(err) });
    }
  }

  async function pump(rid: number, h: RequestHandle): Promise<void> {
    for await (const delta of h.stream) send({ op: "delta", rid, delta });
    const result = await h.result;
    handles.delete(rid);
    send({ op: "result", rid, result });
    report();
  }

  async function handle(m: ToWorker): Promise<void> {
    if (m.op === "init") return (loading ??= init(m));
    const e = engine;
    if (e === undefined) return;
    switch (m.op) {
      case "submit": {
        let h: RequestHandle;
        try {
          h = e.submit(m.req);
        } catch (err) {
          send(rejection(m.rid, err));
          return;
        }
        handles.set(m.rid, h);
        send({ op: "accepted", rid: m.rid, ...(h.sessionId === undefined ? {} : { sessionId: h.sessionId }) });
        report();
        return pump(m.rid, h);
      }
      case "cancel":
        handles.get(m.rid)?.cancel();
        return;
      // Both change the session counts the cluster reports (/metrics): report them.
      case "tool":
        e.markToolWait(m.sessionId, m.tool);
        return report();
      case "moved":
        e.sessionMovedAway(m.sessionId);
        return report();
      case "drop":
        // A block let go changes the gauges.
        if (e.dropHandoff(m.tokens, m.root)) report();
        return;
      case "mixing":
        e.scheduler.stepMixing = m.mode;
        return;
      case "export":
      case "import":
      case "lora-load":
      case "lora-unload":
      case "stop":
        try {
          if (m.op === "lora-load") {
            const adapter = await loadLoraAdapter(m.path, base!.config, { scale: m.scale, hasOutput: base!.hasOutput });
            if (adapter.fingerprint !== m.fingerprint) {
              throw new RangeError(`The LoRA adapter at "${m.path}" on worker ${e.pool.workerId} differs from the server's (fingerprint ${adapter.fingerprint}, expected ${m.fingerprint})`);
            }
            e.loadAdapter(m.name, adapter);
            send({ op: "reply", cid: m.cid });
          } else if (m.op === "lora-unload") {
            e.unloadAdapter(m.name);
            send({ op: "reply", cid: m.cid });
          } else if (m.op === "export") {
            // Copied, not transferred: detaching any ArrayBuffer in an isolate invalidates V8's
            // ArrayBufferDetaching protector there for good, and every typed-array loop this
            // thread's CPU kernels run is slower after (pagedAttention ~30 %, matmul ~20 %:
            // scripts/bench-detach.ts). The copy costs a memcpy of the prefix; the server's side,
            // which runs no kernels, still transfers what it imports.
            const p = await e.exportPrefix(m.tokens, m.handoff === true, m.root);
            send({ op: "reply", cid: m.cid, value: p });
            // A hand-off's export lets go of the last block held for it: the gauges changed.
            if (m.handoff === true) report();
          } else if (m.op === "import") {
            send({ op: "reply", cid: m.cid, value: e.importPrefix(m.prefix, m.sessionId) });
            report();
          } else {
            await shutdown();
            send({ op: "reply", cid: m.cid });
          }
        } catch (err) {
          send({ op: "reply", cid: m.cid, error: err instanceof Error ? `${err.name}: ${err.message}` : String(err) });
        }
    }
  }

  port.onMessage((m) => void handle(m as ToWorker));
  /** Stops the engine and releases the backend (once, however often asked). */
  async function shutdown(): Promise<void> {
    await engine?.stop();
    backend?.destroy();
    backend = undefined;
  }

  // A cluster that goes away without stopping the engine (a dropped connection) still frees it.
  return new Promise<void>((resolve) => {
    port.onError(() => {
      if (dropped) return;
      dropped = true;
      void (loading ?? Promise.resolve()).then(() => shutdown()).catch(() => {}).then(resolve);
    });
  });
}
