/**
 * The simulator's event kinds and the step limits shared by its parts (admission, KV hand-off,
 * stepping, completion), kept apart so those files need not import each other for types.
 */
import type { PrefetchEvent } from "./prefetch.ts";
import type { ReqState } from "./request.ts";
import type { SimWorker } from "./worker.ts";
import type { SessionPlan } from "./workload-types.ts";

/** One scheduled simulator event. */
export type SimEv =
  | { t: "arrive"; plan: SessionPlan; turn: number }
  | { t: "step"; w: SimWorker; v: number }
  | { t: "wake"; w: SimWorker }
  | { t: "kv"; w: SimWorker; req: ReqState; blocks: number[]; cached: number; from: SimWorker; fromBlocks: number[] }
  | { t: "tick" }
  | { t: "ready"; w: SimWorker }
  | { t: "sample" }
  | PrefetchEvent;

/** A KV transfer landing on its decode worker. */
export type KvArrival = Extract<SimEv, { t: "kv" }>;

/** Most decode steps one macro-step covers (decode-only steps run in batches of identical steps). */
export const MAX_MACRO_STEPS = 64;
/** Most sequences one worker decodes at once (8 GPUs with DP attention: 64 per GPU). */
export const MAX_DECODE_BATCH = 512;
