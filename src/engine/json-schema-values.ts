/**
 * The scalar keywords of the JSON Schema subset (json-schema.ts): which types a schema names or
 * implies, string patterns and formats, number bounds and steps, and counts (`minItems`, `maxLength`).
 */
import { decimalStep, type NumberRange, rangeHolds } from "./number-bounds.ts";
import { type CompiledRegex, compilePattern, FORMATS, formatPattern, RegexError } from "./regex-nfa.ts";
import { SchemaError, show } from "./json-schema-node.ts";

/** A schema object as the request gives it. */
export type SchemaObject = { readonly [k: string]: unknown };

/** The numeric bounds keywords. */
export const BOUNDS = ["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"];
/** Formats that say how a number is stored, not which values it takes (OpenAPI's). */
const NUMBER_FORMATS = new Set(["int32", "int64", "float", "double"]);
/**
 * String formats that constrain nothing: OpenAPI's `password` is a hint to user interfaces; pydantic
 * writes `binary` for bytes and `path` for paths, which take any string.
 */
const FREE_FORMATS = new Set(["password", "binary", "path"]);
const TYPES = ["object", "array", "string", "number", "integer", "boolean", "null"] as const;
/** A JSON Schema type name. */
export type TypeName = (typeof TYPES)[number];

/** The types `s` names, or implies by its keywords when it names none (empty: any value). */
export function typesOf(s: SchemaObject, at: string): TypeName[] {
  const t = s.type;
  if (t === undefined) {
    if (s.properties !== undefined || s.required !== undefined || s.additionalProperties !== undefined || s.propertyNames !== undefined) return ["object"];
    if (["items", "prefixItems", "additionalItems", "minItems", "maxItems", "uniqueItems"].some((k) => s[k] !== undefined)) return ["array"];
    if (s.minLength !== undefined || s.maxLength !== undefined || s.pattern !== undefined) return ["string"];
    if (typeof s.format === "string" && !NUMBER_FORMATS.has(s.format)) return ["string"];
    if (BOUNDS.some((k) => s[k] !== undefined) || s.multipleOf !== undefined) return ["number"];
    return [];
  }
  const list = Array.isArray(t) ? t : [t];
  for (const x of list) {
    if (!TYPES.includes(x as TypeName)) throw new SchemaError(`The schema type ${show(x)} at ${at} is not one of ${TYPES.join(", ")}`);
  }
  if (list.length === 0) throw new SchemaError(`The schema's "type" at ${at} is an empty list`);
  return list as TypeName[];
}

/** The expressions a string of `s` must match: its `pattern` and its `format`. */
export function stringPatterns(s: SchemaObject, at: string): CompiledRegex[] {
  const out: CompiledRegex[] = [];
  const compile = (source: string, what: string) => {
    try {
      out.push(compilePattern(source));
    } catch (e) {
      if (e instanceof RegexError) throw new SchemaError(`The schema's ${what} at ${at} cannot be followed: ${e.message}`);
      throw e;
    }
  };
  if (s.pattern !== undefined) {
    if (typeof s.pattern !== "string") throw new SchemaError(`The schema's "pattern" at ${at} must be a string, got ${show(s.pattern)}`);
    compile(s.pattern, `"pattern"`);
  }
  const f = s.format;
  if (f !== undefined) {
    if (typeof f !== "string") throw new SchemaError(`The schema's "format" at ${at} must be a string, got ${show(f)}`);
    const source = formatPattern(f);
    if (source !== undefined) compile(source, `"format" ${show(f)}`);
    else if (!FREE_FORMATS.has(f) && !NUMBER_FORMATS.has(f)) {
      throw new SchemaError(`The schema's "format" ${show(f)} at ${at} is not supported by constrained decoding (supported: ${[...FORMATS, ...FREE_FORMATS].join(", ")})`);
    }
  }
  return out;
}

/** The bounds `s` puts on a number (null when none); throws when no value (no integer) meets them. */
export function numberRange(s: SchemaObject, integer: boolean, at: string): NumberRange | null {
  if (!BOUNDS.some((k) => s[k] !== undefined) && s.multipleOf === undefined) return null;
  const num = (k: string): number | undefined => {
    const v = s[k];
    if (v === undefined || typeof v === "boolean") return undefined;
    if (typeof v !== "number" || !Number.isFinite(v)) throw new SchemaError(`The schema's ${show(k)} at ${at} must be a finite number, got ${show(v)}`);
    return v;
  };
  // Draft 4 wrote exclusive bounds as booleans beside minimum/maximum; later drafts as numbers. Of two
  // bounds on one side the tighter holds (an exclusive one at the same value).
  const side = (inclusive: string, exclusive: string, lower: boolean): { v: number; open: boolean } | null => {
    const a = num(inclusive), b = num(exclusive), flag = s[exclusive];
    if (typeof flag === "boolean" && a === undefined) throw new SchemaError(`The schema's ${show(exclusive)} at ${at} is a boolean without ${show(inclusive)}`);
    const bounds = [...(a === undefined ? [] : [{ v: a, open: flag === true }]), ...(b === undefined ? [] : [{ v: b, open: true }])];
    const tighter = (x: { v: number; open: boolean }, y: { v: number; open: boolean }) => (x.v === y.v ? (x.open ? x : y) : (x.v > y.v) === lower ? x : y);
    return bounds.length === 0 ? null : bounds.reduce(tighter);
  };
  const l = side("minimum", "exclusiveMinimum", true), h = side("maximum", "exclusiveMaximum", false);
  const m = s.multipleOf;
  if (m !== undefined && (typeof m !== "number" || !Number.isFinite(m) || m <= 0)) {
    throw new SchemaError(`The schema's "multipleOf" at ${at} must be a number above 0, got ${show(m)}`);
  }
  const range: NumberRange = {
    lo: l?.v ?? -Infinity, loOpen: l?.open ?? false, hi: h?.v ?? Infinity, hiOpen: h?.open ?? false,
    ...(m === undefined ? {} : { step: decimalStep(m, integer) }),
  };
  if (!rangeHolds(range, integer)) {
    const multiples = m === undefined ? "" : ` and asks for multiples of ${m}`;
    throw new SchemaError(`The schema at ${at} bounds the ${integer ? "integer" : "number"} to ${showRange(range)}${multiples}, which holds no ${integer ? "integer" : "value"}`);
  }
  return range;
}

function showRange(r: NumberRange): string {
  return `${r.loOpen ? "(" : "["}${r.lo}, ${r.hi}${r.hiOpen ? ")" : "]"}`;
}

/** The non-negative integer `s[k]`, or `dflt` when absent. */
export function count(s: SchemaObject, k: string, dflt: number, at: string): number {
  const v = s[k];
  if (v === undefined) return dflt;
  if (typeof v !== "number" || !Number.isInteger(v) || v < 0) throw new SchemaError(`The schema's ${show(k)} at ${at} must be a non-negative integer, got ${show(v)}`);
  return v;
}
