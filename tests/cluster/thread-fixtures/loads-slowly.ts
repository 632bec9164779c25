/**
 * A worker thread entry whose start takes 2.5 s (at least), saying "loading" every 100 ms
 * (worker-progress-hunt7.test.ts). Asked to load "talks.gguf" it then reports ready (and answers a
 * stop); asked for "falls-silent.gguf" it reports 0.2 s of progress reading the model, then nothing more.
 * It first posts `{ op: "up" }` once it listens (no message of the protocol: the test takes it).
 */
import { parentThreadPort } from "../../../src/runtime/threads.ts";
import type { FromWorker, ToWorker, WorkerReport } from "../../../src/cluster/worker-protocol.ts";

/** An idle engine's report on the bundled model (imported on demand: the thread listens at once). */
async function idleState(): Promise<{ state: WorkerReport; vocabSize: number }> {
  const { fileURLToPath } = await import("node:url");
  const { createReferenceBackend } = await import("../../../src/backend/reference/index.ts");
  const { createEngine } = await import("../../../src/engine/engine-factory.ts");
  const { loadModel } = await import("../../../src/model/load.ts");
  const model = await loadModel(fileURLToPath(new URL("../../../models/stories260K.gguf", import.meta.url)));
  const idle = createEngine(createReferenceBackend(), model, { numBlocks: 16 });
  const state: WorkerReport = {
    stats: idle.stats(), queue: idle.scheduler.queueState(), freeBlocks: 16, sessions: undefined,
    stepMixing: "mixed", finished: [], promptTokens: 0, generationTokens: 0, events: [], steps: [],
  };
  return { state, vocabSize: model.config.vocabSize };
}

const port = await parentThreadPort();
const say = (m: FromWorker) => port.post(m);
// Not a worker's message: tells the test the thread listens, so that its start timeout counts the start only.
port.post({ op: "up" });
const TOTAL = 8 * 2 ** 20;

port.onMessage((m) => {
  const msg = m as ToWorker;
  if (msg.op === "stop") return say({ op: "reply", cid: msg.cid });
  if (msg.op !== "init") return;
  const silent = msg.modelPath.endsWith("falls-silent.gguf");
  const t0 = Date.now();
  say({ op: "loading", stage: "model" });
  let built: Awaited<ReturnType<typeof idleState>> | undefined;
  if (!silent) void idleState().then((s) => (built = s));
  const timer = setInterval(() => {
    const ms = Date.now() - t0;
    if (silent && ms >= 200) return clearInterval(timer);
    if (ms < 2500 || built === undefined) return say({ op: "loading", stage: "model", done: Math.round((TOTAL * Math.min(ms, 2500)) / 2500), total: TOTAL });
    clearInterval(timer);
    say({ op: "ready", maxModelLen: 512, blockSize: 16, vocabSize: built.vocabSize, backend: "reference", fingerprint: "f", state: built.state });
  }, 100);
});
