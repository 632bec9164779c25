/**
 * Messages between a cluster and an engine in a worker thread or process (worker-host.ts runs the engine,
 * remote-engine.ts is its stand-in on the cluster's side). Plain structured-cloneable data.
 */
import type { KvEvent } from "../../kv/index.ts";
import type { BackendChoice } from "../backend/select.ts";
import type { CreateEngineOptions } from "../engine/engine-factory.ts";
import { LoraAdapterError } from "../engine/engine-adapters.ts";
import {
  ContextLengthError, EngineOverloadedError, type EngineStats, type GenerateRequest, type GenerateResult, NoWorkerError, RequestParamError,
  SessionRefusedError, type StreamDelta,
} from "../engine/engine-types.ts";
import type { PrefixKv } from "../engine/prefix-transfer.ts";
import type { QueueState, StepMixing } from "../engine/scheduler-types.ts";
import type { StepRecord } from "../engine/step-record.ts";
import type { QuantizeDType } from "../model/weights.ts";

/** Engine options that cross to a worker (no callbacks). */
export type PortableEngineOptions = Omit<CreateEngineOptions, "onStep" | "now" | "workerId"> & {
  /** The worker warms its engine up before it reports ready (Engine.warmUp; "ready" then says how long it took). */
  warmUp?: boolean;
};

/** Where a worker loads its model from, and how (`--quantize`), with its vision projector (`--mmproj`). */
export interface ModelLoad {
  path: string;
  quantize?: QuantizeDType;
  mmproj?: string;
}

/** From the cluster to a worker. */
export type ToWorker =
  | { op: "init"; modelPath: string; quantize?: QuantizeDType; mmproj?: string; backend: BackendChoice; workerId: string; engine: PortableEngineOptions }
  | { op: "submit"; rid: number; req: GenerateRequest }
  | { op: "cancel"; rid: number }
  | { op: "tool"; sessionId: string; tool: string }
  | { op: "moved"; sessionId: string }
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

/**
 * A step of a worker's start ("init"), in order: reading the model's weights, the speculative draft
 * model's, starting the backend, creating the engine (uploading the weights).
 */
export type LoadingStage = "model" | "draft" | "backend" | "engine" | "warm-up";

/** From a worker to the cluster. */
export type FromWorker =
  /**
   * Progress of a start, sent at each stage and, while weights are read, at most once a second:
   * `done` and `total` are bytes of tensor data (absent where a stage has no measure). The cluster's
   * start timeout counts silence between these (worker-start.ts); an older worker sends none.
   */
  | { op: "loading"; stage: LoadingStage; done?: number; total?: number }
  /** `vocabSize`: what the cluster checks a request's token ids against before sending it (absent from an older worker). */
  | { op: "ready"; maxModelLen: number; blockSize: number; vocabSize?: number; backend: string; fingerprint: string; state: WorkerReport; warmUpMs?: number }
  | { op: "failed"; message: string }
  | { op: "accepted"; rid: number; sessionId?: string }
  /**
   * `name`: the refusal's class (see {@link refusalOf}); `notFound`: a LoraAdapterError's, for an adapter
   * the worker does not have; `field`: a RequestParamError's, the request field at fault.
   */
  | { op: "rejected"; rid: number; name: string; message: string; notFound?: boolean; field?: string }
  | { op: "delta"; rid: number; delta: StreamDelta }
  | { op: "result"; rid: number; result: GenerateResult }
  | { op: "reply"; cid: number; value?: unknown; error?: string }
  | { op: "state"; state: WorkerReport };

/**
 * ArrayBuffers of a moved prefix (its KV, and its recurrent state if any), for the server to transfer to the importing worker instead of
 * copying them. Only the server's side transfers: a worker replying with an export copies (a
 * detach would slow its kernels; worker-host.ts).
 */
export function prefixBuffers(p: PrefixKv | null | undefined): ArrayBuffer[] {
  if (!p) return [];
  // A shared cache's values are its keys' arrays (MLA): each buffer may be listed once only.
  const state = p.state ? [...p.state.values.conv, ...p.state.values.ssm, ...(p.state.values.window ?? [])] : [];
  return [...new Set([...p.kv.k, ...p.kv.v, ...state].map((a) => a.buffer as ArrayBuffer))];
}

/** The typed refusals a worker's engine throws at submit, by name: the cluster's side throws the same classes. */
const REFUSALS: Record<string, (message: string, field?: keyof GenerateRequest) => Error> = {
  RequestParamError: (m, field) => new RequestParamError(m, field),
  ContextLengthError: (m) => new ContextLengthError(m),
  EngineOverloadedError: (m) => new EngineOverloadedError(m),
  SessionRefusedError: (m) => new SessionRefusedError(m),
  NoWorkerError: (m) => new NoWorkerError(m),
};

/**
 * A worker's "rejected" message as the error its engine threw: the same class when it is one of the
 * typed refusals of engine-types.ts (or a LoraAdapterError), so the server answers it as one engine's
 * (400, 404, 429, 503); undefined for any other (a fault of the worker, not a refusal).
 */
export function refusalOf(m: Extract<FromWorker, { op: "rejected" }>): Error | undefined {
  if (m.name === "LoraAdapterError") return new LoraAdapterError(m.message, m.notFound === true);
  // The field as the worker's engine named it (a GenerateRequest key; the server maps it to its API's).
  const field = typeof m.field === "string" ? m.field as keyof GenerateRequest : undefined;
  return Object.hasOwn(REFUSALS, m.name) ? REFUSALS[m.name](m.message, field) : undefined;
}

/** Whether `e` is one of the typed refusals a server answers as the client's mistake or a full queue (not a 500). */
export function isRefusal(e: unknown): e is Error {
  return e instanceof RequestParamError || e instanceof ContextLengthError || e instanceof EngineOverloadedError;
}

/** The "rejected" message for `e`, what an engine's submit threw for request `rid`. */
export function rejection(rid: number, e: unknown): Extract<FromWorker, { op: "rejected" }> {
  const x = e instanceof Error ? e : new Error(String(e));
  return {
    op: "rejected", rid, name: x.name, message: x.message,
    ...(x instanceof LoraAdapterError && x.notFound ? { notFound: true } : {}),
    ...(x instanceof RequestParamError && x.field !== undefined ? { field: x.field } : {}),
  };
}
