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
 *
 * This module is the automaton's face; its parts: grammar-types.ts (what a request's output must be,
 * and the limits), grammar-start.ts (start states), grammar-step.ts (steps and completion),
 * grammar-values.ts (JSON values), and the grammar-*.ts helpers those use.
 */
export type { Config, GrammarState } from "./grammar-frames.ts";
export { grammarPlainTextRooms, grammarStateKey, isPlainText, ObjectIds, type PlainTextRoom } from "./grammar-key.ts";
export {
  isToolCallFormat, type JsonWhitespace, MAX_DEPTH, MAX_RULE_DEPTH, MAX_WHITESPACE, type OutputGrammar, TOOL_CALL_FORMAT_ALIASES, TOOL_CALL_FORMATS, type TagStructure,
  type ToolCallFormat, type ToolCallSyntax,
} from "./grammar-types.ts";
export { AFTER_THINK, type FreePrefix, grammarStart, MAY_THINK } from "./grammar-start.ts";
export { grammarComplete, grammarFeed, grammarStep } from "./grammar-step.ts";
export { fitsDepth } from "./grammar-values.ts";
