/**
 * What the token trie asks of an output-grammar state (src/engine/grammar.ts): a key equal for
 * states that accept the same continuations (the mask cache's), and the plain text a state accepts
 * whatever it holds (subtrees allowed whole).
 */
import { ALL_KINDS, ASCII_KINDS, OTHER_KIND, WIDE_KIND } from "./char-kinds.ts";
import type { CompiledRegex, RegexState, RunRoom } from "./regex-nfa.ts";
import { type Frame, type GrammarState, inClass, uniqueSeen } from "./grammar-frames.ts";

/**
 * Numbers schema nodes and piece lists by identity, and keeps each frame's key once made, for
 * {@link grammarStateKey}.
 */
export class ObjectIds {
  #ids = new WeakMap<object, number>();
  #next = 0;
  /** Frames are immutable and name objects by this instance's numbers: a frame's key never changes. */
  #frameKeys = new WeakMap<Frame, string>();

  /** The number of `o`, given on first sight. */
  of(o: object): number {
    let n = this.#ids.get(o);
    if (n === undefined) this.#ids.set(o, (n = this.#next++));
    return n;
  }

  /** The key of frame `f` and the frames below it (made once per frame: configurations share their tails). */
  frameKey(f: Frame | null): string {
    if (f === null) return "";
    let key = this.#frameKeys.get(f);
    if (key === undefined) this.#frameKeys.set(f, (key = frameText(f, this)));
    return key;
  }
}

/**
 * A string that is equal for two states when they accept the same continuations (used to cache
 * token masks). `ids` must be the same for every state compared.
 */
export function grammarStateKey(state: GrammarState, ids: ObjectIds): string {
  let out = "";
  // A top frame mostly lives for one character: its own part is made anew, the frames below it
  // (shared by the states to come) once each.
  for (let i = 0; i < state.length; i++) {
    const top = state[i].top;
    out += `${i === 0 ? "" : "|"}${state[i].ws}:${top === null ? "" : frameText(top, ids)}`;
  }
  return out;
}

/** Each pattern's number and its state's key, `;`-separated. */
function patternKeys(re: readonly object[], rs: readonly RegexState[], ids: ObjectIds): string {
  let out = "";
  for (let i = 0; i < re.length; i++) out += `${i === 0 ? "" : ";"}${ids.of(re[i])}:${rs[i].key}`;
  return out;
}

/** The key of `f` and the frames below it, made anew. */
function frameText(f: Frame, ids: ObjectIds): string {
  const below = f.k === "then" ? `[${grammarStateKey(f.state, ids)}]` : ids.frameKey(f.up);
  switch (f.k) {
    case "value": return `v${ids.of(f.node)},${f.ws ? 1 : 0}${f.compact ? "c" : ""},${f.d}/${below}`;
    case "lit": return `l${JSON.stringify(f.text)},${f.i}/${below}`;
    // The sorted list is one object per schema node: its number and the run name the texts.
    case "lits": return `L${ids.of(f.texts)},${f.lo},${f.hi},${f.i}/${below}`;
    case "str": {
      // Inside an escape its digits so far decide what may follow (a surrogate's other half).
      const re = f.re.length === 0 ? (f.esc === 0 ? "" : `,${f.hex}`) : `,${f.hex},${patternKeys(f.re, f.rs, ids)}`;
      const v = f.v === null ? "" : `,${JSON.stringify(f.v)}`;
      return `s${f.min},${f.max},${f.n},${f.esc}${re}${v}/${below}`;
    }
    case "num": {
      const r = f.range;
      const step = r?.step === undefined ? "" : `*${r.step.p}e-${r.step.d}`;
      const bounds = r === null ? "" : `${r.loOpen ? "(" : "["}${r.lo},${r.hi}${r.hiOpen ? ")" : "]"}${step}`;
      return `n${f.integer ? 1 : 0},${f.ns}${bounds},${f.text}/${below}`;
    }
    case "key": return `k${JSON.stringify(f.text)}/${below}`;
    case "obj": return `o${ids.of(f.node)},${JSON.stringify(f.seen)},${f.phase},${JSON.stringify(f.key)},${f.d}${f.compact ? "c" : ""}/${below}`;
    case "arr": return `a${ids.of(f.node)},${f.count},${f.phase},${f.d}${f.compact ? "c" : ""}${f.seen === null ? "" : JSON.stringify(f.seen)}/${below}`;
    case "re": return `r${ids.of(f.re)},${f.rs.key}/${below}`;
    case "cls": return `c${ids.of(f.cls)}/${below}`;
    case "tagged": return `g${ids.of(f.tags)},${JSON.stringify(f.tail)}/${below}`;
    // The marker names which free stretch this is (a prefix may await several in turn).
    case "think": return `t${JSON.stringify(f.until)},${f.m}/${below}`;
    case "then": return `T${below}`;
    case "raw": {
      const re = f.re.length === 0 ? "" : `,${patternKeys(f.re, f.rs, ids)}`;
      return `w${JSON.stringify(f.end)},${f.m},${f.min},${f.max},${f.n}${re}/${below}`;
    }
    // A group's pieces are its own objects, so the pieces' number names the group too.
    case "seq": return `q${ids.of(f.pieces)},${f.i}${f.compact ? "c" : ""}/${below}`;
  }
}

/** Room for plain text: any text of at most `room` characters, each of a kind in `kinds` (char-kinds.ts). */
export interface PlainTextRoom {
  readonly room: number;
  readonly kinds: number;
}

