/**
 * Output grammars for constrained decoding: one JSON value following a schema (`response_format`
 * json_object and json_schema), tool calls in the Hermes format whose arguments follow each
 * function's parameters (`tool_choice` "required" or naming a function), one of a list of choices,
 * text a regular expression matches, text a context-free grammar (GBNF, gbnf.ts) matches, or what
 * one of several of these matches (a union). A character-level automaton decides which characters may
 * come next; src/engine/output-constraint.ts turns that into token masks.
 *
 * The automaton is nondeterministic (`anyOf`, enums and type lists branch), so a state is a list of
 * configurations. Each configuration is an immutable stack of frames that share their tails, so
 * testing a character never disturbs the request's state and costs one small object.
 */
import { ANY, ANY_OBJECT, compileSchema, type JsonSchema, literalNode, resolve, SchemaError, type SchemaNode } from "./json-schema.ts";
import { stepLiterals } from "./grammar-literals.ts";
import { canReach, type NumberRange } from "./number-bounds.ts";
import { type CompiledRegex, compilePattern, RegexError } from "./regex-nfa.ts";
import { literalKey, numberKey } from "./value-key.ts";
import {
  type ArrayNode, type ArrFrame, type Config, type Frame, type GrammarState, inClass, type ObjFrame, type Piece, type SeqFrame, type SeqGroup, type TagSet, uniqueSeen,
} from "./grammar-frames.ts";
import { ALL_KINDS, kindOf } from "./char-kinds.ts";
import { grammarStateKey, ObjectIds } from "./grammar-key.ts";
import { compileGbnf } from "./gbnf.ts";
import { numberMayEnd, numberStep } from "./grammar-number.ts";
import { keepDistinct } from "./grammar-unique.ts";
import { toolCallGroup, toolCallTrigger } from "./grammar-tool-calls.ts";
import { stepRaw, stepString } from "./grammar-strings.ts";

export type { Config, GrammarState } from "./grammar-frames.ts";
export { grammarPlainTextRooms, grammarStateKey, isPlainText, ObjectIds, type PlainTextRoom } from "./grammar-key.ts";

/** What a request's output must be; plain data, so it travels to cluster workers. */
export type OutputGrammar =
  /** One JSON value following `schema` (`{"type": "object"}` for json_object). */
  | { kind: "json"; schema: JsonSchema; whitespace?: JsonWhitespace }
  /**
   * One or more (`parallel`) calls, each naming one of `tools` with arguments following its parameters
   * (any object when absent), in `format` (default "hermes").
   */
  | {
    kind: "tool_calls"; tools: readonly { name: string; parameters?: JsonSchema }[]; parallel: boolean; whitespace?: JsonWhitespace; format?: ToolCallSyntax;
    /**
     * Free text, in which the format's opening (grammar-tool-calls.ts `toolCallTrigger`) starts calls
     * that must then be whole, then free text again (tool_choice allowed_tools in "auto" mode).
     * Absent: the output is the calls alone.
     */
    amidText?: boolean;
  }
  /** Exactly one of `choices` (vLLM's `choice`), each non-empty. */
  | { kind: "choice"; choices: readonly string[] }
  /**
   * Text that `pattern` matches whole (vLLM's `regex`): ECMAScript syntax, the subset regex-nfa.ts
   * follows; a leading `^` and a trailing `$` may be given or left out.
   */
  | { kind: "regex"; pattern: string }
  /**
   * Text the rule `root` of a context-free grammar matches: GBNF, llama.cpp's notation (vLLM's
   * `structured_outputs.grammar`; gbnf.ts says what of it is read).
   */
  | { kind: "gbnf"; grammar: string }
  /**
   * vLLM's structural tag: free text, except that where one of `triggers` is written, one of the
   * structures whose `begin` starts with it must follow: the rest of its `begin`, a JSON value of its
   * `schema`, its `end`; then free text again (tool calls inside prose, their arguments valid).
   */
  | { kind: "structural_tag"; structures: readonly TagStructure[]; triggers: readonly string[]; whitespace?: JsonWhitespace }
  /**
   * Output that one of `options` (at least one) matches whole: the model picks the branch as it writes
   * (chat's tools beside a response_format: tool calls, or the answer's JSON).
   */
  | { kind: "union"; options: readonly OutputGrammar[] };

/** One structure of a structural tag. */
export interface TagStructure {
  begin: string;
  schema: JsonSchema;
  end: string;
}

