/**
 * Regular expressions for constrained decoding: JSON Schema's `pattern` keyword, and the `format`s the
 * decoder follows, as automata stepped one character (code point) at a time beside the grammar
 * automaton (src/engine/grammar.ts).
 *
 * An expression (parsed by src/engine/regex-parse.ts) becomes a Thompson NFA over sets of code points.
 * A state is the set of NFA states the text so far can be in, closed under empty moves and cut to the
 * states that read a character or accept and from which a match is still reachable; so a state is
 * empty exactly when no match can continue, and its key (the state numbers, sorted) names its
 * language. Transitions are computed on demand and cached per compiled expression.
 */
import { ANY_CHAR, type CharSet, contains, parseRegex, quote, RegexError, type RegexNode } from "./regex-parse.ts";

export { RegexError } from "./regex-parse.ts";

/** Most NFA states one expression may compile to (each copy a `{n,m}` makes counts). */
const MAX_STATES = 4000;
/** Transitions a compiled expression caches before it starts its cache over. */
const MAX_CACHED = 50_000;

/** A position in a compiled expression: an immutable value. Equal positions have equal `key`s. */
export interface RegexState {
  readonly key: string;
}

/** A compiled expression, stepped one character at a time. */
export interface CompiledRegex {
  readonly start: RegexState;
  /**
   * The state after one more character (one Unicode code point, as a string), or null when no match
   * can continue. A longer string steps through its code points; "" leaves the state as it is.
   */
  step(state: RegexState, ch: string): RegexState | null;
  /** True when the text read so far is a match. */
  accepts(state: RegexState): boolean;
  /**
   * The code points where one of the expression's character sets starts or stops (past a range's
   * end), sorted: between two of them every character steps alike from every state.
   */
  edges(): readonly number[];
  /** Fewest more characters that reach a match from `state` (0 when it accepts; Infinity when none can). */
  minToAccept(state: RegexState): number;
  /** True when every continuation of the text read so far is a match (a match found, the end unanchored). */
  universal(state: RegexState): boolean;
  /** The one character (code point) every continuation starts with, or null: several, or the text may end here. */
  only(state: RegexState): string | null;
  /**
   * Runs of characters the expression reads from `state` whatever they hold: entries {depth, kinds,
   * need}, where every text of at most `depth` characters (Infinity: any length), each in one of the
   * `classes` whose bit is in `kinds`, steps to a live state, and `need` is the most `minToAccept` of
   * the states such texts reach. Narrower `kinds` come with deeper runs. Up to `cap` characters are
   * looked at (a depth may be deeper than `cap` when found before). A counted run (`[^<>]{1,200}`)
   * has no self-loop but a deep run. Cached per state for the last `classes` asked.
   */
  runRooms(state: RegexState, classes: readonly string[], cap: number): readonly RunRoom[];
}

/** One entry of {@link CompiledRegex.runRooms}. */
export interface RunRoom {
  readonly depth: number;
  readonly kinds: number;
  readonly need: number;
}

/**
 * Compiles a JSON Schema `pattern` (ECMA-262 syntax, subset below) with JSON Schema's meaning: the
 * string matches when the expression matches ANYWHERE in it (unanchored), unless it starts with `^`
 * / ends with `$`.
 *
 * Followed: literals; escapes `\d \D \w \W \s \S \n \r \t \f \v \0 \cX \xHH \uHHHH \u{H...}` and
 * escaped punctuation; `.`; classes `[...]` / `[^...]` with ranges and escapes; groups `( )`,
 * `(?: )`, `(?<name> )`; `|`; quantifiers `* + ? {n} {n,} {n,m}` and their lazy forms; `^` as the
 * first and `$` as the last character. Refused with {@link RegexError}: anchors anywhere else or
 * beside a top-level `|`, backreferences, lookarounds, `\b \B`, inline flags, `\p{...}`, unknown
 * letter escapes, invalid syntax, and automata over 4000 NFA states.
 *
 * With `whole` the expression must match the whole text, anchored or not (a `regex` output grammar).
 */
