/**
 * `$ref` for constrained decoding: every local JSON pointer (RFC 6901) into the schema it appears in,
 * `#` (the whole schema, for recursion), `#/$defs/Name`, `#/definitions/Name`, and any path such as
 * zod-to-json-schema writes (`#/properties/a`, `#/items/anyOf/0`), with `~0`/`~1` escapes and a URI
 * fragment's percent-encoding. A local pointer inside a subschema with its own `$id` points into
 * that subschema (json-schema-resources.ts); a reference may also name an embedded subschema by its
 * exact `$id` (`"item.json"`, `"item.json#/$defs/X"`). Each target is compiled once, when first
 * reached; a pointer to nothing, and a reference to another document, are SchemaErrors naming it.
 */
import { isObject, SchemaError, type SchemaNode, show } from "./json-schema-node.ts";
import { locate, type Resource, resourceId, Resources } from "./json-schema-resources.ts";

/** Compiles the schema `s` found at `at` (a reference's target among them), in `scope` for its references. */
export type CompileNode = (s: unknown, at: string, scope: RefScope) => SchemaNode;

/** A pointer into a schema that leads to nothing; never a branch anyOf leaves out, always refused. */
export class DanglingRefError extends SchemaError {}

/** `tokens` as a canonical pointer fragment: `#`, then `/token` each, `~` and `/` escaped. */
export function pointerName(tokens: readonly string[]): string {
  return `#${tokens.map((t) => `/${t.replaceAll("~", "~0").replaceAll("/", "~1")}`).join("")}`;
}

/**
 * The tokens of local reference `ref` (found at `at`); throws SchemaError for a reference to another
 * document, a plain-name fragment, or a malformed pointer.
 */
export function pointerTokens(ref: unknown, at: string): string[] {
  if (typeof ref !== "string") throw new SchemaError(`The schema reference ${show(ref)} at ${at} must be a string`);
  if (!ref.startsWith("#")) {
    throw new SchemaError(`The schema reference ${show(ref)} at ${at} is not supported: only "#/$defs/NAME" and other JSON pointers into this schema ("#", "#/…") are followed, not references to other documents`);
  }
  const fragment = percentDecoded(ref.slice(1));
  if (fragment === "") return [];
  if (!fragment.startsWith("/")) {
    throw new SchemaError(`The schema reference ${show(ref)} at ${at} is not supported: a plain-name fragment needs "$anchor", which constrained decoding does not follow; write a JSON pointer ("#/…")`);
  }
  return fragment.slice(1).split("/").map((token) => {
    if (/~[^01]|~$/.test(token)) throw new SchemaError(`The schema reference ${show(ref)} at ${at} is not a valid JSON pointer: "~" must be followed by 0 or 1 (RFC 6901)`);
    return token.replaceAll("~1", "/").replaceAll("~0", "~");
  });
}

/** A URI fragment's percent-encoding decoded (UTF-8); a `%` that starts no valid escape is kept as written. */
function percentDecoded(fragment: string): string {
  return fragment.replace(/(%[0-9a-fA-F]{2})+/g, (run) => {
    try {
      return decodeURIComponent(run);
    } catch {
      return run;
    }
  });
}

/**
 * The references of one schema: canonical pointer → compiled target, each compiled when first asked
 * for (`get`), so that a target may refer to one met later, or to itself. A target's canonical name
 * is its path from the document's root, so that the same pointer in two resources names two targets.
 * Also remembers the node each schema object compiled to (in its resource), so a target that is also
 * written inline (`#`, the root) is compiled once.
 */
export class RefTable extends Map<string, SchemaNode> {
  readonly #compile: CompileNode;
  readonly #targets = new Map<string, { value: unknown; resource: Resource }>();
  readonly #busy = new Set<string>();
  readonly #nodes = new WeakMap<object, WeakMap<object, SchemaNode>>();
  readonly #resources: Resources;
  /** The scope of the document's root resource, where compiling starts. */
  readonly top: RefScope;

  /** The table of `root`'s references, compiling targets with `compile`. */
  constructor(root: unknown, compile: CompileNode) {
    super();
    this.#compile = compile;
    this.#resources = new Resources(root);
    this.top = new RefScope(this, { schema: root, path: [] });
  }