/**
 * How a model writes tool calls. "hermes" (Qwen 2.5/3, Hermes): `<tool_call>\n{"name": ..., "arguments":
 * ...}\n</tool_call>` blocks, one per line. "llama3_json" (Llama 3.1–3.3): `{"name": ..., "parameters":
 * ...}` objects separated by `; `. "kimi_k2" (Kimi K2): `<|tool_calls_section_begin|>` then per call
 * `<|tool_call_begin|>functions.NAME:INDEX<|tool_call_argument_begin|>{...}<|tool_call_end|>`, then
 * `<|tool_calls_section_end|>`. "glm45" (GLM 4.5–4.7): `<tool_call>NAME\n` then per argument
 * `<arg_key>KEY</arg_key>\n<arg_value>VALUE</arg_value>\n` (a string value raw, others JSON), then
 * `</tool_call>`, calls separated by a newline. "deepseek_v31" (DeepSeek V3.1): `<｜tool▁calls▁begin｜>` then
 * per call `<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>`, then `<｜tool▁calls▁end｜>`.
 * "qwen3_coder" (Qwen3-Coder): `<tool_call>\n<function=NAME>\n` then per argument
 * `<parameter=KEY>\nVALUE\n</parameter>\n` (a string value raw, others JSON), then `</function>\n</tool_call>`.
 * "deepseek_v3" (DeepSeek V3, R1-0528): as "deepseek_v31", but each call is
 * `<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\n{...}\n```<｜tool▁call▁end｜>`, calls a newline apart.
 * "minimax_m2" (MiniMax M2): `<minimax:tool_call>\n` then per call `<invoke name="NAME">\n` and per
 * argument `<parameter name="KEY">VALUE</parameter>\n` (a string value raw, others JSON), then
 * `</invoke>`, calls a newline apart, then `\n</minimax:tool_call>`.
 * "mistral" (Mistral, Mixtral, Magistral, Devstral): `[TOOL_CALLS]` before each call; which way the
 * call follows depends on the tokenizer's version ({@link ToolCallSyntax}).
 * "harmony" (gpt-oss; vLLM's `openai`): a message to the function, after the prompt's
 * `<|start|>assistant`: ` to=functions.NAME<|channel|>commentary json<|message|>{...}`, then `<|call|>`
 * (an end-of-generation token, so one call per answer), optionally after an analysis message
 * `<|channel|>analysis<|message|>...<|end|><|start|>assistant`.
 * vLLM's parser names (but "harmony"); grammar-tool-calls.ts builds each.
 */
export type ToolCallFormat = (typeof TOOL_CALL_FORMATS)[number];
/** Every {@link ToolCallFormat}, for checking a name from the command line. */
export const TOOL_CALL_FORMATS = ["hermes", "llama3_json", "kimi_k2", "deepseek_v31", "deepseek_v3", "glm45", "qwen3_coder", "minimax_m2", "mistral", "harmony"] as const;
/** vLLM's names for formats we name otherwise (`--tool-call-parser openai`), accepted too. */
export const TOOL_CALL_FORMAT_ALIASES: Readonly<Record<string, ToolCallFormat>> = { openai: "harmony" };

/**
 * The way a grammar writes forced calls: a {@link ToolCallFormat}, where "mistral" is the shape of
 * tokenizers v11 and later (Mistral Small 3.1+, Magistral, Devstral: `[TOOL_CALLS]NAME[ARGS]{...}`
 * per call, an optional `[CALL_ID]ID` before `[ARGS]`), and "mistral_pre_v11" the older one (Mistral
 * 7B v0.3, Mixtral 8x22B, Mistral Large 2407–2411: `[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]`).
 * The server picks between them by whether the vocabulary has an `[ARGS]` token, as vLLM does
 * (tool-calls-mistral.ts `toolCallSyntax`); the parser reads both.
 */
export type ToolCallSyntax = ToolCallFormat | "mistral_pre_v11";

/** Whether `s` names a {@link ToolCallFormat}. */
export function isToolCallFormat(s: string): s is ToolCallFormat {
  return (TOOL_CALL_FORMATS as readonly string[]).includes(s);
}

/**
 * Where JSON output may hold whitespace. "any" (the default): wherever JSON allows it, up to
 * MAX_WHITESPACE characters in a row. "compact": exactly one space after each `:` and `,` and none
 * elsewhere, as Python's `json.dumps` writes (`{"a": 1, "b": [2, 3]}`; xgrammar's `any_whitespace`
 * off, vLLM's `disable_any_whitespace`). Models trained on such text write it anyway; the grammar then
 * forces the separators, which jump-forward decoding appends without sampling.
 */
export type JsonWhitespace = "any" | "compact";

