/**
 * Messages between a cluster and an engine in a worker thread or process (worker-host.ts runs the engine,
 * remote-engine.ts is its stand-in on the cluster's side). Plain structured-cloneable data.
 */
import type { KvEvent } from "../../kv/index.ts";
import type { BackendChoice } from "../backend/select.ts";
import type { CreateEngineOptions } from "../engine/engine-factory.ts";
import type { EngineStats, GenerateRequest, GenerateResult, StreamDelta } from "../engine/engine-types.ts";
import type { PrefixKv } from "../engine/prefix-transfer.ts";
import type { QueueState, StepMixing } from "../engine/scheduler-types.ts";
import type { StepRecord } from "../engine/step-record.ts";
import type { QuantizeDType } from "../model/weights.ts";

/** Engine options that cross to a worker (no callbacks). */
export type PortableEngineOptions = Omit<CreateEngineOptions, "onStep" | "now" | "workerId">;

/** Where a worker loads its model from, and how (`--quantize`). */
export interface ModelLoad {
  path: string;
  quantize?: QuantizeDType;
}

/** From the cluster to a worker. */
export type ToWorker =
  | { op: "init"; modelPath: string; quantize?: QuantizeDType; backend: BackendChoice; workerId: string; engine: PortableEngineOptions }
  | { op: "submit"; rid: number; req: GenerateRequest }
  | { op: "cancel"; rid: number }
  | { op: "tool"; sessionId: string; tool: string }
  | { op: "export"; cid: number; tokens: number[]; handoff?: boolean; root?: number }
  /** Loads the LoRA adapter at `path` (the worker reads it, as it reads the model) as `name`; its fingerprint must be this one. */
  | { op: "lora-load"; cid: number; name: string; path: string; scale: number; fingerprint: string }
  | { op: "lora-unload"; cid: number; name: string }
  | { op: "import"; cid: number; prefix: PrefixKv; sessionId?: string }
  | { op: "drop"; tokens: number[]; root?: number }
  | { op: "mixing"; mode: StepMixing }
  | { op: "stop"; cid: number };

/** What a worker reports of its engine after each change. */
export interface WorkerReport {
  stats: EngineStats;
  queue: QueueState;
  freeBlocks: number;
  sessions: Record<string, number> | undefined;
  stepMixing: StepMixing;
  finished: [string, number][];
  promptTokens: number;
  generationTokens: number;
  /** KV events and steps since the last report, in order. */
  events: KvEvent[];
  steps: StepRecord[];
}

/** From a worker to the cluster. */
export type FromWorker =
  /** `vocabSize`: what the cluster checks a request's token ids against before sending it (absent from an older worker). */
  | { op: "ready"; maxModelLen: number; blockSize: number; vocabSize?: number; backend: string; fingerprint: string; state: WorkerReport }
  | { op: "failed"; message: string }
  | { op: "accepted"; rid: number; sessionId?: string }
  | { op: "rejected"; rid: number; name: string; message: string }
  | { op: "delta"; rid: number; delta: StreamDelta }
  | { op: "result"; rid: number; result: GenerateResult }
  | { op: "reply"; cid: number; value?: unknown; error?: string }
  | { op: "state"; state: WorkerReport };

/** ArrayBuffers of a moved prefix, to transfer instead of copy. */
export function prefixBuffers(p: PrefixKv | null | undefined): ArrayBuffer[] {
  if (!p) return [];
  // A shared cache's values are its keys' arrays (MLA): each buffer may be listed once only.
  return [...new Set([...p.kv.k, ...p.kv.v].map((a) => a.buffer as ArrayBuffer))];
}
