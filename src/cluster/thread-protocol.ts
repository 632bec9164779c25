/**
 * Messages between a cluster and an engine in a worker thread (thread-host.ts runs the engine,
 * thread-engine.ts is its stand-in on the cluster's side). Plain structured-cloneable data.
 */
import type { KvEvent } from "../../kv/index.ts";
import type { BackendChoice } from "../backend/select.ts";
import type { CreateEngineOptions } from "../engine/engine-factory.ts";
import type { EngineStats, GenerateRequest, GenerateResult, StreamDelta } from "../engine/engine-types.ts";
import type { PrefixKv } from "../engine/prefix-transfer.ts";
import type { QueueState, StepMixing } from "../engine/scheduler-types.ts";
import type { StepRecord } from "../engine/step-record.ts";

/** Engine options that cross a thread boundary (no callbacks). */
export type ThreadEngineOptions = Omit<CreateEngineOptions, "onStep" | "now" | "workerId">;

/** From the cluster to a thread. */
export type ToThread =
  | { op: "init"; modelPath: string; backend: BackendChoice; workerId: string; engine: ThreadEngineOptions }
  | { op: "submit"; rid: number; req: GenerateRequest }
  | { op: "cancel"; rid: number }
  | { op: "tool"; sessionId: string; tool: string }
  | { op: "export"; cid: number; tokens: number[] }
  | { op: "import"; cid: number; prefix: PrefixKv; sessionId?: string }
  | { op: "mixing"; mode: StepMixing }
  | { op: "stop"; cid: number };

/** What a thread reports of its engine after each change. */
export interface ThreadState {
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

/** From a thread to the cluster. */
export type FromThread =
  | { op: "ready"; maxModelLen: number; blockSize: number; backend: string; state: ThreadState }
  | { op: "failed"; message: string }
  | { op: "accepted"; rid: number; sessionId?: string }
  | { op: "rejected"; rid: number; name: string; message: string }
  | { op: "delta"; rid: number; delta: StreamDelta }
  | { op: "result"; rid: number; result: GenerateResult }
  | { op: "reply"; cid: number; value?: unknown; error?: string }
  | { op: "state"; state: ThreadState };

/** ArrayBuffers of a moved prefix, to transfer instead of copy. */
export function prefixBuffers(p: PrefixKv | null | undefined): ArrayBuffer[] {
  if (!p) return [];
  return [...p.kv.k, ...p.kv.v].map((a) => a.buffer as ArrayBuffer);
}
