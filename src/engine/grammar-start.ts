/**
 * The start of the output automaton (grammar.ts): each kind of {@link OutputGrammar} compiled into
 * its start configurations (a schema, a choice list, a regex, a structural tag's structures by
 * trigger, a GBNF grammar, tool calls alone or amid free text, a union of these), optionally after a
 * free prefix ({@link FreePrefix}). Compilation problems are SchemaErrors naming the bad value.
 */
import { compileSchema, literalNode, SchemaError, type SchemaNode } from "./json-schema.ts";
import { type CompiledRegex, compilePattern, RegexError } from "./regex-nfa.ts";
import type { GrammarState, Piece, SeqGroup, TagSet } from "./grammar-frames.ts";
import { ALL_KINDS, kindOf } from "./char-kinds.ts";
import { compileGbnf } from "./gbnf.ts";
import { toolCallGroup, toolCallTrigger } from "./grammar-tool-calls.ts";
import { startGroup } from "./grammar-step.ts";
import type { JsonWhitespace, OutputGrammar } from "./grammar-types.ts";

/**
 * Free text before the grammar: any text until each of `until` in turn has been written, then the
 * literal `then`, then the grammar. vLLM likewise constrains only what follows the reasoning.
 */
export interface FreePrefix {
  readonly until: readonly string[];
  readonly then: string;
  /**
   * When set, the prefix is optional and opens with this literal: the output either starts the
   * grammar at once or writes `open`, then is free until the markers (a model that opens its own
   * reasoning block, as Qwen3 does, reasons before a forced call or a schema's answer).
   */
  readonly open?: string;
}

/** The output starts inside a `<think>` block: free until `</think>`, then a blank line. */
export const AFTER_THINK: FreePrefix = { until: ["</think>"], then: "\n\n" };

/** The output may open a `<think>` block of its own first: free until `</think>`, then a blank line. */
export const MAY_THINK: FreePrefix = { open: "<think>", until: ["</think>"], then: "\n\n" };

/**
 * The automaton's start state for `g`; throws SchemaError for a schema outside the supported subset.
 * With `prefix` the output is free until the prefix's markers ({@link FreePrefix}).
 */
export function grammarStart(g: OutputGrammar, prefix?: FreePrefix): GrammarState {
  const direct = startOf(g);
  if (!prefix) return direct;
  let state = direct;
  if (prefix.then !== "") state = [{ top: { k: "lit", text: prefix.then, i: 0, up: { k: "then", state, up: null, d: 0 }, d: 0 }, ws: 0 }];
  for (const until of [...prefix.until].reverse()) {
    if (until === "") throw new SchemaError("A free prefix's marker is empty");
    state = [{ top: { k: "think", until, m: 0, up: { k: "then", state, up: null, d: 0 }, d: 0 }, ws: 0 }];
  }
  if (prefix.open === undefined) return state;
  if (prefix.open === "") throw new SchemaError("An optional free prefix's opening is empty");
  // Nondeterministic, as a union: the grammar's own start beside the opening of the free stretch.
  return [...direct, { top: { k: "lit", text: prefix.open, i: 0, up: { k: "then", state, up: null, d: 0 }, d: 0 }, ws: 0 }];
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
