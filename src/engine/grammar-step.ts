/**
 * The output automaton's steps (grammar.ts): a state after one more code point, whether it may end,
 * and how a configuration goes on once the construct on top of it has ended (`complete`): the next
 * piece of a sequence, another round of a repeated group, the parent object or array, free text again.
 * Configurations with equal continuations are merged once a state holds many (an ambiguous grammar).
 */
import { literalKey, numberKey } from "./value-key.ts";
import { type Config, type Frame, type GrammarState, inClass, type SeqFrame, uniqueSeen } from "./grammar-frames.ts";
import { canReach } from "./number-bounds.ts";
import { stepLiterals } from "./grammar-literals.ts";
import { startIndexed } from "./grammar-pick.ts";
import { grammarStateKey, ObjectIds } from "./grammar-key.ts";
import { numberMayEnd, numberStep } from "./grammar-number.ts";
import { keepDistinct } from "./grammar-unique.ts";
import { stepRaw, stepString } from "./grammar-strings.ts";
import { MAX_RULE_DEPTH, MAX_WHITESPACE } from "./grammar-types.ts";
import { countItem, itemAt, keepsText, startValue, stepKey, stepObject } from "./grammar-values.ts";

/** Configurations a state holds before identical ones are merged (an ambiguous grammar multiplies them). */
const MERGE_ABOVE = 8;

const isWs = (c: string) => c === " " || c === "\n" || c === "\t" || c === "\r";

/**
 * How much of `marker` the text ends with after `c` follows `m` matched characters: the longest
 * prefix of the marker that is a suffix of marker[0, m) + c (a marker may repeat its own start,
 * as `<|channel|>final<|` does).
 */
function markerMatch(marker: string, m: number, c: string): number {
  if (c === marker[m]) return m + 1;
  const seen = marker.slice(0, m) + c;
  for (let k = m; k > 0; k--) if (seen.endsWith(marker.slice(0, k))) return k;
  return 0;
}

/** The free-text configuration after `c` (a trigger completed: what must follow it). */
function stepTagged(f: Extract<Frame, { k: "tagged" }>, c: string): Config[] {
  const text = f.tail + c;
  const hit = f.tags.triggers.find((t) => text.endsWith(t));
  if (hit !== undefined) {
    const group = f.tags.after.get(hit);
    if (group === undefined) return [];
    let cfgs = startGroup({ k: "seq", group, pieces: group.alts[0], i: 0, compact: f.tags.compact, up: { ...f, tail: "" }, d: f.d });
    if (f.tags.replay) for (const ch of hit) cfgs = cfgs.flatMap((cfg) => guardedStep(cfg, ch));
    return cfgs;
  }
  // Keep the longest end of the text that begins a trigger.
  for (let k = Math.min(text.length, Math.max(...f.tags.triggers.map((t) => t.length)) - 1); k > 0; k--) {
    const end = text.slice(text.length - k);
    if (f.tags.triggers.some((t) => t.startsWith(end))) return [{ top: { ...f, tail: end }, ws: 0 }];
  }
  return [{ top: f.tail === "" ? f : { ...f, tail: "" }, ws: 0 }];
}

/** The state after character `c`. */
export function grammarStep(state: GrammarState, c: string): GrammarState {
  const next = state.length === 1 ? guardedStep(state[0], c) : state.flatMap((cfg) => guardedStep(cfg, c));
  return next.length > MERGE_ABOVE ? distinct(next) : next;
}

/** `state` without configurations equal to an earlier one (by grammarStateKey: same continuations). */
function distinct(state: Config[]): Config[] {
  const ids = new ObjectIds();
  const seen = new Set<string>();
  return state.filter((cfg) => {
    const key = grammarStateKey([cfg], ids);
    if (seen.has(key)) return false;
    seen.add(key);
    return true;
  });
}

/** {@link step}, then the `uniqueItems` guard (grammar-unique.ts). */
export function guardedStep(cfg: Config, c: string): Config[] {
  return keepDistinct(step(cfg, c), step);
}

