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
 * `nullable`, `$ref` to any JSON pointer into the schema (`#`, `#/$defs/…`, `#/properties/…`:
 * json-schema-refs.ts; recursion included, as long as values can end within MAX_SCHEMA_DEPTH levels;
 * inside a subschema with its own `$id`, a pointer into that subschema, or to an embedded `$id` exactly).
 * Annotations (`title`, `description`, `default`, `examples`, …) are ignored.
 */

import { ofType, soundnessProblem } from "./schema-soundness.ts";
import { ANY, isObject, literalNode, resolve, SchemaError, type SchemaNode, show } from "./json-schema-node.ts";
import { DanglingRefError, type RefScope, RefTable } from "./json-schema-refs.ts";
import { checkCompiled, MAX_OPEN_BRANCHES, openBranches, tooManyBranches } from "./json-schema-checks.ts";
import { BOUNDS, count, numberRange, type SchemaObject, stringPatterns, type TypeName, typesOf } from "./json-schema-values.ts";

export { ANY, ANY_OBJECT, type JsonSchema, literalNode, resolve, SchemaError, type SchemaNode } from "./json-schema-node.ts";
export { MAX_OPEN_BRANCHES } from "./json-schema-checks.ts";

const ANNOTATIONS = new Set([
  "title", "description", "default", "examples", "$schema", "$id", "$comment", "deprecated", "readOnly", "writeOnly",
  "$defs", "definitions", "strict",
  // OpenAPI's (pydantic writes it beside a oneOf): which property tells the branches apart. The
  // branches themselves say it (each its own const), so it constrains nothing more.
  "discriminator",
]);
const TYPED = new Set(["type", "multipleOf", "properties", "required", "additionalProperties", "propertyNames", "items", "prefixItems", "additionalItems", "minItems", "maxItems", "uniqueItems", "minLength", "maxLength", "nullable", "pattern", "format", ...BOUNDS]);
/**
 * True for the stack overflow of a compiler recursing into a schema or grammar nested thousands of
 * levels deep: the client's input (a 400, a RequestParamError), not the server's fault.
 */
export function nestsTooDeeply(e: unknown): boolean {
  return e instanceof RangeError && /call stack/i.test(e.message);
}

/** Compiles `schema`; throws {@link SchemaError} for anything outside the subset. */
export function compileSchema(schema: unknown): SchemaNode {
  const refs = new RefTable(schema, compileNode).top;
  // Definitions are compiled even where nothing refers to them, so that a mistake in one is a SchemaError.
  const defs: string[] = [];
  if (isObject(schema)) {
    for (const key of ["$defs", "definitions"]) {
      const table = schema[key];
      if (table === undefined) continue;
      if (!isObject(table)) throw new SchemaError(`The schema's "${key}" must be an object, got ${show(table)}`);
      for (const name of Object.keys(table)) defs.push(refs.target([key, name], "#"));
    }
  }
  const root = compileNode(schema, "#", refs);
  const placed = [{ node: root, at: "#" }, ...defs.map((name) => ({ node: refs.table.get(name)!, at: name }))];
  // Every reference must lead to a value now, not when the model reaches it.
  for (const { node } of placed) resolve(node);
  checkCompiled(placed);
  const problem = soundnessProblem(placed);
  if (problem !== null) throw new SchemaError(problem);
  return root;
}

function compileNode(s: unknown, at: string, outer: RefScope): SchemaNode {
  if (!isObject(s)) return compileFresh(s, at, outer);
  // A subschema with its own `$id` is a resource: local pointers inside it point into it.
  const refs = outer.enter(s);
  // A schema a reference names may also be written inline (`#`, the root, above all): compiled once.
  const known = refs.compiled(s);
  if (known !== undefined) return known;
  const node = compileFresh(s, at, refs);
  refs.remember(s, node);
  return node;
}

function compileFresh(s: unknown, at: string, defs: RefScope): SchemaNode {
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

function compileCombinator(s: SchemaObject, k: string, at: string, defs: RefScope): SchemaNode {
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
    return { t: "ref", name: defs.refer(v, at), table: defs.table };
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
      // A reference to nothing is a mistake in the schema, not a branch the decoder cannot follow.
      if (!(e instanceof SchemaError) || e instanceof DanglingRefError) throw e;
      refusal ??= e;
    }
  });
  if (options.length === 0) throw refusal!;
  const open = options.reduce((n, o) => n + openBranches(o), 0);
  if (open > MAX_OPEN_BRANCHES) throw tooManyBranches(k, at, open);
  return options.length === 1 ? options[0] : { t: "anyOf", options };
}

function compileTyped(s: SchemaObject, type: TypeName, at: string, defs: RefScope): SchemaNode {
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

function compileArray(s: SchemaObject, at: string, defs: RefScope): SchemaNode {
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

function compileObject(s: SchemaObject, at: string, defs: RefScope): SchemaNode {
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
function propertyNames(v: unknown, at: string, defs: RefScope): string[] | null {
  const node = resolve(compileNode(v, at, defs));
  if (node.t === "any" || (node.t === "string" && node.min === 0 && node.max === Infinity && node.patterns.length === 0)) return null;
  const options = node.t === "anyOf" ? node.options.map(resolve) : [node];
  const names = options.flatMap((o) => (o.t === "literal" ? o.texts.map((t) => JSON.parse(t) as unknown) : [undefined]));
  if (names.some((n) => typeof n !== "string")) {
    throw new SchemaError(`The schema's "propertyNames" at ${at} is followed only as an enum or const of names, not as ${show(v)}`);
  }
  return names as string[];
}