/** Deepest nesting allowed (a model looping on "[" would otherwise nest until max_tokens). */
export const MAX_DEPTH = 32;
/** Longest whitespace run allowed between tokens of JSON (a model can loop on spaces). */
export const MAX_WHITESPACE = 2;
/** Deepest nesting of grammar rules (gbnf.ts), references that end their sequence not counted. */
export const MAX_RULE_DEPTH = 256;
/** Configurations a state holds before identical ones are merged (an ambiguous grammar multiplies them). */
const MERGE_ABOVE = 8;

const isWs = (c: string) => c === " " || c === "\n" || c === "\t" || c === "\r";

const ANY_STRING: SchemaNode = { t: "string", min: 0, max: Infinity, patterns: [] };
const ANY_NUMBER: SchemaNode = { t: "number", integer: false, range: null };
const ANY_ARRAY: SchemaNode = { t: "array", prefix: [], items: ANY, min: 0, max: Infinity, unique: false };

/**
 * Free text before the grammar: any text until each of `until` in turn has been written, then the
 * literal `then`, then the grammar. vLLM likewise constrains only what follows the reasoning.
 */
export interface FreePrefix {
  readonly until: readonly string[];
  readonly then: string;
}

/** The output starts inside a `<think>` block: free until `</think>`, then a blank line. */
export const AFTER_THINK: FreePrefix = { until: ["</think>"], then: "\n\n" };

/**
 * The automaton's start state for `g`; throws SchemaError for a schema outside the supported subset.
 * With `prefix` the output is free until the prefix's markers ({@link FreePrefix}).
 */
export function grammarStart(g: OutputGrammar, prefix?: FreePrefix): GrammarState {
  let state = startOf(g);
  if (!prefix) return state;
  if (prefix.then !== "") state = [{ top: { k: "lit", text: prefix.then, i: 0, up: { k: "then", state, up: null, d: 0 }, d: 0 }, ws: 0 }];
  for (const until of [...prefix.until].reverse()) {
    if (until === "") throw new SchemaError("A free prefix's marker is empty");
    state = [{ top: { k: "think", until, m: 0, up: { k: "then", state, up: null, d: 0 }, d: 0 }, ws: 0 }];
  }
  return state;
}

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

function startOf(g: OutputGrammar): GrammarState {
  // The automaton is nondeterministic: a union starts in every option's start configurations at once.
  if (g.kind === "union") {
    if (g.options.length === 0) throw new SchemaError("A union of grammars needs at least one option");
    return g.options.flatMap(startOf);
  }
  if (g.kind === "json") return [{ top: { k: "value", node: compileSchema(g.schema), ws: false, compact: g.whitespace === "compact", up: null, d: 0 }, ws: 0 }];
  if (g.kind === "choice") return [{ top: { k: "value", node: choiceNode(g.choices), ws: false, compact: true, up: null, d: 0 }, ws: 0 }];
  if (g.kind === "regex") {
    const re = wholeRegex(g.pattern);
    return [{ top: { k: "re", re, rs: re.start, up: null, d: 0 }, ws: 0 }];
  }
  if (g.kind === "structural_tag") return [{ top: { k: "tagged", tags: compileTags(g), tail: "", up: null, d: 0 }, ws: 0 }];
  if (g.kind === "gbnf") {
    const root = compileGbnf(g.grammar);
    return startGroup({ k: "seq", group: root, pieces: root.alts[0], i: 0, compact: false, up: null, d: 0 });
  }
  const group = toolCallGroup(g);
  if (g.amidText) {
    const trigger = toolCallTrigger(g.format);
    const tags = tagSet([trigger], new Map([[trigger, group]]), g.whitespace, true);
    // Parallel calls off: after the first run of calls (one call), the trigger is barred (no group follows it).
    const first = g.parallel ? tags : { ...tags, then: tagSet([trigger], new Map(), g.whitespace, true) };
    return [{ top: { k: "tagged", tags: first, tail: "", up: null, d: 0 }, ws: 0 }];
  }
  return startGroup({ k: "seq", group, pieces: group.alts[0], i: 0, compact: g.whitespace === "compact", up: null, d: 0 });
}