export function compilePattern(source: string, whole = false): CompiledRegex {
  return new Compiled(source, whole);
}

/** One state of a compiled expression. */
class DState implements RegexState {
  constructor(
    readonly key: string,
    /** Its NFA states, ascending. */
    readonly nfa: readonly number[],
    readonly accepting: boolean,
    readonly min: number,
    readonly owner: Compiled,
  ) {
    Object.freeze(this);
  }
}

/** A Thompson NFA under construction: state q reads a character of `sets[q]` into `next[q]` and moves freely to `eps[q]`. */
class Nfa {
  readonly sets: (CharSet | null)[] = [];
  readonly next: number[] = [];
  readonly eps: number[][] = [];

  constructor(readonly source: string) {}

  add(): number {
    if (this.sets.length >= MAX_STATES) {
      throw new RegexError(`The pattern ${quote(this.source)} is too large for constrained decoding: its automaton needs over ${MAX_STATES} states (each copy "{n,m}" makes counts)`);
    }
    this.sets.push(null);
    this.next.push(-1);
    this.eps.push([]);
    return this.sets.length - 1;
  }

  /** Adds the states for `node`; returns its entry and exit. */
  build(node: RegexNode): [number, number] {
    switch (node.t) {
      case "set": {
        const a = this.add(), b = this.add();
        this.sets[a] = node.set;
        this.next[a] = b;
        return [a, b];
      }
      case "seq": {
        const first = this.add();
        let last = first;
        for (const item of node.items) last = this.#then(last, item);
        return [first, last];
      }
      case "alt": {
        const a = this.add(), b = this.add();
        for (const o of node.options) this.eps[this.#then(a, o)].push(b);
        return [a, b];
      }
      case "rep": {
        const a = this.add();
        let last = a;
        for (let k = 0; k < node.min; k++) last = this.#then(last, node.node);
        if (node.max === Infinity) {
          const loop = this.add();
          this.eps[last].push(loop);
          this.eps[this.#then(loop, node.node)].push(loop);
          return [a, loop];
        }
        const b = this.add();
        for (let k = node.min; k < node.max; k++) {
          this.eps[last].push(b);
          last = this.#then(last, node.node);
        }
        this.eps[last].push(b);
        return [a, b];
      }
    }
  }

  /** Builds `node` after state `from`; returns its exit. */
  #then(from: number, node: RegexNode): number {
    const [entry, exit] = this.build(node);
    this.eps[from].push(entry);
    return exit;
  }
}

class Compiled implements CompiledRegex {
  readonly start: DState;
  readonly #nfa: Nfa;
  readonly #accept: number;
  /** Unanchored at the end: once the accepting state is reached, every continuation matches. */
  readonly #acceptsAll: boolean;
  /** Fewest characters from each NFA state to acceptance. */
  readonly #dist: number[];
  /** The NFA states a DState keeps: those that read a character or accept, with a match reachable. */
  readonly #keep: Uint8Array;
  readonly #mark: Uint32Array;
  #stamp = 0;
  readonly #cache = new Map<string, { readonly state: DState; readonly next: Map<string, DState | null>; runs?: { classes: readonly string[]; cap: number; rooms: readonly RunRoom[] } }>();
  #cached = 0;