/** The state after `text` (empty when some character of it cannot come where it does). */
export function grammarFeed(state: GrammarState, text: string): GrammarState {
  let s = state;
  for (const c of text) {
    s = grammarStep(s, c);
    if (s.length === 0) break;
  }
  return s;
}

/** Whether the output may end here (EOS allowed). */
export function grammarComplete(state: GrammarState): boolean {
  return state.some(accepting);
}

function accepting(cfg: Config): boolean {
  const f = cfg.top;
  if (f === null) return true;
  // Free text may end anywhere, a trigger's start included (it is only text until it is whole).
  if (f.k === "tagged") return true;
  if (f.k === "re") return f.re.accepts(f.rs) && complete(f.up).some(accepting);
  return f.k === "num" && numberMayEnd(f) && complete(f.up).some(accepting);
}

/** The configurations that start each alternative of `seq`'s group. */
export function startGroup(seq: SeqFrame): Config[] {
  if (seq.group.index !== undefined) return startIndexed(seq, seq.group.index);
  return seq.group.alts.flatMap((pieces) => enterPiece({ ...seq, pieces, i: 0 }));
}

/** The configurations that start piece `seq.i` (past the last piece: the sequence has ended). */
function enterPiece(seq: SeqFrame): Config[] {
  if (seq.i === seq.pieces.length) {
    if (!seq.group.repeat) return complete(seq.up);
    // Another round may follow, after its separator.
    const again = seq.group.sep === "" ? startGroup(seq) : [{ top: { k: "lit", text: seq.group.sep, i: 0, up: { ...seq, i: -1 }, d: seq.d } as Frame, ws: 0 }];
    return [...complete(seq.up), ...again];
  }
  const p = seq.pieces[seq.i];
  if ("lit" in p) return [{ top: { k: "lit", text: p.lit, i: 0, up: seq, d: seq.d }, ws: 0 }];
  if ("cls" in p) return [{ top: { k: "cls", cls: p.cls, up: seq, d: seq.d }, ws: 0 }];
  if ("node" in p) return [{ top: { k: "value", node: p.node, ws: false, compact: seq.compact, up: seq, d: seq.d }, ws: 0 }];
  if ("raw" in p) {
    const n = p.raw;
    return [{ top: { k: "raw", end: p.end, m: 0, min: n.min, max: n.max, n: 0, re: n.patterns, rs: n.patterns.map((r) => r.start), up: seq, d: seq.d }, ws: 0 }];
  }
  if (p.group.rule !== undefined) {
    // A rule referred to last in its sequence takes the sequence's place: completing it completes that.
    const tail = seq.i === seq.pieces.length - 1 && !seq.group.repeat;
    const d = tail ? seq.d : seq.d + 1;
    if (d > MAX_RULE_DEPTH) return [];
    return startGroup({ k: "seq", group: p.group, pieces: p.group.alts[0], i: 0, compact: seq.compact, up: tail ? seq.up : seq, d });
  }
  return startGroup({ k: "seq", group: p.group, pieces: p.group.alts[0], i: 0, compact: seq.compact, up: seq, d: seq.d });
}

/**
 * The configurations once the child of `up` has ended; `key`: the child's value's key (value-key.ts),
 * when `up` is a `uniqueItems` array (the child is then a string, number or enum value).
 */
export function complete(up: Frame | null, key?: string): Config[] {
  if (up === null) return [{ top: null, ws: 0 }];
  switch (up.k) {
    case "obj": return [{ top: { ...up, phase: "after" }, ws: 0 }];
    case "arr": {
      if (up.seen === null) return [{ top: { ...up, count: countItem(up), phase: "after" }, ws: 0 }];
      if (key === undefined || up.seen.includes(key)) return [];
      return [{ top: { ...up, count: countItem(up), phase: "after", seen: [...up.seen, key] }, ws: 0 }];
    }
    // After a separator the group starts again; else the sequence goes on to its next piece.
    case "seq": return up.i === -1 ? startGroup(up) : enterPiece({ ...up, i: up.i + 1 });
    case "then": return [...up.state];
    case "tagged": return [{ top: up.tags.then ? { ...up, tags: up.tags.then } : up, ws: 0 }];
  }
  return [];
}