/**
 * Plain texts (no quote, backslash or control character) that are accepted from `state` whatever
 * they hold, one entry per configuration inside a string, raw text (no `<` then), a `regex`
 * grammar's expression or a grammar's repeated character class: as long as its `maxLength` leaves room for
 * (minus what its patterns still need), and of the kinds of character that lead each pattern back to
 * where it is (every kind once a pattern has matched for good), or that a counted run still takes
 * (looked at up to `cap` characters). The token trie then takes whole subtrees of plain texts that
 * fit, without stepping through them.
 */
export function grammarPlainTextRooms(state: GrammarState, cap = RUN_CAP): PlainTextRoom[] {
  const out: PlainTextRoom[] = [];
  for (const c of state) {
    const f = c.top;
    if (f !== null && f.k === "re") {
      // A whole-output expression: unbounded, so only the kinds that lead it back to where it is count.
      // A whole-output expression has no length bound: the runs of characters it reads whatever they hold.
      for (const r of patternRooms([f.re], [f.rs], ALL_KINDS, cap)) out.push({ room: r.depth, kinds: r.kinds });
      continue;
    }
    if (f !== null && f.k === "raw") {
      // Raw text takes any character but its end tag; plain text of no "other" kind (char-kinds.ts)
      // holds no `<`, so never starts the tag.
      for (const p of patternRooms(f.re, f.rs, ALL_KINDS & ~OTHER_KIND, cap)) {
        const room = Math.min(p.depth, f.max - f.n - p.need);
        if (room > 0) out.push({ room, kinds: p.kinds });
      }
      continue;
    }
    if (f !== null && f.k === "tagged") {
      // Free text: plain text with no character that starts a trigger cannot begin one, whatever it holds.
      if (f.tail === "" && f.tags.safeKinds !== 0) out.push({ room: Infinity, kinds: f.tags.safeKinds });
      continue;
    }
    if (f !== null && f.k === "cls") {
      // A character class repeated with nothing between (a grammar's `[^"\\]*`): any text of the kinds it holds whole.
      const kinds = classLoopKinds(f);
      if (kinds !== 0) out.push({ room: Infinity, kinds });
      continue;
    }
    if (f === null || f.k !== "str" || f.esc !== 0) continue;
    const seen = uniqueSeen(f.up);
    const duplicates = seen !== null && seen.length > 0;
    // An item of a uniqueItems array keeps a character of room, so that a value equal to an earlier
    // item can still grow (guardedStep checks each character it steps; this path steps none); under
    // a pattern that has not matched for good, growing is not sure: no shortcut there.
    if (duplicates && f.re.some((re, i) => !re.universal(f.rs[i]))) continue;
    for (const p of patternRooms(f.re, f.rs, ALL_KINDS, cap)) {
      const room = Math.min(p.depth, f.max - f.n - p.need - (duplicates ? 1 : 0));
      if (room > 0) out.push({ room, kinds: p.kinds });
    }
  }
  return out;
}

/**
 * The kinds of plain character (char-kinds.ts) that a class frame takes every one of, when after any
 * of them the same frame comes again: the class ends its sequence, and so does each enclosing one up
 * to a group repeated without a separator (`[^"]*`, or GBNF's `( [^"\\] | escape )*` and `char*`
 * with `char ::= [^"\\] | ...`), whose next round enters the same path again; 0 otherwise.
 */
function classLoopKinds(f: Extract<Frame, { k: "cls" }>): number {
  let seq = f.up;
  for (;;) {
    if (seq === null || seq.k !== "seq" || seq.i !== seq.pieces.length - 1) return 0;
    if (seq.group.repeat) {
      if (seq.group.sep !== "") return 0;
      break;
    }
    seq = seq.up;
  }
  let kinds = 0;
  ASCII_KINDS.forEach((chars, k) => {
    if ([...chars].every((c) => inClass(f.cls, c.codePointAt(0)!))) kinds |= 1 << k;
  });
  // Wide: every code point past ASCII (plain text holds no control character).
  const r = f.cls.ranges;
  let wideMet = false;
  for (let i = 0; i < r.length; i += 2) if (r[i + 1] >= 0x80) wideMet = true;
  const coversWide = () => {
    for (let i = 0; i < r.length; i += 2) if (r[i] <= 0x80 && r[i + 1] >= 0x10ffff) return true;
    return false;
  };
  if (f.cls.negated ? !wideMet : coversWide()) kinds |= WIDE_KIND;
  return kinds;
}

/** Longest run of plain characters looked at from a pattern's state by default (longer token texts are stepped into). */
const RUN_CAP = 64;

/**
 * Runs of plain text (char-kinds.ts kinds within `kinds`) that every pattern of a string reads
 * whatever they hold (regex-nfa.ts `runRooms`; a pattern matched for good reads any): each entry's
 * texts of at most `depth` characters keep every pattern live, and then still `need` more characters
 * at most to reach a match.
 */
function patternRooms(re: readonly CompiledRegex[], rs: readonly RegexState[], kinds: number, cap: number): RunRoom[] {
  let rooms: RunRoom[] = [{ depth: Infinity, kinds, need: 0 }];
  for (let i = 0; i < re.length && rooms.length > 0; i++) {
    if (re[i].universal(rs[i])) continue;
    const runs = re[i].runRooms(rs[i], ASCII_KINDS, cap);
    rooms = rooms.flatMap((a) => runs.map((b) => ({ depth: Math.min(a.depth, b.depth), kinds: a.kinds & b.kinds, need: Math.max(a.need, b.need) })))
      .filter((r) => r.kinds !== 0);
  }
  return rooms;
}

/** Whether `text` is plain in the sense of {@link grammarPlainTextRooms}. */
export function isPlainText(text: string): boolean {
  for (const c of text) if (c === '"' || c === "\\" || c < " ") return false;
  return true;
}
