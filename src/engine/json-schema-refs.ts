/**
 * `$ref` for constrained decoding: every local JSON pointer (RFC 6901) into the schema it appears in,
 * `#` (the whole schema, for recursion), `#/$defs/Name`, `#/definitions/Name`, and any path such as
 * zod-to-json-schema writes (`#/properties/a`, `#/items/anyOf/0`), with `~0`/`~1` escapes and a URI
 * fragment's percent-encoding. Each target is compiled once, when first reached; a pointer to
 * nothing, and a reference to another document, are SchemaErrors naming the reference.
 */
import { isObject, SchemaError, type SchemaNode, show } from "./json-schema-node.ts";

/** Compiles the schema `s` found at `at` (a reference's target among them), with `table` for its references. */
export type CompileNode = (s: unknown, at: string, table: RefTable) => SchemaNode;

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

/** What `tokens` point to in `root`, or where the walk found nothing. */
function locate(root: unknown, tokens: readonly string[]): { found: true; value: unknown } | { found: false; at: number } {
  let cur = root;
  for (let i = 0; i < tokens.length; i++) {
    const t = tokens[i];
    if (Array.isArray(cur) && /^(0|[1-9]\d*)$/.test(t) && Number(t) < cur.length) cur = cur[Number(t)];
    else if (isObject(cur) && Object.hasOwn(cur, t)) cur = cur[t];
    else return { found: false, at: i };
  }
  return { found: true, value: cur };
}

/**
 * The references of one schema: canonical pointer → compiled target, each compiled when first asked
 * for (`get`), so that a target may refer to one met later, or to itself. Also remembers the node
 * each schema object compiled to, so a target that is also written inline (`#`, the root) is compiled once.
 */
export class RefTable extends Map<string, SchemaNode> {
  readonly #root: unknown;
  readonly #compile: CompileNode;
  readonly #targets = new Map<string, unknown>();
  readonly #busy = new Set<string>();
  readonly #nodes = new WeakMap<object, SchemaNode>();

  /** The table of `root`'s references, compiling targets with `compile`. */
  constructor(root: unknown, compile: CompileNode) {
    super();
    this.#root = root;
    this.#compile = compile;
  }

  /**
   * The canonical name of reference `ref` (at `at`), its target now known to exist; throws a
   * SchemaError for a reference it cannot follow, a {@link DanglingRefError} for one to nothing.
   */
  refer(ref: unknown, at: string): string {
    return this.target(pointerTokens(ref, at), at);
  }

  /** As {@link RefTable.refer}, for the pointer already split into `tokens` (unescaped). */
  target(tokens: readonly string[], at: string): string {
    const name = pointerName(tokens);
    if (this.#targets.has(name)) return name;
    const hit = locate(this.#root, tokens);
    if (!hit.found) {
      const parent = pointerName(tokens.slice(0, hit.at));
      throw new DanglingRefError(`The schema reference ${show(name)} names no definition: the schema has nothing named ${show(tokens[hit.at])} at ${show(parent)} (the reference is at ${at})`);
    }
    this.#targets.set(name, hit.value);
    return name;
  }

  /** The compiled node of schema object `s`, when it has been compiled. */
  compiled(s: object): SchemaNode | undefined {
    return this.#nodes.get(s);
  }

  /** Records that schema object `s` compiled to `node`. */
  remember(s: object, node: SchemaNode): void {
    this.#nodes.set(s, node);
  }

  override get(name: string): SchemaNode | undefined {
    const done = super.get(name);
    if (done !== undefined || !this.#targets.has(name)) return done;
    // Only propertyNames looks a reference up while compiling; its schema holding the names cannot be compiled before them.
    if (this.#busy.has(name)) throw new SchemaError(`The schema reference ${show(name)} is needed to compile itself (a "propertyNames" inside the schema it names refers back to it)`);
    this.#busy.add(name);
    try {
      const node = this.#compile(this.#targets.get(name), name, this);
      super.set(name, node);
      return node;
    } finally {
      this.#busy.delete(name);
    }
  }
}
