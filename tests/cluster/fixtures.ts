/** What the cluster tests share: the bundled model, a prompt longer than a block, and a greedy run that collects the stream. */
import { projectRoot } from "../harness.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { createEngine } from "../../src/engine/engine-factory.ts";
import type { GenerateRequest, RequestHandle, ServingEngine } from "../../src/engine/engine-types.ts";
import { loadModel } from "../../src/model/load.ts";
import type { FromWorker, ToWorker, WorkerReport } from "../../src/cluster/worker-protocol.ts";
import type { ThreadPort } from "../../src/runtime/threads.ts";
import type { MetricsSnapshot, Planner, PlannerAction } from "../../planner/types.ts";

export const modelPath = `${projectRoot}/models/stories260K.gguf`;
export const model = await loadModel(modelPath);
/** 38 tokens: two full KV blocks to move, and a partial one. */
export const STORY = model.tokenizer.encode("Once upon a time there was a little girl named Lily. She loved to play outside in the park with her friends every day.", { addBos: true });

/** A greedy request that ignores EOS (a fixed number of tokens). */
export const greedy = (prompt: number[], maxTokens = 16): GenerateRequest => ({ prompt, maxTokens, temperature: 0, ignoreEos: true });

/** Submits `req`, reads its whole stream, and returns the streamed ids with the result. */
export async function run(s: ServingEngine, req: GenerateRequest): Promise<{ streamed: number[]; result: Awaited<RequestHandle["result"]>; handle: RequestHandle }> {
  const handle = s.submit(req);
  const streamed: number[] = [];
  for await (const d of handle.stream) streamed.push(...d.tokenIds);
  return { streamed, result: await handle.result, handle };
}

/** What one engine on the reference backend streams for `req`: the oracle a cluster must match. */
export async function oneEngine(req: GenerateRequest): Promise<number[]> {
  const e = createEngine(createReferenceBackend(), model, { numBlocks: 64 });
  try {
    return (await run(e, req)).streamed;
  } finally {
    await e.stop();
  }
}

/** Returns each tick's scripted actions in turn, and keeps the snapshots it was shown. */
export class ScriptedPlanner implements Planner {
  readonly name = "scripted";
  readonly intervalS = 1;
  readonly seen: MetricsSnapshot[] = [];
  constructor(private readonly script: PlannerAction[][]) {}
  tick(s: MetricsSnapshot): PlannerAction[] {
    this.seen.push(s);
    return this.script.shift() ?? [];
  }
}

/** A worker port a test answers by hand (the worker is ready at once): what the cluster sent, a way to reply, and to fail the port. */
export function scriptedPort(): { port: ThreadPort; sent: ToWorker[]; reply: (m: FromWorker) => void; fail: (e: Error) => void } {
  const idle = createEngine(createReferenceBackend(), model, { numBlocks: 16 });
  const state: WorkerReport = {
    stats: idle.stats(), queue: { waitingPrefillTokens: 0, oldestWaitS: 0, decoding: 0, prefilling: 0, waitingDecodes: 0 }, freeBlocks: 16, sessions: undefined, stepMixing: "mixed",
    finished: [], promptTokens: 0, generationTokens: 0, events: [], steps: [],
  };
  const sent: ToWorker[] = [];
  let toCluster: (m: unknown) => void = () => {};
  let failPort: (e: Error) => void = () => {};
  const port: ThreadPort = {
    post(m) {
      const msg = m as ToWorker;
      sent.push(msg);
      if (msg.op === "init") queueMicrotask(() => toCluster({ op: "ready", maxModelLen: 512, blockSize: 16, backend: "reference", fingerprint: "f", state }));
      if (msg.op === "stop") queueMicrotask(() => toCluster({ op: "reply", cid: msg.cid }));
    },
    onMessage: (fn) => (toCluster = fn),
    onError: (fn) => (failPort = fn),
    close: () => Promise.resolve(),
  };
  return { port, sent, reply: (m) => toCluster(m), fail: (e) => failPort(e) };
}
