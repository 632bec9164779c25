/**
 * The subset of JSON Schema that constrained decoding follows (`response_format: json_schema`, and
 * the arguments of forced tool calls), compiled into plain nodes for the grammar automaton
 * (src/engine/grammar.ts). A keyword outside the subset is refused with a {@link SchemaError} naming
 * it and where it is, never ignored: output that silently breaks a schema is worse than a 400.
 *
 * Followed: `type` (one or a list), `properties`, `required`, `additionalProperties` (absent means
 * none when `properties` is given, but for `required` names, which take any value; any object
 * otherwise; keys come in any order, each once), `items`,
 * tuples (`prefixItems`, or draft 4's `items` list with `additionalItems`), `minItems`, `maxItems`,
 * `uniqueItems` (items that are strings, numbers, booleans, null or enum values),
 * `minLength`, `maxLength`, `minimum`, `maximum`, `exclusiveMinimum`, `exclusiveMaximum` (a number,
 * or draft 4's boolean beside `minimum`/`maximum`), `multipleOf` (a bounded or stepped number is
 * written without an exponent, a stepped one with no more fraction digits than its step), `pattern`
 * and `format` on strings (regex-nfa.ts: the formats it lists; `password` free; OpenAPI's number
 * formats are annotations), `enum`, `const` (beside a `type`, only its values), `anyOf`, `oneOf` (as
 * anyOf, as vLLM's xgrammar and llama.cpp follow it: a value two branches match may be written), `allOf` with one entry,
 * `nullable`, `$ref` to `#/$defs/…` or `#/definitions/…` (recursion included, as long as values can
 * end within MAX_SCHEMA_DEPTH levels).
 * Annotations (`title`, `description`, `default`, `examples`, …) are ignored.
 */

import { decimalStep, integersIn, type NumberRange, rangeHolds } from "./number-bounds.ts";
import { literalKey } from "./value-key.ts";
import { type CompiledRegex, compilePattern, FORMATS, formatPattern, RegexError } from "./regex-nfa.ts";
import { ofType, soundnessProblem } from "./schema-soundness.ts";

/**
 * Named definitions of one schema, each compiled on first use, so that one compiled early
 * (`propertyNames` resolves its reference at once) may name one defined after it. Each reference
 * carries its own table.
 */
class DefTable extends Map<string, SchemaNode> {
  readonly #raw = new Map<string, unknown>();

  /** Adds definition `name` (`#/$defs/NAME`), compiled when first asked for. */
  define(name: string, schema: unknown): void {
    this.#raw.set(name, schema);
  }

