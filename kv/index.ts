/** Public surface of the pure KV layer. */
export * from "./types.ts";
export * from "./hash.ts";
export * from "./hash-table.ts";
export * from "./rng.ts";
export * from "./prefix-index.ts";
export * from "./lru-list.ts";
export * from "./retention.ts";
export * from "./block-pool.ts";
export * from "./session-tracker.ts";
export * from "./agent-retention.ts";
export * from "./rank-heap.ts";
export * from "./tiers.ts";
export * from "./prefetch.ts";
export * from "./global-index.ts";
export * from "./transfer.ts";
