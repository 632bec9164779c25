/**
 * What the HTTP layer may ask of a serving engine beyond ServingEngine when it is a cluster, found by
 * capability rather than by class: a front whose steps run on its workers and that counts what it
 * did (hand-offs, prefix moves, flips), and an engine that reloads a LoRA adapter in place.
 */
import type { ServingEngine } from "../engine/engine-types.ts";
import type { LoraAdapter } from "../model/lora.ts";
import type { ClusterCounters } from "./cluster-types.ts";

/** A serving engine in front of workers: it runs no steps of its own, and counts what it did. */
export interface ClusterFront {
  readonly counters: ClusterCounters;
}

/** An engine that reloads an adapter in place (vLLM's `load_inplace`) without unloading the old one first (Cluster.replaceAdapter). */
export interface AdapterReloader {
  replaceAdapter(name: string, adapter: LoraAdapter): Promise<void>;
}

/** Whether `engine` is a front of workers (a cluster), whose counters it reports and whose steps run elsewhere. */
export function isClusterFront<E extends ServingEngine>(engine: E): engine is E & ClusterFront {
  const counters = (engine as Partial<ClusterFront>).counters;
  return typeof counters === "object" && counters !== null;
}

/** Whether `engine` reloads an adapter in place (else a reload unloads the old one, then loads the new one). */
export function canReplaceAdapter<E extends ServingEngine>(engine: E): engine is E & AdapterReloader {
  return typeof (engine as Partial<AdapterReloader>).replaceAdapter === "function";
}
