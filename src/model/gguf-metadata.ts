/** Typed access to GGUF metadata, failing with one-line errors that name the key and file. */
import { ModelLoadError } from "./config.ts";
import type { GgufEntry, GgufValue } from "./gguf-types.ts";

/** Typed metadata accessors that fail with a one-line error naming the key. */
export class GgufMetadata {
  constructor(readonly entries: Map<string, GgufEntry>, private readonly path: string) {}

  has(key: string): boolean {
    return this.entries.has(key);
  }

  /** A numeric value (integer or float), or `fallback` when absent. */
  number(key: string, fallback?: number): number {
    const v = this.entries.get(key)?.value;
    if (v === undefined) {
      if (fallback !== undefined) return fallback;
      throw new ModelLoadError(`GGUF file "${this.path}" lacks the metadata key "${key}"`);
    }
    if (typeof v === "number") return v;
    if (typeof v === "bigint") return Number(v);
    if (typeof v === "boolean") return v ? 1 : 0;
    throw new ModelLoadError(`GGUF metadata "${key}" in "${this.path}" should be a number, got ${JSON.stringify(v)}`);
  }

  optionalNumber(key: string): number | undefined {
    return this.entries.has(key) ? this.number(key) : undefined;
  }

  string(key: string, fallback?: string): string {
    const v = this.entries.get(key)?.value;
    if (v === undefined && fallback !== undefined) return fallback;
    if (typeof v !== "string") {
      throw new ModelLoadError(`GGUF metadata "${key}" in "${this.path}" should be a string, got ${JSON.stringify(v)}`);
    }
    return v;
  }

  bool(key: string, fallback: boolean): boolean {
    const v = this.entries.get(key)?.value;
    return v === undefined ? fallback : Boolean(v);
  }

  /** An array value; `undefined` when absent. */
  array(key: string): GgufValue[] | undefined {
    const v = this.entries.get(key)?.value;
    if (v === undefined) return undefined;
    if (!Array.isArray(v)) throw new ModelLoadError(`GGUF metadata "${key}" in "${this.path}" should be an array`);
    return v;
  }
}
