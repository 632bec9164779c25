/**
 * JSON Schema resources for `$ref` (json-schema-refs.ts): a subschema with its own `$id` starts a new
 * resource (2020-12 §8.2.1, draft-07 §8.2), and a local pointer (`#`, `#/$defs/X`) inside it points
 * into that subschema, not into the document's root. An `$id` that is only a fragment (`"#foo"`,
 * draft-07's plain-name anchor) starts none. Finds where a pointer leads and in which resource, and
 * the embedded resources by `$id` as written (exact match; relative URIs are not resolved).
 */
import { isObject } from "./json-schema-node.ts";

/** One resource: the document's root, or a subschema with its own `$id`, with its path from the root (unescaped tokens). */
export interface Resource {
  readonly schema: unknown;
  readonly path: readonly string[];
}

/** The `$id` by which `s` starts a resource (a trailing empty fragment `#` dropped), or undefined when it starts none. */
export function resourceId(s: unknown): string | undefined {
  if (!isObject(s) || typeof s.$id !== "string" || s.$id.startsWith("#")) return undefined;
  return s.$id.endsWith("#") ? s.$id.slice(0, -1) : s.$id;
}

/** Keywords whose value is an object of named subschemas. */
const SCHEMA_MAPS = ["properties", "$defs", "definitions", "patternProperties", "dependentSchemas"];
/** Keywords whose value is a subschema, or a list of them. */
const SCHEMAS = [
  "items", "prefixItems", "additionalItems", "additionalProperties", "propertyNames", "anyOf", "oneOf", "allOf",
  "not", "if", "then", "else", "contains", "unevaluatedItems", "unevaluatedProperties",
];

/** What `tokens` point to from `from`, and the resource it lies in; or where the walk found nothing. */
export function locate(from: Resource, tokens: readonly string[]): { found: true; value: unknown; resource: Resource } | { found: false; at: number } {
  let cur = from.schema, resource = from;
  for (let i = 0; i < tokens.length; i++) {
    const t = tokens[i];
    if (Array.isArray(cur) && /^(0|[1-9]\d*)$/.test(t) && Number(t) < cur.length) cur = cur[Number(t)];
    else if (isObject(cur) && Object.hasOwn(cur, t)) cur = cur[t];
    else return { found: false, at: i };
    if (resourceId(cur) !== undefined) resource = { schema: cur, path: [...from.path, ...tokens.slice(0, i + 1)] };
  }
  return { found: true, value: cur, resource };
}

/** The resources embedded in one document, found by one walk over its subschemas when first asked for. */
export class Resources {
  readonly #root: unknown;
  #byObject: WeakMap<object, Resource> | undefined;
  #byId: Map<string, Resource[]> | undefined;

  /** The resources of document `root`. */
  constructor(root: unknown) {
    this.#root = root;
  }

  /** The resource subschema `s` starts (it has its own `$id`), or undefined when the walk did not meet it as one. */
  of(s: object): Resource | undefined {
    return this.#walked().objects.get(s);
  }

  /** The resources whose `$id` is `id` as written (a trailing `#` aside), the root's included. */
  named(id: string): readonly Resource[] {
    return this.#walked().ids.get(id) ?? [];
  }

  #walked(): { objects: WeakMap<object, Resource>; ids: Map<string, Resource[]> } {
    if (this.#byObject !== undefined && this.#byId !== undefined) return { objects: this.#byObject, ids: this.#byId };
    const objects = new WeakMap<object, Resource>(), ids = new Map<string, Resource[]>();
    // Iterative: a schema nested thousands of levels deep is walked without recursion. Each entry
    // links to its parent, so that only a resource's path is spelled out, not every subschema's.
    interface Step { s: unknown; up: Step | undefined; tokens: readonly string[] }
    const stack: Step[] = [{ s: this.#root, up: undefined, tokens: [] }];
    const seen = new Set<object>();
    const pathOf = (step: Step): string[] => {
      const parts: (readonly string[])[] = [];
      for (let at: Step | undefined = step; at !== undefined; at = at.up) parts.push(at.tokens);
      return parts.reverse().flat();
    };
    while (stack.length > 0) {
      const step = stack.pop()!;
      const s = step.s;
      if (!isObject(s) || seen.has(s)) continue;
      seen.add(s);
      const id = resourceId(s);
      if (id !== undefined) {
        const resource = { schema: s, path: pathOf(step) };
        objects.set(s, resource);
        ids.set(id, [...(ids.get(id) ?? []), resource]);
      }
      for (const key of SCHEMA_MAPS) {
        const map = s[key];
        if (isObject(map)) for (const [name, sub] of Object.entries(map)) stack.push({ s: sub, up: step, tokens: [key, name] });
      }
      for (const key of SCHEMAS) {
        const sub = s[key];
        if (Array.isArray(sub)) sub.forEach((x, i) => stack.push({ s: x, up: step, tokens: [key, String(i)] }));
        else stack.push({ s: sub, up: step, tokens: [key] });
      }
    }
    this.#byObject = objects;
    this.#byId = ids;
    return { objects, ids };
  }
}
