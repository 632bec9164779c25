/**
 * Checks that keep a compiled schema (json-schema.ts) from being followed wrong: enum values of the
 * wrong type, and values that must nest deeper than the grammar writes (the model would reach a dead
 * end). Each returns what is wrong, or writes what the grammar needs; json-schema.ts
 * turns a finding into a SchemaError.
 */
import type { SchemaNode } from "./json-schema.ts";

/**
 * Deepest nesting of objects and arrays a schema's values may need: the grammar writes 32
 * (grammar.ts MAX_DEPTH), and a tool call's wrappers around the arguments take up to two of them.
 */
export const MAX_SCHEMA_DEPTH = 30;

/** Whether `value` (an enum or const value) is of one of `type`'s types (a name or a list; absent: any). */
export function ofType(value: unknown, type: unknown): boolean {
  if (type === undefined) return true;
  const types: unknown[] = Array.isArray(type) ? type : [type];
  return types.some((t) => {
    switch (t) {
      case "null": return value === null;
      case "boolean": return typeof value === "boolean";
      case "string": return typeof value === "string";
      case "number": return typeof value === "number";
      case "integer": return typeof value === "number" && Number.isInteger(value);
      case "array": return Array.isArray(value);
      case "object": return typeof value === "object" && value !== null && !Array.isArray(value);
      default: return false;
    }
  });
}

/** A node of a schema with where it first appears (`#/…`, or a reference's name). */
export interface Placed {
  readonly node: SchemaNode;
  readonly at: string;
}

/** Every node reachable from `roots`, each once, with the place it was first reached at. */
function reachable(roots: readonly Placed[]): Placed[] {
  const out: Placed[] = [];
  const seen = new Set<SchemaNode>();
  const stack = [...roots].reverse();
  while (stack.length > 0) {
    const { node, at } = stack.pop()!;
    if (seen.has(node)) continue;
    seen.add(node);
    out.push({ node, at });
    const kids: Placed[] = [];
    switch (node.t) {
      case "ref": kids.push({ node: node.table.get(node.name)!, at: node.name }); break;
      case "anyOf": node.options.forEach((o, i) => kids.push({ node: o, at: `${at}/anyOf/${i}` })); break;
      case "object":
        for (const [k, v] of node.props) kids.push({ node: v, at: `${at}/properties/${k}` });
        if (node.extra !== null) kids.push({ node: node.extra, at: `${at}/additionalProperties` });
        break;
      case "array":
        node.prefix.forEach((p, i) => kids.push({ node: p, at: `${at}/prefixItems/${i}` }));
        if (node.items !== null) kids.push({ node: node.items, at: `${at}/items` });
    }
    stack.push(...kids.reverse());
  }
  return out;
}

/**
 * The fewest levels of objects and arrays a value of each node in `nodes` (every node reachable from
 * them included) must nest: 0 for scalars and enum values (written as text), 1 + the most its required
 * members need for an object or array, the fewest of its options for an anyOf; Infinity when no
 * finite value exists (recursion with no way out).
 */
function depthNeeds(nodes: readonly SchemaNode[]): Map<SchemaNode, number> {
  const need = new Map<SchemaNode, number>(nodes.map((n) => [n, Infinity]));
  const of = (n: SchemaNode) => need.get(n) ?? 0;
  const next = (n: SchemaNode): number => {
    switch (n.t) {
      case "any": case "string": case "number": case "literal": return 0;
      case "ref": return of(n.table.get(n.name)!);
      case "anyOf": return Math.min(...n.options.map(of));
      case "object": return 1 + Math.max(0, ...[...n.required].map((k) => {
        const s = n.props.get(k) ?? n.extra;
        return s === null ? 0 : of(s);
      }));
      case "array": {
        const items = Array.from({ length: Math.min(n.min, n.prefix.length + 1) }, (_, i) => (i < n.prefix.length ? n.prefix[i] : n.items!));
        return 1 + Math.max(0, ...items.map(of));
      }
    }
  };
  // Needs only fall, from Infinity to the fewest (shortest paths, as Bellman-Ford finds them): repeat until none changes.
  // Members come after their containers in `nodes` (reachable's order): going backwards, most are known when asked for.
  const order = [...nodes].reverse();
  for (let changed = true; changed;) {
    changed = false;
    for (const n of order) {
      const v = next(n);
      if (v < need.get(n)!) {
        need.set(n, v);
        changed = true;
      }
    }
  }
  return need;
}

/**
 * What is wrong with a compiled schema (its root and definitions, `roots`), or null: values that must
 * nest deeper than the grammar writes (or without end). Gives each object and array node its `need`,
 * so that the grammar starts one only where it can end (grammar.ts `fitsDepth`).
 */
export function soundnessProblem(roots: readonly Placed[]): string | null {
  const placed = reachable(roots);
  const needs = depthNeeds(placed.map((p) => p.node));
  for (const { node, at } of placed) {
    const need = needs.get(node)!;
    if (need === Infinity) return `The schema at ${at} has no finite value: each of its values must hold another`;
    if (need > MAX_SCHEMA_DEPTH) return `The schema's values at ${at} must nest at least ${need} levels deep; constrained decoding writes at most ${MAX_SCHEMA_DEPTH}`;
    // Set once, before the schema is used: compileSchema's own nodes, fresh per call.
    if (node.t === "object" || node.t === "array") (node as { need?: number }).need = need;
  }
  return null;
}
