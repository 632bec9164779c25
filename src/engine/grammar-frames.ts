/**
 * The frames of the output-grammar automaton (src/engine/grammar.ts): one per open construct, innermost
 * on top, each pointing `up` to the one it sits in. Immutable, so configurations share their tails.
 */
import type { NumberRange } from "./number-bounds.ts";
import type { CompiledRegex, RegexState } from "./regex-nfa.ts";
import type { SchemaNode } from "./json-schema.ts";
import type { ObjectPick } from "./json-schema-node.ts";

export type ObjectNode = Extract<SchemaNode, { t: "object" }>;
export type ArrayNode = Extract<SchemaNode, { t: "array" }>;
export type ArrFrame = Extract<Frame, { k: "arr" }>;
export type StringNode = Extract<SchemaNode, { t: "string" }>;
export type SeqFrame = Extract<Frame, { k: "seq" }>;

/**
 * A piece of a sequence: literal text, one character of a class, a value following a schema, raw text
 * (a string argument in GLM's tool-call format: no quotes or escapes, ended by the literal piece that
 * follows it, which it may not hold), or a nested group of alternative sequences.
 */
export type Piece =
  | { readonly lit: string }
  | { readonly cls: CharClass }
  | { readonly node: SchemaNode }
  | { readonly raw: StringNode; readonly end: string }
  | { readonly group: SeqGroup };

/**
 * Alternative sequences, one of which comes (an empty one: nothing); with `repeat`, one or more
 * times, separated by `sep`. A repeated group has no empty alternative.
 */
export interface SeqGroup {
  readonly alts: readonly (readonly Piece[])[];
  readonly repeat: boolean;
  readonly sep: string;
  /**
   * A grammar rule's name (gbnf.ts): each reference to it nests one level deeper (MAX_RULE_DEPTH at
   * most), except a reference that ends its sequence, which takes the sequence's place (so a
   * right-recursive rule runs in constant depth). Rules may refer to themselves: the groups then
   * form a cycle.
   */
  readonly rule?: string;
  /** Every alternative begins with a literal: the alternatives by it, to step as one sorted run (grammar-pick.ts). */
  readonly index?: GroupIndex;
}

/**
 * A group's alternatives by the literal each begins with: the literals sorted without repeats, and for
 * each the alternatives it begins (a tool-call format's opening with each tool's name).
 */
export interface GroupIndex {
  readonly texts: readonly string[];
  readonly alts: readonly (readonly (readonly Piece[])[])[];
}

/**
 * One character whose code point is (or, `negated`, is not) inside one of the ranges: `ranges` holds
 * each range's first and last code point in turn.
 */
export interface CharClass {
  readonly ranges: readonly number[];
  readonly negated: boolean;
}

/**
 * A structural tag's compiled structures: for each trigger, the group of what may follow it (the
 * rest of a structure's begin, a JSON value of its schema, its end); then free text again.
 */
export interface TagSet {
  readonly triggers: readonly string[];
  readonly after: ReadonlyMap<string, SeqGroup>;
  readonly compact: boolean;
  /** Kinds of plain character (char-kinds.ts) that start no trigger: free text of them needs no stepping. */
  readonly safeKinds: number;
  /**
   * The groups begin with their trigger (tool calls amid text): a trigger written is fed through its
   * group from the group's start. Absent: each group is what follows its trigger.
   */
  readonly replay?: boolean;
  /**
   * The tags free text goes on with once a group is done: tool calls amid text with parallel calls
   * off take the same triggers there, none going on into a group, so a second call cannot start.
   * Absent: these tags again.
   */
  readonly then?: TagSet;
}

/** Whether code point `cp` is in `cls`. */
export function inClass(cls: CharClass, cp: number): boolean {
  const r = cls.ranges;
  for (let i = 0; i < r.length; i += 2) if (cp >= r[i] && cp <= r[i + 1]) return !cls.negated;
  return cls.negated;
}

/** A run of sorted literal texts sharing their first `i` UTF-16 units, any of which may still be written. */
export interface LiteralsFrame {
  readonly k: "lits";
  readonly texts: readonly string[];
  readonly lo: number;
  readonly hi: number;
  readonly i: number;
  readonly up: Frame | null;
  readonly d: number;
  /**
   * Where the texts tell alternatives apart (grammar-pick.ts), what each goes on with: a group's
   * (`up` its sequence frame), or an undecided object's options (`up` the object, its telling key's value being written).
   */
  readonly then?: GroupIndex | ObjectPick;
}

/**
 * Frames that hold JSON carry `compact`: whitespace only as one space after each `:` and `,` (grammar.ts
 * `JsonWhitespace`), else up to MAX_WHITESPACE characters wherever JSON allows it.
 */
