/**
 * Context-free output grammars in GBNF, llama.cpp's notation (and the EBNF that vLLM's
 * `structured_outputs.grammar` and SGLang's `ebnf` take through xgrammar, in its common subset):
 * rules `name ::= expression`, with `"literals"` (escapes `\n \r \t \\ \" \xHH \uHHHH \UHHHHHHHH`),
 * character classes `[a-z0-9_]` and `[^"\\]`, `.` for any character, rule names, groups `( )`,
 * alternatives `|`, and `*`, `+`, `?`, `{m}`, `{m,}`, `{m,n}` after any of them; `#` comments. The
 * output is what the rule `root` matches.
 *
 * Compiled into the sequence groups the output automaton already steps (grammar-frames.ts `SeqGroup`):
 * a rule is one group, shared by every reference to it (so a recursive rule is a cyclic graph), a
 * character class is a piece of its own. The automaton expands alternatives eagerly up to their first
 * character, so a rule that can reach itself before reading a character (left recursion), and a
 * repetition of something that can match nothing, are refused here with a message naming them, as is
 * a reference to a rule that is not defined.
 */
import { SchemaError } from "./json-schema.ts";
import type { Piece, SeqGroup } from "./grammar-frames.ts";
import { type Expr, GbnfParser } from "./gbnf-parse.ts";

export { MAX_GBNF_ALTERNATIVES, MAX_GBNF_REPEAT } from "./gbnf-parse.ts";

/**
 * The most pieces counted repetitions may spell out in one grammar, all together: nested counts
 * multiply (`(("a"{300}){300}){1000}` is 9e7 pieces, gigabytes for a 35-byte grammar).
 */
export const MAX_GBNF_SPELLED = 2_000_000;

/** Parses `source` and compiles its `root` rule; throws SchemaError naming the first problem. */
export function compileGbnf(source: string): SeqGroup {
  const rules = new GbnfParser(source).rules();
  if (!rules.has("root")) throw new SchemaError(`The grammar has no rule named "root", which the output must match; it defines ${[...rules.keys()].map((k) => JSON.stringify(k)).join(", ") || "no rules"}`);
  checkRules(rules);
  const groups = new Map<string, { alts: Piece[][]; repeat: false; sep: ""; rule: string }>();
  let spelled = 0;
  const repeat = (e: Extract<Expr, { t: "rep" }>): Piece[] => {
    const p = pieces(e.e);
    spelled += p.length * (e.max === Infinity ? e.min + 1 : e.max);
    if (spelled > MAX_GBNF_SPELLED) {
      throw new SchemaError(`${e.at}: the grammar is too large for constrained decoding: its counted repetitions spell out more than ${MAX_GBNF_SPELLED} pieces; nest fewer counts`);
    }
    return repeated(p, e.min, e.max);
  };
  for (const name of rules.keys()) groups.set(name, { alts: [], repeat: false, sep: "", rule: name });
  const pieces = (e: Expr): Piece[] => {
    switch (e.t) {
      case "lit": return e.text === "" ? [] : [{ lit: e.text }];
      case "cls": return [{ cls: e.cls }];
      case "ref": return [{ group: groups.get(e.name)! }];
      case "seq": return e.items.flatMap(pieces);
      case "alt": return [{ group: { alts: e.alts.map(pieces), repeat: false, sep: "" } }];
      case "rep": return repeat(e);
    }
  };
  for (const [name, e] of rules) groups.get(name)!.alts.push(...(e.t === "alt" ? e.alts.map(pieces) : [pieces(e)]));
  return groups.get("root")!;
}

/** `p` at least `min` and at most `max` times (max Infinity: no bound), as plain copies and groups. */
function repeated(p: Piece[], min: number, max: number): Piece[] {
  const out: Piece[] = [];
  for (let i = 0; i < min; i++) out.push(...p);
  if (max === Infinity) {
    const more: SeqGroup = { alts: [p], repeat: true, sep: "" };
    out.push({ group: { alts: [[{ group: more }], []], repeat: false, sep: "" } });
  } else {
    // (p (p (p)?)?)?: each optional copy may only follow the one before it.
    let tail: Piece[] = [];
    for (let i = min; i < max; i++) tail = [{ group: { alts: [[...p, ...tail], []], repeat: false, sep: "" } }];
    out.push(...tail);
  }
  return out;
}

/**
 * Refuses references to undefined rules, repetitions of what can match nothing, and left recursion
 * (the automaton would expand those forever).
 */
function checkRules(rules: ReadonlyMap<string, Expr>): void {
  const nullableRules = new Set<string>();
  const nullable = (e: Expr): boolean => {
    switch (e.t) {
      case "lit": return e.text === "";
      case "cls": return false;
      case "ref": return nullableRules.has(e.name);
      case "seq": return e.items.every(nullable);
      case "alt": return e.alts.some(nullable);
      case "rep": return e.min === 0 || nullable(e.e);
    }
  };
  const walk = (e: Expr, visit: (e: Expr) => void): void => {
    visit(e);
    if (e.t === "seq") e.items.forEach((x) => walk(x, visit));
    else if (e.t === "alt") e.alts.forEach((x) => walk(x, visit));
    else if (e.t === "rep") walk(e.e, visit);
  };
  for (const e of rules.values()) {
    walk(e, (x) => {
      if (x.t === "ref" && !rules.has(x.name)) throw new SchemaError(`${x.at}: the rule ${JSON.stringify(x.name)} is not defined`);
    });
  }
  for (let grew = true; grew;) {
    grew = false;
    for (const [name, e] of rules) if (!nullableRules.has(name) && nullable(e)) nullableRules.add(name), (grew = true);
  }
  for (const e of rules.values()) {
    walk(e, (x) => {
      if (x.t === "rep" && x.max > 1 && nullable(x.e)) throw new SchemaError(`${x.at}: a repeated expression can match the empty string; make what repeats read at least one character`);
    });
  }
  // Rules reachable before any character is read.
  const leftRefs = (e: Expr, out: Set<string>): void => {
    if (e.t === "ref") out.add(e.name);
    else if (e.t === "alt") e.alts.forEach((x) => leftRefs(x, out));
    else if (e.t === "rep") leftRefs(e.e, out);
    else if (e.t === "seq") {
      for (const x of e.items) {
        leftRefs(x, out);
        if (!nullable(x)) break;
      }
    }
  };
  const left = new Map([...rules].map(([name, e]) => {
    const out = new Set<string>();
    leftRefs(e, out);
    return [name, out] as const;
  }));
  const done = new Set<string>();
  const visiting: string[] = [];
  const visit = (name: string): void => {
    const at = visiting.indexOf(name);
    if (at >= 0) throw new SchemaError(`The rule ${JSON.stringify(name)} is left-recursive (${[...visiting.slice(at), name].join(" -> ")} before reading a character); rewrite it with repetition, as item ("," item)*`);
    if (done.has(name)) return;
    visiting.push(name);
    for (const next of left.get(name)!) visit(next);
    visiting.pop();
    done.add(name);
  };
  for (const name of rules.keys()) visit(name);
}
