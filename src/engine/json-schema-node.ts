/**
 * The compiled form of a JSON Schema (json-schema.ts compiles it, grammar.ts follows it): the node
 * types, the error a schema outside the subset raises, and following references to a node.
 */
import type { CompiledRegex } from "./regex-nfa.ts";
import type { NumberRange } from "./number-bounds.ts";

/** A JSON Schema as the request gives it. */
export type JsonSchema = boolean | { readonly [keyword: string]: unknown };

/**
 * A compiled schema node. A `ref` is looked up in its schema's reference table when it is reached:
 * `name` is the JSON pointer it refers to, written canonically (`#`, `#/$defs/Name`, `#/properties/a~1b`).
 */
export type SchemaNode =
  | { readonly t: "any" }
  | {
    readonly t: "object"; readonly props: ReadonlyMap<string, SchemaNode>; readonly required: ReadonlySet<string>; readonly extra: SchemaNode | null;
    /** Fewest levels of objects and arrays its values nest, itself included; set by compileSchema (absent: 1). */
    readonly need?: number;
  }
  /**
   * `prefix`: the schemas of the first items, in order (a tuple: `prefixItems`, or draft 4–2019's
   * `items` list); `items`: the schema of every item after them, null when none may follow.
   */
  | {
    readonly t: "array"; readonly prefix: readonly SchemaNode[]; readonly items: SchemaNode | null; readonly min: number; readonly max: number;
    /** `uniqueItems`: no two items equal (items are scalars or enum values, see json-schema-checks.ts). */
    readonly unique: boolean;
    /** As an object's `need`. */
    readonly need?: number;
  }
  /** `patterns`: expressions the value must match (its `pattern` and `format`). */
  | { readonly t: "string"; readonly min: number; readonly max: number; readonly patterns: readonly CompiledRegex[] }
  /** `range`: null when unbounded. */
  | { readonly t: "number"; readonly integer: boolean; readonly range: NumberRange | null }
  /** One of these JSON texts exactly (enum, const, booleans, null). */
  /** `sorted`: the texts sorted and without repeats, for lists long enough to step as one run (grammar-literals.ts). */
  | { readonly t: "literal"; readonly texts: readonly string[]; readonly sorted?: readonly string[] }
  /** `pick`: the options told apart by one property's constant (grammar-pick.ts), for stepping them as one until it is written. */
  | { readonly t: "anyOf"; readonly options: readonly SchemaNode[]; readonly pick?: ObjectPick }
  | { readonly t: "ref"; readonly name: string; readonly table: ReadonlyMap<string, SchemaNode> };

/**
 * Object options of an anyOf, all with the same keys, required keys and no others, told apart by the
 * constant value of property `key` (a tool call's name): the texts of those values sorted without
 * repeats, and for each the options it names (grammar-pick.ts builds it).
 */
export interface ObjectPick {
  readonly key: string;
  readonly texts: readonly string[];
  readonly objs: readonly (readonly Extract<SchemaNode, { t: "object" }>[])[];
  /** Every option, in the anyOf's order. */
  readonly all: readonly Extract<SchemaNode, { t: "object" }>[];
  /** The options' common shape: their keys, `key` taking any of `texts`, the others any value; need: the deepest option's. */
  readonly shape: Extract<SchemaNode, { t: "object" }>;
}

/** A reference node. */
export type RefNode = Extract<SchemaNode, { t: "ref" }>;

/** A schema the decoder cannot follow; the message names the keyword and its place (`#/…`). */
export class SchemaError extends Error {
  override name = "SchemaError";
}

/** Literal lists from this long are stepped as one sorted run, not one configuration per text. */
const SORTED_LITERALS_FROM = 4;

/** The node of exactly one of `texts`; a long list also sorted, so that stepping it costs the same whatever its length. */
export function literalNode(texts: readonly string[]): SchemaNode {
  if (texts.length < SORTED_LITERALS_FROM) return { t: "literal", texts };
  return { t: "literal", texts, sorted: [...new Set(texts)].sort() };
}

/** The node for any JSON value. */
export const ANY: SchemaNode = { t: "any" };
/** The node for any JSON object (`response_format: json_object`). */
export const ANY_OBJECT: SchemaNode = { t: "object", props: new Map(), required: new Set(), extra: ANY };

/** Follows references to a node that is not one; throws on a missing or circular reference. */
export function resolve(node: SchemaNode): Exclude<SchemaNode, { t: "ref" }> {
  const seen = new Set<string>();
  let n = node;
  while (n.t === "ref") {
    if (seen.has(n.name)) throw selfReference(n.name);
    seen.add(n.name);
    n = referred(n);
  }
  return n;
}

/** The error for a reference that comes back to itself before any value is written. */
export function selfReference(name: string): SchemaError {
  return new SchemaError(`The schema reference ${show(name)} refers to itself without a value in between`);
}

/** The node `ref` names; throws SchemaError when it names nothing. */
export function referred(ref: RefNode): SchemaNode {
  const next = ref.table.get(ref.name);
  if (next === undefined) throw new SchemaError(`The schema reference ${show(ref.name)} names no definition in this schema`);
  return next;
}

/** Whether `v` is a JSON object (not an array, not null). */
export function isObject(v: unknown): v is { readonly [k: string]: unknown } {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** `v` as JSON for an error message, cut at 80 characters. */
export function show(v: unknown): string {
  const s = JSON.stringify(v) ?? String(v);
  return s.length > 80 ? `${s.slice(0, 77)}...` : s;
}
