/**
 * Gemma 4's tool calls (`--tool-call-parser gemma4`), as llama.cpp's chat parser reads them: each
 * call `<|tool_call>call:NAME{ARGS}<tool_call|>`, ARGS in Gemma's own notation — keys bare, strings
 * between `<|"|>` tokens (raw text, never escaped), numbers, true/false/null as JSON, objects `{k:v,...}`
 * and arrays `[v,...]` nested the same way — read into JSON arguments. A body that is not such a call
 * stays text.
 */
import { GEMMA4_CALL } from "../engine/grammar-gemma4.ts";
import { type CallSyntax, FUNCTION_NAME, type ParsedToolCall } from "./tool-calls.ts";

export { GEMMA4_CALL };

const NUMBER = /^-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?/;
const WS = /^\s*/;

/** The syntax for `ToolCallStream`. */
export const GEMMA4_SYNTAX: CallSyntax = {
  open: GEMMA4_CALL.open,
  close: GEMMA4_CALL.close,
  parse: parseGemma4Body,
  // Inside a string (an odd count of delimiters) a closing tag is the string's text.
  unclosed: (body) => body.split(GEMMA4_CALL.string).length % 2 === 0,
};

/** The call in one block's body (`call:NAME{...}`), or null when it is not one. */
export function parseGemma4Body(body: string): ParsedToolCall | null {
  const m = /^\s*call:([^{\s]+)\{/.exec(body);
  if (!m || !FUNCTION_NAME.test(m[1])) return null;
  const at = m[0].length - 1;
  const read = readValue(body, at);
  if (!read || typeof read.value !== "object" || read.value === null || Array.isArray(read.value)) return null;
  if (body.slice(read.end).trim() !== "") return null;
  return { name: m[1], arguments: JSON.stringify(read.value) };
}

type Value = string | number | boolean | null | Value[] | { [k: string]: Value };

/** One Gemma-notation value at `at` (after any whitespace), and where it ends; null where there is none. */
function readValue(s: string, at: number): { value: Value; end: number } | null {
  const i = at + WS.exec(s.slice(at))![0].length;
  if (s.startsWith(GEMMA4_CALL.string, i)) {
    const start = i + GEMMA4_CALL.string.length;
    const close = s.indexOf(GEMMA4_CALL.string, start);
    return close < 0 ? null : { value: s.slice(start, close), end: close + GEMMA4_CALL.string.length };
  }
  if (s[i] === "{") return readItems(s, i + 1, "}", true);
  if (s[i] === "[") return readItems(s, i + 1, "]", false);
  for (const [word, value] of [["true", true], ["false", false], ["null", null]] as const) {
    if (s.startsWith(word, i)) return { value, end: i + word.length };
  }
  const n = NUMBER.exec(s.slice(i));
  return n ? { value: Number(n[0]), end: i + n[0].length } : null;
}

/** The members of an object (`key:value`) or the items of an array up to `close`. */
function readItems(s: string, at: number, close: "}" | "]", keyed: boolean): { value: Value; end: number } | null {
  const obj: { [k: string]: Value } = {};
  const arr: Value[] = [];
  let i = at + WS.exec(s.slice(at))![0].length;
  if (s[i] === close) return { value: keyed ? obj : arr, end: i + 1 };
  for (;;) {
    let key = "";
    if (keyed) {
      const k = /^([^:}]+):/.exec(s.slice(i));
      if (!k) return null;
      key = k[1].trim();
      i += k[0].length;
    }
    const v = readValue(s, i);
    if (!v) return null;
    if (keyed) obj[key] = v.value;
    else arr.push(v.value);
    i = v.end + WS.exec(s.slice(v.end))![0].length;
    if (s[i] === close) return { value: keyed ? obj : arr, end: i + 1 };
    if (s[i] !== ",") return null;
    i += 1;
    i += WS.exec(s.slice(i))![0].length;
  }
}
