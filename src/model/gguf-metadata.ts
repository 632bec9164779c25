/** Typed access to GGUF metadata, failing with one-line errors that name the key and file. */
import { ModelLoadError } from "./config.ts";
import type { GgufEntry, GgufValue } from "./gguf-types.ts";

/** A metadata value as error messages quote it: JSON, with 64-bit integers as digits and long strings and arrays cut short. */
export function showGgufValue(v: GgufValue | undefined): string {
  if (v === undefined) return "nothing";
  // JSON would write NaN and the infinities as null.
  if (typeof v === "bigint" || (typeof v === "number" && !Number.isFinite(v))) return String(v);
  if (Array.isArray(v)) {
    const shown = v.slice(0, 4).map(showGgufValue).join(", ");
    return `[${shown}${v.length > 4 ? `, … (${v.length} items)` : ""}]`;
  }
  return JSON.stringify(typeof v === "string" && v.length > 100 ? `${v.slice(0, 100)}…` : v);
}

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
    throw new ModelLoadError(`GGUF metadata "${key}" in "${this.path}" should be a number, got ${showGgufValue(v)}`);
  }

  optionalNumber(key: string): number | undefined {
    return this.entries.has(key) ? this.number(key) : undefined;
  }

  string(key: string, fallback?: string): string {
    const v = this.entries.get(key)?.value;
    if (v === undefined && fallback !== undefined) return fallback;
    if (typeof v !== "string") {
      throw new ModelLoadError(`GGUF metadata "${key}" in "${this.path}" should be a string, got ${showGgufValue(v)}`);
    }
    return v;
  }

  /** A boolean (or a 0/1 integer, as some converters write flags), or `fallback` when absent. */
  bool(key: string, fallback: boolean): boolean {
    const v = this.entries.get(key)?.value;
    if (v === undefined) return fallback;
    if (typeof v === "boolean") return v;
    if (v === 0 || v === 1) return v === 1;
    throw new ModelLoadError(`GGUF metadata "${key}" in "${this.path}" should be a boolean, got ${showGgufValue(v)}`);
  }

  /** An array value; `undefined` when absent. */
  array(key: string): GgufValue[] | undefined {
    const v = this.entries.get(key)?.value;
    if (v === undefined) return undefined;
    if (!Array.isArray(v)) throw new ModelLoadError(`GGUF metadata "${key}" in "${this.path}" should be an array, got ${showGgufValue(v)}`);
    return v;
  }
}

/** `value` when it is a whole number from 1 that a JS number holds exactly; else an error naming the key. */
export function positiveInteger(value: number, key: string, path: string): number {
  if (!Number.isSafeInteger(value) || value < 1) {
    throw new ModelLoadError(`GGUF metadata "${key}" in "${path}" should be a positive whole number, got ${value}`);
  }
  return value;
}

/** Some GGUFs store per-layer values as arrays; we support only uniform ones. */
export function perLayerNumber(meta: GgufMetadata, key: string, path: string, fallback?: number): number {
  const arr = meta.entries.get(key)?.value;
  if (!Array.isArray(arr)) return meta.number(key, fallback);
  if (arr.length === 0) throw new ModelLoadError(`GGUF metadata "${key}" in "${path}" is an empty array; expected a number or one per layer`);
  const bad = arr.findIndex((v) => typeof v !== "number" && typeof v !== "bigint");
  if (bad >= 0) throw new ModelLoadError(`GGUF metadata "${key}" in "${path}" should hold numbers, got ${showGgufValue(arr[bad])} at index ${bad}`);
  const values = new Set(arr.map(Number));
  if (values.size !== 1) throw new ModelLoadError(`Model "${path}" has per-layer "${key}" values; only uniform layers are supported`);
  return [...values][0];
}