  /**
   * The canonical name of reference `ref` (at `at`, in `resource`), its target now known to exist;
   * throws a SchemaError for a reference it cannot follow, a {@link DanglingRefError} for one to nothing.
   */
  refer(ref: unknown, at: string, resource: Resource): string {
    if (typeof ref !== "string") throw new SchemaError(`The schema reference ${show(ref)} at ${at} must be a string`);
    const hash = ref.indexOf("#");
    const uri = hash < 0 ? ref : ref.slice(0, hash);
    if (uri === "") return this.target(pointerTokens(ref, at), at, resource);
    // Another resource named by its $id exactly as written (`"item.json"`, `"https://…/item.json#/$defs/X"`).
    const named = this.#resources.named(uri);
    if (named.length > 1) throw new SchemaError(`The schema reference ${show(ref)} at ${at} is ambiguous: ${named.length} subschemas carry the "$id" ${show(uri)}`);
    if (named.length === 0) {
      throw new SchemaError(`The schema reference ${show(ref)} at ${at} is not supported: only "#/$defs/NAME" and other JSON pointers into this schema ("#", "#/…"), and the exact "$id" of a subschema in it, are followed, not references to other documents`);
    }
    return this.target(pointerTokens(ref.slice(uri.length) || "#", at), at, named[0]);
  }

  /** As {@link RefTable.refer}, for a pointer into `resource` already split into `tokens` (unescaped). */
  target(tokens: readonly string[], at: string, resource: Resource): string {
    const name = pointerName([...resource.path, ...tokens]);
    if (this.#targets.has(name)) return name;
    const hit = locate(resource, tokens);
    if (!hit.found) {
      const parent = pointerName([...resource.path, ...tokens.slice(0, hit.at)]);
      throw new DanglingRefError(`The schema reference ${show(name)} names no definition: the schema has nothing named ${show(tokens[hit.at])} at ${show(parent)} (the reference is at ${at})`);
    }
    this.#targets.set(name, { value: hit.value, resource: hit.resource });
    return name;
  }

  /** The resource that subschema `s` starts, found in the document; undefined when it starts none there. */
  resourceOf(s: object): Resource | undefined {
    return resourceId(s) === undefined ? undefined : this.#resources.of(s);
  }

  /** The compiled node of schema object `s` in `resource`, when it has been compiled. */
  compiled(s: object, resource: Resource): SchemaNode | undefined {
    return this.#nodes.get(s)?.get(resourceKey(resource));
  }

  /** Records that schema object `s` in `resource` compiled to `node`. */
  remember(s: object, resource: Resource, node: SchemaNode): void {
    let byResource = this.#nodes.get(s);
    if (byResource === undefined) this.#nodes.set(s, byResource = new WeakMap());
    byResource.set(resourceKey(resource), node);
  }

  override get(name: string): SchemaNode | undefined {
    const done = super.get(name);
    const target = this.#targets.get(name);
    if (done !== undefined || target === undefined) return done;
    // Only propertyNames looks a reference up while compiling; its schema holding the names cannot be compiled before them.
    if (this.#busy.has(name)) throw new SchemaError(`The schema reference ${show(name)} is needed to compile itself (a "propertyNames" inside the schema it names refers back to it)`);
    this.#busy.add(name);
    try {
      const node = this.#compile(target.value, name, new RefScope(this, target.resource));
      super.set(name, node);
      return node;
    } finally {
      this.#busy.delete(name);
    }
  }
}

/** A resource's key among remembered nodes: its schema object (a boolean root has none to share). */
function resourceKey(resource: Resource): object {
  return isObject(resource.schema) ? resource.schema : resource;
}

/** Where compiling stands: the reference table, and the resource local pointers point into. */
export class RefScope {
  /** The table every reference of the document goes into (a `ref` node's `table`). */
  readonly table: RefTable;
  /** The nearest enclosing subschema with its own `$id`, or the document's root. */
  readonly resource: Resource;

  /** The scope of `resource` in `table`. */
  constructor(table: RefTable, resource: Resource) {
    this.table = table;
    this.resource = resource;
  }

  /** The scope for compiling subschema `s`: its own resource when it carries an `$id`, this one otherwise. */
  enter(s: object): RefScope {
    if (s === this.resource.schema) return this;
    const own = this.table.resourceOf(s);
    return own === undefined ? this : new RefScope(this.table, own);
  }

  /** The canonical name of reference `ref` at `at`, resolved in this scope's resource (see {@link RefTable.refer}). */
  refer(ref: unknown, at: string): string {
    return this.table.refer(ref, at, this.resource);
  }

  /** The canonical name of the pointer `tokens` into this scope's resource (see {@link RefTable.target}). */
  target(tokens: readonly string[], at: string): string {
    return this.table.target(tokens, at, this.resource);
  }

  /** The compiled node of schema object `s` in this resource, when it has been compiled. */
  compiled(s: object): SchemaNode | undefined {
    return this.table.compiled(s, this.resource);
  }

  /** Records that schema object `s` in this resource compiled to `node`. */
  remember(s: object, node: SchemaNode): void {
    this.table.remember(s, this.resource, node);
  }
}