  /** Every name defined, compiled or not. */
  names(): string[] {
    return [...new Set([...this.keys(), ...this.#raw.keys()])];
  }

  override get(name: string): SchemaNode | undefined {
    const raw = this.#raw.get(name);
    if (raw !== undefined) {
      this.#raw.delete(name);
      super.set(name, compileNode(raw, name, this));
    }
    return super.get(name);
  }
}

/** A JSON Schema as the request gives it. */
export type JsonSchema = boolean | { readonly [keyword: string]: unknown };

/** A compiled schema node. A `ref` is looked up in its schema's definitions when it is reached. */
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
    /** `uniqueItems`: no two items equal (items are scalars or enum values, see compileArray). */
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
  | { readonly t: "anyOf"; readonly options: readonly SchemaNode[] }
  | { readonly t: "ref"; readonly name: string; readonly table: ReadonlyMap<string, SchemaNode> };

/** A schema the decoder cannot follow; the message names the keyword and its place (`#/…`). */
export class SchemaError extends Error {
  override name = "SchemaError";
}

const ANNOTATIONS = new Set([
  "title", "description", "default", "examples", "$schema", "$id", "$comment", "deprecated", "readOnly", "writeOnly",
  "$defs", "definitions", "strict",
  // OpenAPI's (pydantic writes it beside a oneOf): which property tells the branches apart. The
  // branches themselves say it (each its own const), so it constrains nothing more.
  "discriminator",
]);
const BOUNDS = ["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"];
const TYPED = new Set(["type", "multipleOf", "properties", "required", "additionalProperties", "propertyNames", "items", "prefixItems", "additionalItems", "minItems", "maxItems", "uniqueItems", "minLength", "maxLength", "nullable", "pattern", "format", ...BOUNDS]);
/** Formats that say how a number is stored, not which values it takes (OpenAPI's). */
const NUMBER_FORMATS = new Set(["int32", "int64", "float", "double"]);
/**
 * String formats that constrain nothing: OpenAPI's `password` is a hint to user interfaces; pydantic
 * writes `binary` for bytes and `path` for paths, which take any string.
 */
const FREE_FORMATS = new Set(["password", "binary", "path"]);
const TYPES = ["object", "array", "string", "number", "integer", "boolean", "null"] as const;
type TypeName = (typeof TYPES)[number];

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

/**
 * True for the stack overflow of a compiler recursing into a schema or grammar nested thousands of
 * levels deep: the client's input (a 400, a RequestParamError), not the server's fault.
 */
export function nestsTooDeeply(e: unknown): boolean {
  return e instanceof RangeError && /call stack/i.test(e.message);
}

/** Compiles `schema`; throws {@link SchemaError} for anything outside the subset. */
export function compileSchema(schema: unknown): SchemaNode {
  const defs = new DefTable();
  if (isObject(schema)) {
    for (const key of ["$defs", "definitions"]) {
      const table = schema[key];
      if (table === undefined) continue;
      if (!isObject(table)) throw new SchemaError(`The schema's "${key}" must be an object, got ${show(table)}`);
      for (const [name, sub] of Object.entries(table)) defs.define(`#/${key}/${name}`, sub);
    }
  }
  const root = compileNode(schema, "#", defs);
  // Every reference must lead to a value now, not when the model reaches it.
  for (const name of defs.names()) resolve({ t: "ref", name, table: defs });
  resolve(root);
  // Walks the definitions too, so that a reference to nothing in one the root never reaches is a SchemaError.
  const visited = new Set<SchemaNode>();
  checkUnique(root, "#", visited);
  for (const name of defs.names()) checkUnique({ t: "ref", name, table: defs }, name, visited);
  const problem = soundnessProblem([{ node: root, at: "#" }, ...defs.names().map((name) => ({ node: defs.get(name)!, at: name }))]);
  if (problem !== null) throw new SchemaError(problem);
  return root;
}


/** Follows references to a node that is not one; throws on a missing or circular reference. */
export function resolve(node: SchemaNode): Exclude<SchemaNode, { t: "ref" }> {
  const seen = new Set<string>();
  let n = node;
  while (n.t === "ref") {
    if (seen.has(n.name)) throw new SchemaError(`The schema reference ${show(n.name)} refers to itself without a value in between`);
    seen.add(n.name);
    n = referred(n);
  }
  return n;
}

/** The node `ref` names; throws SchemaError when it names no definition. */
function referred(ref: Extract<SchemaNode, { t: "ref" }>): SchemaNode {
  const next = ref.table.get(ref.name);
  if (next === undefined) throw new SchemaError(`The schema reference ${show(ref.name)} names no definition under #/$defs or #/definitions`);
  return next;
}

function compileNode(s: unknown, at: string, defs: DefTable): SchemaNode {
  if (s === true) return ANY;
  if (s === false) throw new SchemaError(`The schema at ${at} is false: no value can match it`);
  if (!isObject(s)) throw new SchemaError(`The schema at ${at} must be an object or a boolean, got ${show(s)}`);
  for (const k of Object.keys(s)) {
    if (!ANNOTATIONS.has(k) && !TYPED.has(k) && !["enum", "const", "anyOf", "oneOf", "allOf", "$ref"].includes(k)) {
      throw new SchemaError(`The schema keyword ${show(k)} at ${at} is not supported by constrained decoding`);
    }
  }
  if (s.nullable === true) return { t: "anyOf", options: [compileNode({ ...s, nullable: false }, at, defs), { t: "literal", texts: ["null"] }] };
  const combinators = ["enum", "const", "anyOf", "oneOf", "allOf", "$ref"].filter((k) => s[k] !== undefined);
  if (combinators.length > 0) {
    const clash = [...combinators.slice(1), ...Object.keys(s).filter((k) => TYPED.has(k) && k !== "type" && k !== "nullable")];
    // enum/const beside a type only repeats it; anything else beside a combinator would need intersection.
    if (clash.length > 0 || (s.type !== undefined && combinators[0] !== "enum" && combinators[0] !== "const")) {
      throw new SchemaError(`The schema at ${at} combines ${show(combinators[0])} with ${show(clash[0] ?? "type")}, which constrained decoding does not support`);
    }
    return compileCombinator(s, combinators[0], at, defs);
  }
  const types = typesOf(s, at);
  if (types.length === 0) return ANY;
  const nodes = types.map((t) => compileTyped(s, t, at, defs));
  return nodes.length === 1 ? nodes[0] : { t: "anyOf", options: nodes };
}

function compileCombinator(s: { readonly [k: string]: unknown }, k: string, at: string, defs: DefTable): SchemaNode {
  const v = s[k];
  if (k === "const" || k === "enum") {
    if (k === "enum" && (!Array.isArray(v) || v.length === 0)) throw new SchemaError(`The schema's "enum" at ${at} must be a non-empty array, got ${show(v)}`);
    // Beside a type, a value must also be of that type.
    if (s.type !== undefined) typesOf(s, at);
    const values = (k === "enum" ? v as unknown[] : [v]).filter((x) => ofType(x, s.type));
    if (values.length === 0) throw new SchemaError(`The schema's ${show(k)} at ${at} has no value of type ${show(s.type)}: no value can match it`);
    return literalNode(values.map((x) => JSON.stringify(x)));
  }
  if (k === "$ref") {
    if (typeof v !== "string" || !/^#\/(\$defs|definitions)\/[^/]+$/.test(v)) {
      throw new SchemaError(`The schema reference ${show(v)} at ${at} is not supported: only "#/$defs/NAME" and "#/definitions/NAME"`);
    }
    return { t: "ref", name: v, table: defs };
  }
  if (!Array.isArray(v) || v.length === 0) throw new SchemaError(`The schema's ${show(k)} at ${at} must be a non-empty array, got ${show(v)}`);
  if (k === "allOf") {
    if (v.length !== 1) throw new SchemaError(`The schema's "allOf" at ${at} has ${v.length} entries; constrained decoding supports one`);
    return compileNode(v[0], `${at}/allOf/0`, defs);
  }
  // A branch the decoder cannot follow is left out while another remains: what is written then still
  // matches the schema, only never that branch (pydantic's Decimal is a number or a string under a
  // lookahead pattern; it is written as a number).
  // Refused before its branches are compiled, which alone takes seconds for a body's worth of them.
  if (v.length > MAX_OPEN_BRANCHES) throw tooManyBranches(k, at, v.length);
  const options: SchemaNode[] = [];
  let refusal: SchemaError | undefined;
  v.forEach((x, i) => {
    try {
      options.push(compileNode(x, `${at}/${k}/${i}`, defs));
    } catch (e) {
      if (!(e instanceof SchemaError)) throw e;
      refusal ??= e;
    }
  });
  if (options.length === 0) throw refusal!;
  const open = options.reduce((n, o) => n + openBranches(o), 0);
  if (open > MAX_OPEN_BRANCHES) throw tooManyBranches(k, at, open);
  return options.length === 1 ? options[0] : { t: "anyOf", options };
}

function tooManyBranches(k: string, at: string, open: number): SchemaError {
  return new SchemaError(
    `The schema's ${show(k)} at ${at} has more than ${MAX_OPEN_BRANCHES} branches open at once (${open}, nested anyOf, oneOf and type lists counted together): each token's mask follows every open branch; give a long list of values as an "enum"`,
  );
}

/**
 * Most branches of an anyOf (or oneOf) that may be open at once: the decoder starts all of them
 * together and each step's mask follows every one (8000 took seconds of event-loop time per token).
 */
export const MAX_OPEN_BRANCHES = 1000;

/** How many branches `n` opens where it starts: an anyOf's nested anyOfs start with it. */
function openBranches(n: SchemaNode): number {
  return n.t === "anyOf" ? n.options.reduce((sum, o) => sum + openBranches(o), 0) : 1;
}

function typesOf(s: { readonly [k: string]: unknown }, at: string): TypeName[] {
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

function compileTyped(s: { readonly [k: string]: unknown }, type: TypeName, at: string, defs: DefTable): SchemaNode {
  switch (type) {
    case "boolean": return { t: "literal", texts: ["true", "false"] };
    case "null": return { t: "literal", texts: ["null"] };
    case "number": case "integer": return { t: "number", integer: type === "integer", range: numberRange(s, type === "integer", at) };
    case "string": {
      const min = count(s, "minLength", 0, at);
      // A host name is at most 253 characters in all (RFC 1123), more than a pattern counts cheaply.
      const maxLength = count(s, "maxLength", Infinity, at);
      const max = Math.min(maxLength, s.format === "hostname" ? 253 : Infinity);
      if (min > max) throw new SchemaError(`The schema at ${at} has minLength ${min} above ${max < maxLength ? "253, the longest hostname" : `maxLength ${max}`}`);
      const patterns = stringPatterns(s, at);
      if (patterns.some((r) => r.minToAccept(r.start) > max)) throw new SchemaError(`The schema at ${at} has maxLength ${max}, and no string of at most ${max} characters matches its pattern or format`);
      return { t: "string", min, max, patterns };
    }
    case "array": return compileArray(s, at, defs);
    case "object": return compileObject(s, at, defs);
  }
}

function compileArray(s: { readonly [k: string]: unknown }, at: string, defs: DefTable): SchemaNode {
  const min = count(s, "minItems", 0, at), maxItems = count(s, "maxItems", Infinity, at);
  // A tuple is 2020-12's `prefixItems` with `items` for the rest, or earlier drafts' `items` list
  // with `additionalItems` for the rest; an absent rest schema allows any items, `false` none.
  const tupleKey = s.prefixItems !== undefined ? "prefixItems" : Array.isArray(s.items) ? "items" : null;
  const restKey = tupleKey === "items" ? "additionalItems" : "items";
  if (tupleKey === "prefixItems" && Array.isArray(s.items)) {
    throw new SchemaError(`The schema at ${at} gives both "prefixItems" and an "items" list; "items" after "prefixItems" must be one schema`);
  }
  if (tupleKey === null && s.additionalItems !== undefined) {
    throw new SchemaError(`The schema's "additionalItems" at ${at} needs an "items" list before it`);
  }
  const list = tupleKey === null ? [] : s[tupleKey];
  if (!Array.isArray(list)) throw new SchemaError(`The schema's "prefixItems" at ${at} must be a list of schemas, got ${show(list)}`);
  const prefix = list.map((x, i) => compileNode(x, `${at}/${tupleKey}/${i}`, defs));
  const rest = s[restKey];
  const items = rest === undefined ? ANY : rest === false ? null : compileNode(rest, `${at}/${restKey}`, defs);
  const max = items === null ? Math.min(maxItems, prefix.length) : maxItems;
  if (min > max) {
    throw new SchemaError(max < maxItems
      ? `The schema at ${at} has minItems ${min} above the ${prefix.length} items its tuple allows`
      : `The schema at ${at} has minItems ${min} above maxItems ${max}`);
  }
  const u = s.uniqueItems ?? false;
  if (typeof u !== "boolean") throw new SchemaError(`The schema's "uniqueItems" at ${at} must be a boolean, got ${show(u)}`);
  return { t: "array", prefix, items, min, max, unique: u };
}

/**
 * Checks every `uniqueItems` array reachable from `node` (once all definitions are compiled, as its
 * items may be references): items must be scalars or enum values, and an enum must have at least
 * minItems values; more would be a dead end.
 */
function checkUnique(node: SchemaNode, at: string, visited: Set<SchemaNode>): void {
  if (visited.has(node)) return;
  visited.add(node);
  const n = node.t === "ref" ? referred(node) : node;
  const where = node.t === "ref" ? node.name : at;
  switch (n.t) {
    case "ref": return checkUnique(n, where, visited);
    case "anyOf": return n.options.forEach((o, i) => checkUnique(o, `${where}/anyOf/${i}`, visited));
    case "object":
      for (const [k, v] of n.props) checkUnique(v, `${where}/properties/${k}`, visited);
      if (n.extra !== null) checkUnique(n.extra, `${where}/additionalProperties`, visited);
      return;
    case "array": {
      const items = [...n.prefix.map((x, i) => [x, `${where}/prefixItems/${i}`] as const), ...(n.items === null ? [] : [[n.items, `${where}/items`] as const])];
      for (const [x, path] of items) {
        checkUnique(x, path, visited);
        if (n.unique && !scalarOnly(x, new Set())) {
          throw new SchemaError(`The schema's "uniqueItems" at ${where} is followed only for items that are strings, numbers, booleans, null or enum values; the items at ${path} may be objects or arrays`);
        }
      }
      const values = n.unique && n.items !== null && n.prefix.length === 0 ? distinctValues(n.items) : Infinity;
      if (values < n.min) throw new SchemaError(`The schema at ${where} has minItems ${n.min}, but its unique items can take only ${values} values`);
    }
  }
}

/** Whether every value of `n` is a string, number, boolean, null or enum value (never a free object or array). */
function scalarOnly(n: SchemaNode, seen: Set<SchemaNode>): boolean {
  if (seen.has(n)) return true;
  seen.add(n);
  const r = resolve(n);
  if (r.t === "anyOf") return r.options.every((o) => scalarOnly(o, seen));
  return r.t === "literal" || r.t === "string" || r.t === "number";
}

/**
 * How many distinct values `n` takes, at most (Infinity when it cannot tell): enum values, and
 * integers between bounds (multiples of their step).
 */
function distinctValues(n: SchemaNode): number {
  const keys = new Set<string>();
  let others = 0;
  const visit = (x: SchemaNode, seen: Set<SchemaNode>) => {
    if (seen.has(x)) return;
    seen.add(x);
    const r = resolve(x);
    if (r.t === "anyOf") r.options.forEach((o) => visit(o, seen));
    else if (r.t === "literal") r.texts.forEach((t) => keys.add(literalKey(t)));
    else others += r.t === "number" && r.integer && r.range !== null ? integersIn(r.range) : Infinity;
  };
  visit(n, new Set());
  return keys.size + others;
}

function compileObject(s: { readonly [k: string]: unknown }, at: string, defs: DefTable): SchemaNode {
  const p = s.properties ?? {};
  if (!isObject(p)) throw new SchemaError(`The schema's "properties" at ${at} must be an object, got ${show(p)}`);
  const props = new Map<string, SchemaNode>();
  for (const [name, sub] of Object.entries(p)) {
    checkPropertyName(name, at);
    props.set(name, compileNode(sub, `${at}/properties/${name}`, defs));
  }
  const a = s.additionalProperties;
  let extra = a === undefined ? (s.properties === undefined ? ANY : null) : a === false ? null : compileNode(a, `${at}/additionalProperties`, defs);
  const names = s.propertyNames === undefined ? null : propertyNames(s.propertyNames, `${at}/propertyNames`, defs);
  if (names !== null) {
    // Only the listed names may be keys: declared ones keep their schemas, the others take the
    // additional properties' (pydantic's dict[Literal[...], X] and dict[SomeEnum, X]).
    for (const name of [...props.keys()]) if (!names.includes(name)) props.delete(name);
    for (const name of names) {
      if (props.has(name) || extra === null) continue;
      checkPropertyName(name, `${at}/propertyNames`);
      props.set(name, extra);
    }
    extra = null;
  }
  const r = s.required ?? [];
  if (!Array.isArray(r) || r.some((x) => typeof x !== "string")) throw new SchemaError(`The schema's "required" at ${at} must be a list of property names, got ${show(r)}`);
  for (const name of r as string[]) {
    // Without additionalProperties, a required property not listed takes any value (JSON Schema's meaning).
    if (!props.has(name) && a === undefined && names === null) props.set(name, ANY);
    if (!props.has(name) && extra === null) throw new SchemaError(`The schema at ${at} requires ${show(name)}, which its properties do not allow`);
  }
  return { t: "object", props, required: new Set(r as string[]), extra };
}

/** Keys are matched character by character as written; escapes in them would need decoding. */
function checkPropertyName(name: string, at: string): void {
  if ([...name].some((ch) => ch === '"' || ch === "\\" || ch.charCodeAt(0) < 0x20)) throw new SchemaError(`The property name ${show(name)} at ${at} holds a quote, backslash or control character, which constrained decoding does not support`);
}

/**
 * The names a `propertyNames` schema allows when it lists them (`enum`, `const`, or a `$ref` to
 * one); null when it allows every name (`true`, `{"type": "string"}`). Anything else (a pattern,
 * lengths) is refused.
 */
function propertyNames(v: unknown, at: string, defs: DefTable): string[] | null {
  const node = resolve(compileNode(v, at, defs));
  if (node.t === "any" || (node.t === "string" && node.min === 0 && node.max === Infinity && node.patterns.length === 0)) return null;
  const options = node.t === "anyOf" ? node.options.map(resolve) : [node];
  const names = options.flatMap((o) => (o.t === "literal" ? o.texts.map((t) => JSON.parse(t) as unknown) : [undefined]));
  if (names.some((n) => typeof n !== "string")) {
    throw new SchemaError(`The schema's "propertyNames" at ${at} is followed only as an enum or const of names, not as ${show(v)}`);
  }
  return names as string[];
}

/** The expressions a string of `s` must match: its `pattern` and its `format`. */
function stringPatterns(s: { readonly [k: string]: unknown }, at: string): CompiledRegex[] {
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
function numberRange(s: { readonly [k: string]: unknown }, integer: boolean, at: string): NumberRange | null {
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

function count(s: { readonly [k: string]: unknown }, k: string, dflt: number, at: string): number {
  const v = s[k];
  if (v === undefined) return dflt;
  if (typeof v !== "number" || !Number.isInteger(v) || v < 0) throw new SchemaError(`The schema's ${show(k)} at ${at} must be a non-negative integer, got ${show(v)}`);
  return v;
}

function isObject(v: unknown): v is { readonly [k: string]: unknown } {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function show(v: unknown): string {
  const s = JSON.stringify(v) ?? String(v);
  return s.length > 80 ? `${s.slice(0, 77)}...` : s;
}
