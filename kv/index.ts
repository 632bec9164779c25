/** Public surface of the pure KV layer. */
export * from "./types.ts";
export * from "./hash.ts";
export * from "./rng.ts";
export * from "./prefix-index.ts";
export * from "./retention.ts";
export * from "./block-pool.ts";