/** A structural tag's structures by trigger; throws SchemaError for an empty list, a structure no trigger begins, or a schema outside the subset. */
function compileTags(g: Extract<OutputGrammar, { kind: "structural_tag" }>): TagSet {
  if (g.triggers.length === 0 || g.triggers.some((t) => t === "")) throw new SchemaError("A structural tag needs at least one trigger, and no trigger may be empty");
  if (g.structures.length === 0) throw new SchemaError("A structural tag needs at least one structure");
  const after = new Map<string, SeqGroup>();
  g.structures.forEach((s, i) => {
    const trigger = g.triggers.find((t) => s.begin.startsWith(t));
    if (trigger === undefined) throw new SchemaError(`Structure ${i}'s begin ${JSON.stringify(s.begin)} starts with none of the triggers ${JSON.stringify(g.triggers)}`);
    const pieces: Piece[] = [...(s.begin.length > trigger.length ? [{ lit: s.begin.slice(trigger.length) }] : []), { node: compileSchema(s.schema) }, ...(s.end ? [{ lit: s.end }] : [])];
    const alts = [...(after.get(trigger)?.alts ?? []), pieces];
    after.set(trigger, { alts, repeat: false, sep: "" });
  });
  // A trigger that no structure begins may not be written at all: no group follows it.
  return tagSet(g.triggers, after, g.whitespace, false);
}

