/**
 * Choices among many alternatives that part at one literal (a forced tool call's name among a hundred
 * tools), stepped as one sorted run of literals (grammar-literals.ts) instead of one configuration per
 * alternative: the per-character cost of a token mask then no longer grows with the alternatives.
 * Two shapes: a group whose alternatives each begin with a literal (a tool-call format's opening
 * with the tool's name: {@link indexGroup}), and an anyOf of objects told apart by one property's
 * constant (Hermes' and Llama 3's `{"name": ..., "arguments": ...}`: {@link objectPick}), held as one
 * undecided object until that property's value is written. Either accepts exactly the language of
 * the alternatives stepped one by one, and once the literal is written the state is the same.
 */
import type { Config, Frame, GroupIndex, LiteralsFrame, ObjectNode, ObjFrame, Piece, SeqFrame, SeqGroup } from "./grammar-frames.ts";
import { ANY, type ObjectPick, type SchemaNode } from "./json-schema-node.ts";

/** Alternatives from this many are indexed (fewer are stepped one by one, as before). */
const INDEX_FROM = 2;

/** `group` with an index of its alternatives by their first literal, when every one begins with a non-empty literal. */
export function indexGroup(group: SeqGroup): SeqGroup {
  if (group.alts.length < INDEX_FROM) return group;
  const byText = new Map<string, (readonly Piece[])[]>();
  for (const pieces of group.alts) {
    const p = pieces[0];
    if (p === undefined || !("lit" in p) || p.lit === "") return group;
    const alts = byText.get(p.lit);
    if (alts === undefined) byText.set(p.lit, [pieces]);
    else alts.push(pieces);
  }
  const texts = [...byText.keys()].sort();
  const index: GroupIndex = { texts, alts: texts.map((t) => byText.get(t)!) };
  return { ...group, index };
}

/** The configuration starting indexed `seq.group` (its `index` set): one run of its first literals. */
export function startIndexed(seq: SeqFrame, index: GroupIndex): Config[] {
  const up: SeqFrame = { ...seq, pieces: seq.group.alts[0], i: 0 };
  return [{ top: { k: "lits", texts: index.texts, lo: 0, hi: index.texts.length, i: 0, up, d: seq.d, then: index }, ws: 0 }];
}

/**
 * The pick of object `options` by the constant of property `key`, or undefined where they are not
 * alike enough (fewer than two, a reference, additional properties, other keys or required keys, or
 * `key` not a constant in one of them).
 */
export function objectPick(options: readonly SchemaNode[], key: string): ObjectPick | undefined {
  if (options.length < INDEX_FROM) return undefined;
  const first = options[0];
  if (first.t !== "object") return undefined;
  const all: ObjectNode[] = [];
  const byText = new Map<string, ObjectNode[]>();
  let need = 1;
  for (const o of options) {
    if (o.t !== "object" || o.extra !== null || !sameKeys(o.props, first.props) || !sameKeys(o.required, first.required)) return undefined;
    const v = o.props.get(key);
    if (v === undefined || v.t !== "literal") return undefined;
    for (const t of new Set(v.texts)) {
      const objs = byText.get(t);
      if (objs === undefined) byText.set(t, [o]);
      else objs.push(o);
    }
    all.push(o);
    need = Math.max(need, o.need ?? 1);
  }
  const texts = [...byText.keys()].sort();
  if (texts.length === 0 || texts.some((t) => t === "")) return undefined;
  const props = new Map<string, SchemaNode>([...first.props.keys()].map((k) => [k, k === key ? { t: "literal", texts } : ANY]));
  const shape: ObjectNode = { t: "object", props, required: first.required, extra: null, need };
  return { key, texts, objs: texts.map((t) => byText.get(t)!), all, shape };
}

/** Whether two key collections hold the same keys. */
function sameKeys(a: { readonly size: number; keys(): Iterable<string> }, b: { has(k: string): boolean; readonly size: number }): boolean {
  if (a.size !== b.size) return false;
  for (const k of a.keys()) if (!b.has(k)) return false;
  return true;
}

/** Undecided object `f` as option `o`: the frame each option's own object would be in. */
export function decide(f: ObjFrame, o: ObjectNode): ObjFrame {
  return { k: "obj", node: o, seen: f.seen, phase: f.phase, key: f.key, compact: f.compact, up: f.up, d: f.d };
}

/** The frames text `j` of run `f` goes on in, by the alternatives it begins (`f.then` set). */
export function thenFrames(f: LiteralsFrame, j: number): Frame[] {
  const then = f.then!;
  if ("alts" in then) return then.alts[j].map((pieces): Frame => ({ ...(f.up as SeqFrame), pieces, i: 0 }));
  return then.objs[j].map((o) => decide(f.up as ObjFrame, o));
}