  constructor(readonly source: string, whole: boolean) {
    const p = parseRegex(source);
    const parsed = whole ? { ...p, anchorStart: true, anchorEnd: true } : p;
    const nfa = (this.#nfa = new Nfa(source));
    const start = nfa.add();
    if (!parsed.anchorStart) [nfa.sets[start], nfa.next[start]] = [ANY_CHAR, start];
    const accept = (this.#accept = nfa.add());
    const [entry, exit] = nfa.build(parsed.body);
    nfa.eps[start].push(entry);
    nfa.eps[exit].push(accept);
    this.#acceptsAll = !parsed.anchorEnd;
    if (this.#acceptsAll) [nfa.sets[accept], nfa.next[accept]] = [ANY_CHAR, accept];
    this.#dist = distances(nfa, accept);
    const n = nfa.sets.length;
    this.#keep = new Uint8Array(n);
    for (let q = 0; q < n; q++) {
      const s = nfa.sets[q];
      this.#keep[q] = this.#dist[q] < Infinity && (q === accept || (s !== null && s.length > 0)) ? 1 : 0;
    }
    this.#mark = new Uint32Array(n);
    this.start = this.#close([start]);
  }

  #edges: readonly number[] | undefined;
  edges(): readonly number[] {
    if (this.#edges === undefined) {
      const at = new Set<number>();
      for (const set of this.#nfa.sets) for (let k = 0; set !== null && k < set.length; k += 2) at.add(set[k]).add(set[k + 1] + 1);
      this.#edges = [...at].sort((a, b) => a - b);
    }
    return this.#edges;
  }

  step(state: RegexState, ch: string): RegexState | null {
    const from = this.#resolve(state);
    const entry = this.#entry(from);
    let to = entry.next.get(ch);
    if (to === undefined) {
      to = this.#advance(from, ch);
      if (++this.#cached > MAX_CACHED) {
        this.#cache.clear();
        this.#cached = 0;
      }
      entry.next.set(ch, to);
    }
    return to;
  }

  only(state: RegexState): string | null {
    const from = this.#resolve(state);
    if (from.accepting) return null;
    let cp = -1;
    for (const q of from.nfa) {
      const set = this.#nfa.sets[q];
      if (set === null) continue;
      if (set.length !== 2 || set[0] !== set[1] || (cp >= 0 && set[0] !== cp)) return null;
      cp = set[0];
    }
    return cp < 0 ? null : String.fromCodePoint(cp);
  }

  runRooms(state: RegexState, classes: readonly string[], cap: number): readonly RunRoom[] {
    const from = this.#resolve(state);
    const cached = this.#entry(from).runs;
    // Runs found looking further hold as well.
    if (cached?.classes === classes && cached.cap >= cap) return cached.rooms;
    const rooms: RunRoom[] = [];
    const every = classes.length >= 31 ? 0 : (1 << classes.length) - 1;
    // The widest set first, narrowed by the classes that end its runs; then each class alone, where
    // it runs deeper than the sets holding it (a word's letters, after which a space may not come twice).
    for (let kinds = every; kinds !== 0;) {
      const run = this.#run(from, classes, kinds, cap);
      if (run.depth > 0) rooms.push({ depth: run.depth, kinds, need: run.need });
      if (run.killed === 0) break;
      kinds &= ~run.killed;
    }
    for (let i = 0; i < classes.length && i < 31; i++) {
      const best = Math.max(0, ...rooms.filter((r) => (r.kinds & (1 << i)) !== 0).map((r) => r.depth));
      if (best === Infinity) continue;
      const run = this.#run(from, classes, 1 << i, cap);
      if (run.depth > best) rooms.push({ depth: run.depth, kinds: 1 << i, need: run.need });
    }
    // step() may have started its cache over: keep the answer on the entry that holds it now.
    this.#entry(from).runs = { classes, cap, rooms };
    return rooms;
  }

  /**
   * How deep texts of the classes in `kinds` run from `from` staying live (up to `cap`; Infinity once
   * they reach no new state), the most `min` on the way, and the classes whose characters end them.
   */
  #run(from: DState, classes: readonly string[], kinds: number, cap: number): { depth: number; need: number; killed: number } {
    // Breadth-first, level by level; every state seen has each character stepped, so once a level
    // adds no new state, any length stays live.
    const seen = new Set<string>([from.key]);
    let frontier: DState[] = [from], depth = 0, need = from.min, killed = 0;
    while (depth < cap) {
      const next: DState[] = [];
      for (const st of frontier) {
        classes.forEach((chars, i) => {
          if ((kinds & (1 << i)) === 0 || (killed & (1 << i)) !== 0) return;
          for (const c of chars) {
            const to = this.step(st, c) as DState | null;
            if (to === null) return void (killed |= 1 << i);
            if (!seen.has(to.key)) {
              seen.add(to.key);
              next.push(to);
              need = Math.max(need, to.min);
            }
          }
        });
      }
      if (killed !== 0) break;
      depth++;
      if (next.length === 0) return { depth: Infinity, need, killed: 0 };
      frontier = next;
    }
    return { depth, need, killed };
  }

  #entry(from: DState) {
    let entry = this.#cache.get(from.key);
    if (entry === undefined) this.#cache.set(from.key, (entry = { state: from, next: new Map() }));
    return entry;
  }

  accepts(state: RegexState): boolean {
    return this.#resolve(state).accepting;
  }

  minToAccept(state: RegexState): number {
    return this.#resolve(state).min;
  }

  universal(state: RegexState): boolean {
    // The accepting NFA state reads every character back into itself when the end is unanchored.
    return this.#acceptsAll && this.#resolve(state).accepting;
  }

  #advance(from: DState, ch: string): DState | null {
    let cur = from;
    for (const c of ch) {
      const cp = c.codePointAt(0)!;
      const seeds: number[] = [];
      for (const q of cur.nfa) {
        const s = this.#nfa.sets[q];
        if (s !== null && contains(s, cp)) seeds.push(this.#nfa.next[q]);
      }
      cur = this.#close(seeds);
      if (cur.nfa.length === 0) return null;
    }
    return cur;
  }

  /** The state of `seeds` and all they reach by empty moves. */
  #close(seeds: readonly number[]): DState {
    if (this.#stamp === 0xffffffff) {
      this.#mark.fill(0);
      this.#stamp = 0;
    }
    const stamp = ++this.#stamp;
    const stack: number[] = [];
    for (const q of seeds) {
      if (this.#mark[q] !== stamp) {
        this.#mark[q] = stamp;
        stack.push(q);
      }
    }
    let out: number[] = [];
    while (stack.length > 0) {
      const q = stack.pop()!;
      if (this.#keep[q] === 1) out.push(q);
      for (const e of this.#nfa.eps[q]) {
        if (this.#mark[e] !== stamp) {
          this.#mark[e] = stamp;
          stack.push(e);
        }
      }
    }
    // Past a match of an expression unanchored at the end, any text matches: one state for all of it.
    if (this.#acceptsAll && this.#mark[this.#accept] === stamp) out = [this.#accept];
    out.sort((a, b) => a - b);
    return this.#state(out);
  }

  #state(nfa: readonly number[]): DState {
    const key = nfa.join(",");
    const hit = this.#cache.get(key);
    if (hit !== undefined) return hit.state;
    let min = Infinity;
    for (const q of nfa) min = Math.min(min, this.#dist[q]);
    return new DState(key, nfa, min === 0, min, this);
  }

  /** `state`, which must be one this expression made. */
  #resolve(state: RegexState): DState {
    if (state instanceof DState && state.owner === this) return state;
    throw new RangeError(`The state ${JSON.stringify(state.key)} is not a state of the pattern ${quote(this.source)}`);
  }

}

/** Fewest characters from each NFA state to `accept` (a breadth-first search backwards; empty moves cost 0). */
function distances(nfa: Nfa, accept: number): number[] {
  const n = nfa.sets.length;
  const backEps: number[][] = Array.from({ length: n }, () => []);
  const backRead: number[][] = Array.from({ length: n }, () => []);
  for (let q = 0; q < n; q++) {
    for (const e of nfa.eps[q]) backEps[e].push(q);
    const s = nfa.sets[q];
    if (s !== null && s.length > 0) backRead[nfa.next[q]].push(q);
  }
  const dist = new Array<number>(n).fill(Infinity);
  dist[accept] = 0;
  let layer = [accept];
  for (let d = 0; layer.length > 0; d++) {
    for (let k = 0; k < layer.length; k++) {
      for (const q of backEps[layer[k]]) {
        if (dist[q] === Infinity) {
          dist[q] = d;
          layer.push(q);
        }
      }
    }
    const next: number[] = [];
    for (const v of layer) {
      for (const q of backRead[v]) {
        if (dist[q] === Infinity) {
          dist[q] = d + 1;
          next.push(q);
        }
      }
    }
    layer = next;
  }
  return dist;
}

// Days per month, and 29 February only in leap years (divisible by 4 and not by 100, or by 400).
const MONTH_DAY = "(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-8])";
const LEAP_YEAR = "[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:[02468][048]|[13579][26])00";
const DATE = `(?:[0-9]{4}-(?:${MONTH_DAY})|(?:${LEAP_YEAR})-02-29)`;
const TIME = "(?:[01][0-9]|2[0-3]):[0-5][0-9]:(?:[0-5][0-9]|60)(?:\\.[0-9]+)?(?:[Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])";
const LABEL = "[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?";
const HOST = `${LABEL}(?:\\.${LABEL})*`;
const OCTET = "(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])";
const HEX = "[0-9A-Fa-f]";
/** A UUID of RFC 4122's variant and version `v` (pydantic's `uuid1`…`uuid5` formats). */
const uuidOf = (v: number) => `^${HEX}{8}-${HEX}{4}-${v}${HEX}{3}-[89ABab]${HEX}{3}-${HEX}{12}$`;
// RFC 3339 appendix A durations: P, then a date part (years, months, days in order, each optional
// after the first given) with an optional time part, a time part alone, or weeks alone.
const DUR_TIME = "T(?:[0-9]+H(?:[0-9]+M(?:[0-9]+S)?)?|[0-9]+M(?:[0-9]+S)?|[0-9]+S)";
const DUR_DATE = "(?:[0-9]+D|[0-9]+M(?:[0-9]+D)?|[0-9]+Y(?:[0-9]+M(?:[0-9]+D)?)?)";
// RFC 4291 section 2.2's hexadecimal forms: eight groups, or fewer around one "::" (the forms with a
// dotted IPv4 tail are left out: what is written is still an address).
const H4 = `${HEX}{1,4}`;
const IPV6 = [
  `(?:${H4}:){7}${H4}`, `(?:${H4}:){1,7}:`, `(?:${H4}:){1,6}:${H4}`, `(?:${H4}:){1,5}(?::${H4}){1,2}`, `(?:${H4}:){1,4}(?::${H4}){1,3}`,
  `(?:${H4}:){1,3}(?::${H4}){1,4}`, `(?:${H4}:){1,2}(?::${H4}){1,5}`, `${H4}:(?::${H4}){1,6}`, `:(?:(?::${H4}){1,7}|:)`,
].join("|");
const FORMAT_PATTERNS: ReadonlyMap<string, string> = new Map([
  ["date", `^${DATE}$`],
  ["time", `^${TIME}$`],
  ["date-time", `^${DATE}[Tt]${TIME}$`],
  ["email", `^[A-Za-z0-9!#$%&'*+/=?^_\`{|}~.-]+@${HOST}$`],
  ["uuid", `^${HEX}{8}-${HEX}{4}-${HEX}{4}-${HEX}{4}-${HEX}{12}$`],
  ...[1, 3, 4, 5].map((v): [string, string] => [`uuid${v}`, uuidOf(v)]),
  ["duration", `^P(?:${DUR_DATE}(?:${DUR_TIME})?|${DUR_TIME}|[0-9]+W)$`],
  ["ipv6", `^(?:${IPV6})$`],
  ["ipv4", `^${OCTET}(?:\\.${OCTET}){3}$`],
  ["hostname", `^${HOST}$`],
  // A scheme, then no whitespace, control character, or one of "<>\^`{|}.
  ["uri", '^[A-Za-z][A-Za-z0-9+.-]*:[^\\s\\x00-\\x1F\\x7F"<>\\\\^`{|}]*$'],
]);

/**
 * The pattern source for a JSON Schema `format` this decoder follows, or undefined for any other
 * name. Each is anchored and checks what a regular expression checks cheaply: `date` knows the days
 * of each month and leap years; `hostname` leaves the total length (at most 253) to json-schema.ts,
 * which caps the string's `maxLength`.
 */
export function formatPattern(format: string): string | undefined {
  return FORMAT_PATTERNS.get(format);
}

/** The names formatPattern knows, for error messages. */
export const FORMATS: readonly string[] = Object.freeze([...FORMAT_PATTERNS.keys()]);