export type Frame =
  /** ws: whitespace may come before the value (after a `:` or an array's `,`). */
  | { readonly k: "value"; readonly node: SchemaNode; readonly ws: boolean; readonly compact: boolean; readonly up: Frame | null; readonly d: number }
  | { readonly k: "lit"; readonly text: string; readonly i: number; readonly up: Frame | null; readonly d: number }
  /** One of texts[lo..hi) (sorted, each longer than i), whose first i units are written (grammar-literals.ts). */
  | LiteralsFrame
  /**
   * esc: 0 plain, -1 after a backslash, 1–4 hex digits still due in \uXXXX (hex: their value so far),
   * -2 and -3 after a high surrogate's escape (hex: its value), awaiting the `\` and `u` of its low
   * half's (whose digits then add to hex times 0x10000).
   * re: expressions the string's characters must match (its `pattern` and `format`), rs: where each is.
   * v: the value so far (escapes decoded), kept only for an item of a `uniqueItems` array (else null).
   */
  | {
    readonly k: "str"; readonly min: number; readonly max: number; readonly n: number; readonly esc: number; readonly hex: number;
    readonly re: readonly CompiledRegex[]; readonly rs: readonly RegexState[]; readonly v: string | null; readonly up: Frame | null; readonly d: number;
  }
  /**
   * range: bounds the number must end inside (null: none); text: what it has written so far, kept only
   * under bounds or as an item of a `uniqueItems` array.
   */
  | { readonly k: "num"; readonly integer: boolean; readonly range: NumberRange | null; readonly text: string; readonly ns: NumState; readonly up: Frame | null; readonly d: number }
  | { readonly k: "key"; readonly text: string; readonly up: ObjFrame; readonly d: number }
  | ObjFrame
  /** seen: the keys (value-key.ts) of the items so far when the array's items are unique, else null. */
  | {
    readonly k: "arr"; readonly node: ArrayNode; readonly count: number; readonly phase: "first" | "value" | "after"; readonly seen: readonly string[] | null;
    readonly compact: boolean; readonly up: Frame | null; readonly d: number;
  }
  /**
   * Free text in which a trigger may not be written without one of its structures following it
   * (a structural tag); tail: the end of the text so far that begins some trigger.
   */
  | { readonly k: "tagged"; readonly tags: TagSet; readonly tail: string; readonly up: null; readonly d: number }
  /** One character of a class (a grammar's `[a-z]` or `.`). */
  | { readonly k: "cls"; readonly cls: CharClass; readonly up: Frame | null; readonly d: number }
  /** Text matching a regular expression whole (the `regex` grammar); rs: where the expression is. */
  | { readonly k: "re"; readonly re: CompiledRegex; readonly rs: RegexState; readonly up: Frame | null; readonly d: number }
  /** Free text (reasoning) until `until` (`</think>`); m: characters of it matched so far. */
  | { readonly k: "think"; readonly until: string; readonly m: number; readonly up: Frame | null; readonly d: number }
  /** Once its child ends, the automaton goes on in `state`. */
  | { readonly k: "then"; readonly state: GrammarState; readonly up: null; readonly d: number }
  /**
   * Raw text ending where `end` starts, never holding `end` (m: characters of it matched so far);
   * n, min, max, re, rs as for a string.
   */
  | {
    readonly k: "raw"; readonly end: string; readonly m: number; readonly min: number; readonly max: number; readonly n: number;
    readonly re: readonly CompiledRegex[]; readonly rs: readonly RegexState[]; readonly up: Frame | null; readonly d: number;
  }
  /**
   * `pieces` of one alternative of `group`, at piece `i`; i = -1: the separator before a repeated
   * group starts again (with any alternative).
   */
  | {
    readonly k: "seq"; readonly group: SeqGroup; readonly pieces: readonly Piece[]; readonly i: number; readonly compact: boolean;
    readonly up: Frame | null; readonly d: number;
  };

export type ObjFrame = {
  readonly k: "obj"; readonly node: ObjectNode; readonly seen: readonly string[];
  readonly phase: "first" | "next" | "key" | "colon" | "value" | "after"; readonly key: string; readonly compact: boolean; readonly up: Frame | null; readonly d: number;
  /** Set while the object is any of an anyOf's options (its node their shape), until a value tells them apart (grammar-pick.ts). */
  readonly pick?: ObjectPick;
};

/** One configuration of the automaton: its frames (innermost on top) and the current whitespace run. */
export interface Config {
  readonly top: Frame | null;
  readonly ws: number;
}

/** An automaton state: the configurations still possible. Empty means the text so far cannot be extended. */
export type GrammarState = readonly Config[];

/** What may follow a backslash in a JSON string other than `u`. */
export const SHORT_ESCAPES = '"\\/bfnrt';

/** Number grammar states; those that may end a number are in NUM_END. */
export const enum NumState { Sign, Zero, Int, Dot, Frac, E, ESign, Exp }
export const NUM_END = new Set([NumState.Zero, NumState.Int, NumState.Frac, NumState.Exp]);

/** The keys of the items so far when `up` is a `uniqueItems` array (its child an item), else null. */
export function uniqueSeen(up: Frame | null): readonly string[] | null {
  return up !== null && up.k === "arr" ? up.seen : null;
}
