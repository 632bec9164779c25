/**
 * Forced tool calls in Gemma 4's notation (grammar.ts ToolCallFormat "gemma4"; serve/tool-calls-gemma4.ts
 * reads them back): `<|tool_call>call:NAME{key:value,...}<tool_call|>` per call, back to back — keys
 * bare, strings raw between `<|"|>` tokens, numbers, booleans and null as JSON, objects and arrays
 * nested the same way, no spaces (what Gemma 4's chat template writes a call as). A call's arguments
 * follow its parameters: each declared property in declared order (an optional one may be left out,
 * undeclared ones never), a string (its pattern and length kept) raw between the delimiters.
 */
import type { Piece, SeqGroup, StringNode } from "./grammar-frames.ts";
import { indexGroup } from "./grammar-pick.ts";
import { ANY_OBJECT, compileSchema, type JsonSchema, resolve, SchemaError, type SchemaNode } from "./json-schema.ts";
import { compilePattern } from "./regex-nfa.ts";

/** Gemma 4's call tags and its string delimiter (single tokens of its vocabulary). */
export const GEMMA4_CALL = { open: "<|tool_call>", close: "<tool_call|>", string: '<|"|>' } as const;

/** Any raw text of a string value (the delimiter never inside). */
const ANY_STRING: StringNode = { t: "string", min: 0, max: Infinity, patterns: [] };
/** A key of an undeclared member: bare, as Gemma writes them. */
const BARE_KEY: StringNode = { t: "string", min: 1, max: 64, patterns: [compilePattern("[A-Za-z_][A-Za-z0-9_]*", true)] };
const ANY_NUMBER: SchemaNode = { t: "number", integer: false, range: null };

/** One alternative of `alts`. */
function oneOf(alts: Piece[][]): Piece {
  return { group: { alts, repeat: false, sep: "" } };
}

/** `pieces`, or nothing. */
function optional(pieces: Piece[]): Piece {
  return oneOf([pieces, []]);
}

/** A string value: its text raw between delimiters. */
function stringValue(node: StringNode): Piece[] {
  const q = GEMMA4_CALL.string;
  return [{ lit: q }, { raw: node, end: q }, { lit: q }];
}

/**
 * Any value in Gemma's notation, as one self-referring rule (a tool without declared parameters, an
 * unconstrained property).
 */
function anyValue(): SeqGroup {
  const value: { alts: Piece[][]; repeat: false; sep: ""; rule: string } = { alts: [], repeat: false, sep: "", rule: "gemma4_value" };
  const member: Piece[] = [{ raw: BARE_KEY, end: ":" }, { lit: ":" }, { group: value }];
  value.alts.push(
    stringValue(ANY_STRING),
    [{ node: ANY_NUMBER }],
    [{ lit: "true" }],
    [{ lit: "false" }],
    [{ lit: "null" }],
    [{ lit: "{" }, optional([{ group: { alts: [member], repeat: true, sep: "," } }]), { lit: "}" }],
    [{ lit: "[" }, optional([{ group: { alts: [[{ group: value }]], repeat: true, sep: "," } }]), { lit: "]" }],
  );
  return value;
}

/** A value following `node`, in Gemma's notation; SchemaError for what it cannot follow exactly. */
function gemmaValue(node: SchemaNode, any: () => SeqGroup): Piece[] {
  const n = resolve(node);
  switch (n.t) {
    case "any": return [{ group: any() }];
    case "string": return stringValue(n);
    case "number": return [{ node: n }];
    case "literal":
      return [oneOf(n.texts.map((text): Piece[] => {
        const v = JSON.parse(text) as unknown;
        if (typeof v === "string") return [{ lit: `${GEMMA4_CALL.string}${v}${GEMMA4_CALL.string}` }];
        if (v !== null && typeof v === "object") throw new SchemaError(`Gemma 4's tool-call notation cannot be constrained to the constant ${text}`);
        return [{ lit: text }];
      }))];
    case "anyOf": return [oneOf(n.options.map((o) => gemmaValue(o, any)))];
    case "object": return objectValue(n, any);
    case "array": {
      if (n.prefix.length > 0 || n.unique || n.min > 1 || n.max !== Infinity) {
        throw new SchemaError("Gemma 4's tool-call notation can be constrained to arrays of any length only (no prefixItems, uniqueItems, maxItems or a minItems over 1)");
      }
      if (n.items === null) return [{ lit: "[]" }];
      const items: Piece = { group: { alts: [gemmaValue(n.items, any)], repeat: true, sep: "," } };
      return [{ lit: "[" }, n.min === 1 ? items : optional([items]), { lit: "]" }];
    }
  }
}

/** An object: its declared members in declared order, `,` between those written; with none declared, any bare-keyed members its extra allows. */
function objectValue(n: Extract<SchemaNode, { t: "object" }>, any: () => SeqGroup): Piece[] {
  if (n.props.size === 0) {
    if (n.extra === null) return [{ lit: "{}" }];
    const member: Piece[] = [{ raw: BARE_KEY, end: ":" }, { lit: ":" }, ...gemmaValue(n.extra, any)];
    return [{ lit: "{" }, optional([{ group: { alts: [member], repeat: true, sep: "," } }]), { lit: "}" }];
  }
  const members = [...n.props].map(([key, value]) => ({ required: n.required.has(key), pieces: (sep: string): Piece[] => [{ lit: `${sep}${key}:` }, ...gemmaValue(value, any)] }));
  const after = (i: number): Piece[] => members.slice(i).flatMap((m) => (m.required ? m.pieces(",") : [optional(m.pieces(","))]));
  // The first member written has no separator: an optional one may give way to the next.
  const from = (i: number): Piece[] => {
    if (i === members.length) return [];
    const first = [...members[i].pieces(""), ...after(i + 1)];
    return members[i].required ? first : [oneOf([first, from(i + 1)])];
  };
  return [{ lit: "{" }, ...from(0), { lit: "}" }];
}

/** Calls of `tools` in Gemma 4's notation, one (or with `parallel` several, back to back); SchemaError for parameters it cannot follow. */
export function gemma4Calls(tools: readonly { name: string; parameters?: JsonSchema }[], parallel: boolean): SeqGroup {
  let rule: SeqGroup | undefined;
  const any = () => (rule ??= anyValue());
  return indexGroup({
    alts: tools.map((t): Piece[] => {
      const params = t.parameters === undefined ? ANY_OBJECT : resolve(compileSchema(t.parameters));
      if (params.t !== "object" && params.t !== "any") throw new SchemaError(`Gemma 4's tool calls take an object of arguments; tool "${t.name}" declares ${JSON.stringify(params.t)}`);
      const args = params.t === "any" ? objectValue({ t: "object", props: new Map(), required: new Set(), extra: params }, any) : objectValue(params, any);
      return [{ lit: `${GEMMA4_CALL.open}call:${t.name}` }, ...args, { lit: GEMMA4_CALL.close }];
    }),
    repeat: parallel,
    sep: "",
  });
}
