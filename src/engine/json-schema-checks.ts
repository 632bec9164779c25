/**
 * Checks of a compiled schema (json-schema.ts) once every reference in it is compiled: `uniqueItems`
 * arrays hold only items it can follow, and no place opens more than {@link MAX_OPEN_BRANCHES} branches
 * at once, references counted as the branches they name (so a list of `$ref`s to wide unions cannot
 * pass the bound), nor follows references round to itself before any value is written (a union that
 * names itself among its branches: the decoder would start it without end).
 */
import { integersIn } from "./number-bounds.ts";
import { literalKey } from "./value-key.ts";
import { referred, resolve, SchemaError, type SchemaNode, selfReference, show } from "./json-schema-node.ts";

/**
 * Most branches of an anyOf (or oneOf) that may be open at once: the decoder starts all of them
 * together and each step's mask follows every one (8000 took seconds of event-loop time per token).
 */
export const MAX_OPEN_BRANCHES = 1000;

/** The error for `k` (`anyOf`, `oneOf`) at `at` opening `open` branches, more than the bound. */
export function tooManyBranches(k: string, at: string, open: number): SchemaError {
  return new SchemaError(
    `The schema's ${show(k)} at ${at} has more than ${MAX_OPEN_BRANCHES} branches open at once (${open}, nested anyOf, oneOf, type lists and the references they name counted together): each token's mask follows every open branch; give a long list of values as an "enum"`,
  );
}

/** How many branches `n` opens where it starts, as far as it is compiled (a reference counts one): an anyOf's nested anyOfs start with it. */
export function openBranches(n: SchemaNode): number {
  return n.t === "anyOf" ? n.options.reduce((sum, o) => sum + openBranches(o), 0) : 1;
}

/**
 * Walks every node reachable from `roots` (each with its place), checking `uniqueItems` and the
 * branches each place opens; throws SchemaError at the first problem.
 */
export function checkCompiled(roots: readonly { readonly node: SchemaNode; readonly at: string }[]): void {
  const visited = new Set<SchemaNode>();
  const open = branchCounter();
  for (const { node, at } of roots) checkNode(node, at, visited, open);
}

/** Counts the branches a node opens where it starts, references followed (memoized); throws on a reference that comes round to itself first. */
function branchCounter(): (n: SchemaNode) => number {
  const counted = new Map<SchemaNode, number>();
  const path: SchemaNode[] = [];
  const onPath = new Set<SchemaNode>();
  const count = (n: SchemaNode): number => {
    if (n.t !== "anyOf" && n.t !== "ref") return 1;
    const known = counted.get(n);
    if (known !== undefined) return known;
    if (onPath.has(n)) {
      // Compiled nodes nest as the schema's objects do: a cycle passes through a reference.
      const ref = path.slice(path.indexOf(n)).find((x) => x.t === "ref");
      throw selfReference(ref?.t === "ref" ? ref.name : "#");
    }
    path.push(n);
    onPath.add(n);
    const v = n.t === "ref" ? count(referred(n)) : n.options.reduce((sum, o) => sum + count(o), 0);
    path.pop();
    onPath.delete(n);
    counted.set(n, v);
    return v;
  };
  return count;
}

function checkNode(node: SchemaNode, at: string, visited: Set<SchemaNode>, open: (n: SchemaNode) => number): void {
  if (visited.has(node)) return;
  visited.add(node);
  const n = node.t === "ref" ? referred(node) : node;
  const where = node.t === "ref" ? node.name : at;
  // A reference's union is counted where the reference is, among the branches around it.
  const branches = open(node);
  if (branches > MAX_OPEN_BRANCHES) throw tooManyBranches("anyOf", where, branches);
  switch (n.t) {
    case "ref": return checkNode(n, where, visited, open);
    case "anyOf": return n.options.forEach((o, i) => checkNode(o, `${where}/anyOf/${i}`, visited, open));
    case "object":
      for (const [k, v] of n.props) checkNode(v, `${where}/properties/${k}`, visited, open);
      if (n.extra !== null) checkNode(n.extra, `${where}/additionalProperties`, visited, open);
      return;
    case "array": {
      const items = [...n.prefix.map((x, i) => [x, `${where}/prefixItems/${i}`] as const), ...(n.items === null ? [] : [[n.items, `${where}/items`] as const])];
      for (const [x, path] of items) {
        checkNode(x, path, visited, open);
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
