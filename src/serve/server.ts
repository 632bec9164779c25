/**
 * Puts a server together: load the model, pick the backend, build the engine and the app, listen.
 * Used by `src/cli/serve.ts` and by the tests that drive a real server over sockets.
 */
import os from "node:os";
import { type BackendChoice, selectBackend } from "../backend/select.ts";
import type { Engine } from "../engine/engine.ts";
import type { KvRetention } from "../engine/engine-sessions.ts";
import { createEngine } from "../engine/engine-factory.ts";
import { kvBytesPerBlock } from "../engine/kv-cache.ts";
import type { PreemptionMode, StepMixing, WorkerRole } from "../engine/scheduler-types.ts";
import type { ReasoningTokens } from "../engine/reasoning-spans.ts";
import type { StepRecord } from "../engine/step-record.ts";
import type { LoadedModel } from "../model/config.ts";
import { loadModel } from "../model/load.ts";
import { createApp } from "./app.ts";
import { listen, type Listening } from "./listen.ts";
import { type ReasoningParserName, reasoningTokenIds } from "./reasoning.ts";
import { StepLogWriter } from "./step-log.ts";
import { AGED_SHORT_FIRST, type PrefillOrderOptions } from "../../planner/prefill-order.ts";

/** Everything `serve` can be told. */
export interface ServerOptions {
  modelPath: string;
  /** Already loaded model (tests share one); otherwise loaded from modelPath. */
  model?: LoadedModel;
  servedModelName?: string;
  host: string;
  port: number;
  backend: BackendChoice;
  apiKey?: string;
  maxModelLen?: number;
  kvBlocks?: number;
  /** Fraction of host memory for the KV cache (used when kvBlocks is not given). */
  kvMemoryFraction?: number;
  maxBatchTokens?: number;
  maxNumSeqs?: number;
  maxWaiting?: number;
  role?: WorkerRole;
  /** What a preempted request loses: its KV (recompute, the default) or nothing (swap to host). */
  preemption?: PreemptionMode;
  /** Host swap space in KV blocks (swap mode; default: as many as the device pool). */
  swapSpaceBlocks?: number;
  /**
   * Prefill chunks and decodes in one mixed step ("mixed", the default), in separate alternating
   * steps ("split"), or whichever the engine's online step model prices cheaper ("auto", from mixed).
   */
  stepMixing?: StepMixing | "auto";
  /** Admission order of waiting prompts (default: short-first, aged 2000 tokens/s, as in the simulator). */
  prefillOrder?: PrefillOrderOptions;
  /** Which cached KV goes first under memory pressure (default "agent"). */
  kvRetention?: KvRetention;
  /**
   * "think": chat answers' `<think>…</think>` text is returned as `reasoning_content`, and the engine
   * types KV blocks of reasoning "reasoning" when both tags are single tokens (default "none").
   */
  reasoningParser?: ReasoningParserName;
  maxBodyBytes?: number;
  /** Write every engine step's shape and time to this JSONL file (`deno task sim --calibrate`). */
  stepLogPath?: string;
}

/** A running server. */
export interface RunningServer extends Listening {
  url: string;
  engine: Engine;
  modelName: string;
  backendReason: string;
  /** The `<think>`/`</think>` ids the engine tracks reasoning with; undefined when it does not. */
  reasoningTokens: ReasoningTokens | undefined;
  /** Stops listening, cancels requests, stops the engine. */
  shutdown(): Promise<void>;
}

/** The served name of a model file: its base name without extension. */
export function modelNameOf(path: string): string {
  return (path.split(/[\\/]/).filter(Boolean).pop() ?? "model").replace(/\.gguf$/i, "");
}

/** Starts a server and resolves once it listens. */
export async function startServer(o: ServerOptions): Promise<RunningServer> {
  const model = o.model ?? (await loadModel(o.modelPath));
  const { backend, reason } = await selectBackend(o.backend);
  const kvMemoryBytes = o.kvMemoryFraction === undefined ? undefined : o.kvMemoryFraction * os.totalmem();
  if (o.kvBlocks === undefined && kvMemoryBytes !== undefined && kvMemoryBytes < 2 * kvBytesPerBlock(model.config)) {
    throw new RangeError(`--kv-memory-fraction ${o.kvMemoryFraction} leaves room for fewer than 2 KV blocks`);
  }
  const stepLog = o.stepLogPath === undefined ? null : await StepLogWriter.open(o.stepLogPath);
  // Tags that are not single tokens are still parsed from the text; only KV typing needs the ids.
  const reasoningTokens = o.reasoningParser === "think" ? reasoningTokenIds(model.tokenizer) : undefined;
  const engine = createEngine(backend, model, {
    ...(stepLog ? { onStep: (r: StepRecord) => stepLog.record(r) } : {}),
    numBlocks: o.kvBlocks,
    kvMemoryBytes,
    maxModelLen: o.maxModelLen,
    maxWaiting: o.maxWaiting,
    kvRetention: o.kvRetention,
    ...(o.stepMixing === "auto" ? { autoStepMixing: true } : {}),
    scheduler: {
      ...(o.maxBatchTokens ? { maxBatchTokens: o.maxBatchTokens } : {}),
      ...(o.maxNumSeqs ? { maxRunning: o.maxNumSeqs } : {}),
      ...(o.role ? { role: o.role } : {}),
      ...(o.preemption ? { preemption: o.preemption } : {}),
      ...(o.swapSpaceBlocks !== undefined ? { swapSpaceBlocks: o.swapSpaceBlocks } : {}),
      ...(o.stepMixing && o.stepMixing !== "auto" ? { stepMixing: o.stepMixing } : {}),
      prefillOrder: o.prefillOrder ?? AGED_SHORT_FIRST,
      ...(reasoningTokens ? { reasoningTokens } : {}),
    },
  });
  const modelName = o.servedModelName ?? modelNameOf(o.modelPath);
  const app = createApp({ engine, model, modelName, apiKey: o.apiKey, maxBodyBytes: o.maxBodyBytes, reasoningParser: o.reasoningParser });
  const l = await listen(app.fetch, o.host, o.port);
  return {
    ...l,
    url: `http://${o.host.includes(":") ? `[${o.host}]` : o.host}:${l.port}`,
    engine,
    modelName,
    backendReason: reason,
    reasoningTokens,
    async shutdown() {
      await engine.stop();
      await l.close();
      backend.destroy();
      await stepLog?.close();
    },
  };
}
