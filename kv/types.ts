/**
 * Shared vocabulary of the KV layer. Everything here is pure data: the real engine and the
 * simulator both speak it, so events from either feed the same control plane.
 */

/** A chained block hash: a non-negative integer below 2^53 (exact as a JS number, cheap as a Map key). */
export type BlockHash = number;

/** Seconds on some monotonic clock. Time always comes in from outside (engine wall clock, sim clock). */
export type Clock = () => number;

/** A seeded random source returning floats in [0, 1). */
export interface Rng {
  /** Next float in [0, 1). */
  next(): number;
}

/** Where a block's bytes live. */
export type Tier = "device" | "host" | "remote";

/**
 * What a block holds. Agents drop reasoning from the next turn, so reasoning blocks are worth little
 * once their turn ends; system prompts and tool outputs are re-read on every later turn.
 */
export type BlockType = "system" | "user" | "tool-output" | "reasoning" | "output";

/** Optional facts about a block, used by agent-aware retention. */
export interface BlockMeta {
  /** Session the block belongs to (prompt_cache_key, session header, or inferred). */
  sessionId?: string;
  /** Content kind. */
  type?: BlockType;
}

/** A block was filled and entered the prefix cache on some worker and tier. */
export interface KvStoredEvent {
  kind: "stored";
  workerId: string;
  tier: Tier;
  time: number;
  /** Hashes in chain order; the first one's parent is `parentHash`. */
  hashes: BlockHash[];
  parentHash: BlockHash | null;
  /** Tokens per block, so consumers can turn block counts into token counts. */
  blockSize: number;
}

/** Blocks left the prefix cache of a worker's tier (evicted, or the block was reused). */
export interface KvRemovedEvent {
  kind: "removed";
  workerId: string;
  tier: Tier;
  time: number;
  hashes: BlockHash[];
}

/** Blocks were copied or moved between tiers of one worker (offload or prefetch). */
export interface KvMovedEvent {
  kind: "moved";
  workerId: string;
  from: Tier;
  to: Tier;
  time: number;
  hashes: BlockHash[];
}

/**
 * A worker of a model with recurrent state (Gated DeltaNet, Mamba-2, short convolutions) began or
 * ceased to keep the state after the block chain ending at `hash` (a state checkpoint, engine/
 * state-checkpoints.ts). Such a worker resumes a prefix only from a checkpoint, so its blocks beyond
 * its deepest checkpoint within a prompt are no hit: routers count its overlap only that far.
 */
export interface KvStateEvent {
  kind: "state";
  workerId: string;
  time: number;
  /** The last block hash of the chain the state follows (its tokens are whole blocks). */
  hash: BlockHash;
  /** true: the state is kept from now on; false: it is gone. */
  kept: boolean;
}

/** Any KV event. */
export type KvEvent = KvStoredEvent | KvRemovedEvent | KvMovedEvent | KvStateEvent;

/** Subscriber for KV events (a typed channel: the engine publishes, the control plane consumes). */
export type KvEventSink = (event: KvEvent) => void;

/** Raised when a request for blocks cannot be met. */
export class KvCapacityError extends Error {
  override name = "KvCapacityError";
}

/** Raised when a block id or reference count is used wrongly (a bug in the caller). */
export class KvStateError extends Error {
  override name = "KvStateError";
}