/** `cfg` after one more whitespace character where frame `f` (its top) allows it: none past MAX_WHITESPACE. */
function oneMoreSpace(cfg: Config, f: Frame): Config[] {
  return cfg.ws < MAX_WHITESPACE ? [{ top: f, ws: cfg.ws + 1 }] : [];
}

function step(cfg: Config, c: string): Config[] {
  const f = cfg.top;
  if (f === null) return [];
  switch (f.k) {
    case "lit": {
      // `c` is one code point: two UTF-16 units of the text when outside the Basic Multilingual Plane.
      if (!f.text.startsWith(c, f.i)) return [];
      const i = f.i + c.length;
      return i === f.text.length ? complete(f.up, uniqueSeen(f.up) === null ? undefined : literalKey(f.text)) : [{ top: { ...f, i }, ws: 0 }];
    }
    case "lits": return stepLiterals(f, c, complete);
    case "str": return stepString(f, c, complete);
    case "cls": return inClass(f.cls, c.codePointAt(0)!) ? complete(f.up) : [];
    case "tagged": return stepTagged(f, c);
    // Where raw text may end, `c` may start what follows it.
    case "raw": return stepRaw(f, c, () => complete(f.up).flatMap((x) => step(x, c)));
    case "num": {
      const next = numberStep(f.ns, c, f.integer, f.range === null);
      if (next !== null && (f.range === null || canReach(f.text + c, f.integer, f.range))) {
        return [{ top: { ...f, ns: next, text: keepsText(f.range, f.up) ? f.text + c : "" }, ws: 0 }];
      }
      // The number ends here; `c` belongs to what follows it.
      return numberMayEnd(f) ? complete(f.up, uniqueSeen(f.up) === null ? undefined : numberKey(f.text)).flatMap((x) => step(x, c)) : [];
    }
    case "key": return stepKey(f, c);
    case "think": {
      const m = markerMatch(f.until, f.m, c);
      return m === f.until.length ? complete(f.up) : [{ top: { ...f, m }, ws: 0 }];
    }
    case "re": {
      const rs = f.re.step(f.rs, c);
      return rs === null ? [] : [{ top: { ...f, rs }, ws: 0 }];
    }
    case "value":
      if (f.compact && f.ws) return oneSpace(cfg, c) ?? startValue(f.node, f.up, f.d, c, true, complete);
      if (isWs(c)) return f.ws ? oneMoreSpace(cfg, f) : [];
      return startValue(f.node, f.up, f.d, c, f.compact, complete);
    case "obj":
      if (f.compact) {
        if (f.phase === "next") return oneSpace(cfg, c) ?? stepObject(f, c, complete);
        return isWs(c) ? [] : stepObject(f, c, complete);
      }
      if (isWs(c)) return oneMoreSpace(cfg, f);
      return stepObject(f, c, complete);
    case "arr": {
      if (isWs(c)) return f.compact ? [] : oneMoreSpace(cfg, f);
      const n = f.node;
      if (c === "]") return (f.phase === "first" || f.phase === "after") && f.count >= n.min ? complete(f.up) : [];
      if (f.phase === "after") {
        return c === "," && f.count < n.max ? [{ top: { k: "value", node: itemAt(n, f.count), ws: true, compact: f.compact, up: { ...f, phase: "value" }, d: f.d }, ws: 0 }] : [];
      }
      return n.max > 0 ? startValue(itemAt(n, 0), { ...f, phase: "value" }, f.d, c, f.compact, complete) : [];
    }
    case "seq": case "then": return [];
  }
}

/**
 * Compact JSON where one space must come (after a `:` or `,`): the configuration after the space, a
 * refusal, or null once it has come (`c` then starts what follows). A function, not a closure in
 * `step`, which is the mask walk's hot path.
 */
function oneSpace(cfg: Config, c: string): Config[] | null {
  if (c === " " && cfg.ws === 0) return [{ top: cfg.top, ws: 1 }];
  return isWs(c) || cfg.ws === 0 ? [] : null;
}