/** Free text with `triggers`, each going on into its group in `after` (`replay`: the group begins with the trigger). */
function tagSet(triggers: readonly string[], after: ReadonlyMap<string, SeqGroup>, whitespace: JsonWhitespace | undefined, replay: boolean): TagSet {
  let safeKinds = ALL_KINDS;
  for (const t of triggers) safeKinds &= ~kindOf(String.fromCodePoint(t.codePointAt(0)!));
  return { triggers, after, compact: whitespace === "compact", safeKinds, ...(replay ? { replay } : {}) };
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

/** The literal node of a `choice` grammar; throws SchemaError for an empty list or an empty choice. */
function choiceNode(choices: readonly string[]): SchemaNode {
  if (choices.length === 0) throw new SchemaError("The choice list is empty: give at least one choice");
  const empty = choices.indexOf("");
  if (empty >= 0) throw new SchemaError(`Choice ${empty} is the empty string; every choice needs at least one character`);
  return literalNode([...choices]);
}

/** `pattern` compiled to match the whole output; throws SchemaError where regex-nfa.ts refuses it. */
function wholeRegex(pattern: string): CompiledRegex {
  try {
    return compilePattern(pattern, true);
  } catch (e) {
    if (e instanceof RegexError) throw new SchemaError(e.message);
    throw e;
  }
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
function guardedStep(cfg: Config, c: string): Config[] {
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
function startGroup(seq: SeqFrame): Config[] {
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
function complete(up: Frame | null, key?: string): Config[] {
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
      if (f.compact && f.ws) return oneSpace(cfg, c) ?? start(f.node, f.up, f.d, c, true);
      if (isWs(c)) return f.ws ? oneMoreSpace(cfg, f) : [];
      return start(f.node, f.up, f.d, c, f.compact);
    case "obj":
      if (f.compact) {
        if (f.phase === "next") return oneSpace(cfg, c) ?? stepObject(f, c);
        return isWs(c) ? [] : stepObject(f, c);
      }
      if (isWs(c)) return oneMoreSpace(cfg, f);
      return stepObject(f, c);
    case "arr": {
      if (isWs(c)) return f.compact ? [] : oneMoreSpace(cfg, f);
      const n = f.node;
      if (c === "]") return (f.phase === "first" || f.phase === "after") && f.count >= n.min ? complete(f.up) : [];
      if (f.phase === "after") {
        return c === "," && f.count < n.max ? [{ top: { k: "value", node: itemAt(n, f.count), ws: true, compact: f.compact, up: { ...f, phase: "value" }, d: f.d }, ws: 0 }] : [];
      }
      return n.max > 0 ? start(itemAt(n, 0), { ...f, phase: "value" }, f.d, c, f.compact) : [];
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

/** The configurations that start a value of `node` at character `c`, below `up` (`compact`: its whitespace rule). */
function start(node: SchemaNode, up: Frame | null, d: number, c: string, compact: boolean): Config[] {
  const n = resolve(node);
  switch (n.t) {
    case "anyOf": return n.options.flatMap((o) => start(o, up, d, c, compact));
    case "literal": {
      // In a uniqueItems array an enum value already written cannot start again.
      const seen = uniqueSeen(up);
      if (seen === null && n.sorted) return stepLiterals({ k: "lits", texts: n.sorted, lo: 0, hi: n.sorted.length, i: 0, up, d }, c, complete);
      return n.texts.flatMap((t) => {
        if (!t.startsWith(c) || (seen !== null && seen.includes(literalKey(t)))) return [];
        return t.length === c.length ? complete(up, seen === null ? undefined : literalKey(t)) : [{ top: { k: "lit", text: t, i: c.length, up, d }, ws: 0 }];
      });
    }
    case "object":
      return c === "{" && fitsDepth(n, d) ? [{ top: { k: "obj", node: n, seen: [], phase: "first", key: "", compact, up, d: d + 1 }, ws: 0 }] : [];
    case "array":
      return c === "[" && fitsDepth(n, d) ? [{ top: { k: "arr", node: n, count: 0, phase: "first", seen: n.unique ? [] : null, compact, up, d: d + 1 }, ws: 0 }] : [];
    // compileSchema has checked that each pattern can end within maxLength.
    case "string": {
      if (c !== '"') return [];
      const v = uniqueSeen(up) === null ? null : "";
      return [{ top: { k: "str", min: n.min, max: n.max, n: 0, esc: 0, hex: 0, re: n.patterns, rs: n.patterns.map((r) => r.start), v, up, d }, ws: 0 }];
    }
    case "number": {
      const ns = numberStep(null, c, n.integer, n.range === null);
      if (ns === null || (n.range !== null && !canReach(c, n.integer, n.range))) return [];
      return [{ top: { k: "num", integer: n.integer, range: n.range, text: keepsText(n.range, up) ? c : "", ns, up, d }, ws: 0 }];
    }
    case "any": {
      if (c === "{") return start(ANY_OBJECT, up, d, c, compact);
      if (c === "[") return start(ANY_ARRAY, up, d, c, compact);
      if (c === '"') return start(ANY_STRING, up, d, c, compact);
      if (c === "t" || c === "f" || c === "n") return start({ t: "literal", texts: ["true", "false", "null"] }, up, d, c, compact);
      return start(ANY_NUMBER, up, d, c, compact);
    }
  }
}

/**
 * Whether an object or array of `n` may start below depth `d`: its values need `n.need` levels
 * (compileSchema's count of the fewest), which must fit under MAX_DEPTH, or the model would start a
 * value it cannot end.
 */
export function fitsDepth(n: { readonly need?: number }, d: number): boolean {
  return d + (n.need ?? 1) <= MAX_DEPTH;
}

/** The schema of item `i` of an array (`max` keeps `i` inside the tuple when no other items may follow). */
function itemAt(n: ArrayNode, i: number): SchemaNode {
  return i < n.prefix.length ? n.prefix[i] : n.items!;
}

/**
 * The array's item count after one more, counted only as far as its schema needs: without a maximum,
 * past its minimum and its tuple every count is alike, so the state (and the mask cache keyed by it)
 * stays the same along a long list.
 */
function countItem(f: ArrFrame): number {
  const n = f.node;
  return n.max === Infinity ? Math.min(f.count + 1, Math.max(n.min, n.prefix.length)) : f.count + 1;
}

/** Whether a number below `up` keeps the text it writes: under bounds, or as a unique item. */
function keepsText(range: NumberRange | null, up: Frame | null): boolean {
  return range !== null || uniqueSeen(up) !== null;
}

function stepKey(f: Extract<Frame, { k: "key" }>, c: string): Config[] {
  const obj = f.up;
  if (c === '"') {
    if (obj.seen.includes(f.text) || (!obj.node.props.has(f.text) && obj.node.extra === null)) return [];
    return [{ top: { ...obj, phase: "colon", key: f.text }, ws: 0 }];
  }
  // Keys are written without escapes (json-schema.ts refuses property names that would need them).
  if (c === "\\" || c < " ") return [];
  const text = f.text + c;
  if (obj.node.extra !== null) return [{ top: { ...f, text }, ws: 0 }];
  for (const k of obj.node.props.keys()) if (k.startsWith(text) && !obj.seen.includes(k)) return [{ top: { ...f, text }, ws: 0 }];
  return [];
}

function stepObject(f: ObjFrame, c: string): Config[] {
  const n = f.node;
  const keysLeft = n.extra !== null || f.seen.length < n.props.size;
  const requiredMet = () => [...n.required].every((k) => f.seen.includes(k));
  switch (f.phase) {
    case "first": case "next":
      if (c === '"' && keysLeft) return [{ top: { k: "key", text: "", up: { ...f, phase: "key" }, d: f.d }, ws: 0 }];
      return c === "}" && f.phase === "first" && requiredMet() ? complete(f.up) : [];
    case "colon": {
      if (c !== ":") return [];
      const node = n.props.get(f.key) ?? n.extra ?? ANY;
      return [{ top: { k: "value", node, ws: true, compact: f.compact, up: { ...f, phase: "value", seen: [...f.seen, f.key] }, d: f.d }, ws: 0 }];
    }
    case "after":
      if (c === ",") return keysLeft ? [{ top: { ...f, phase: "next" }, ws: 0 }] : [];
      return c === "}" && requiredMet() ? complete(f.up) : [];
  }
  return [];
}
