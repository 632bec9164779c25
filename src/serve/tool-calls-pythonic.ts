/**
 * LFM2's tool calls (`--tool-call-parser lfm2`; llama.cpp's LFM2 and LFM2.5 chat formats): a list of
 * Python calls between `<|tool_call_start|>` and `<|tool_call_end|>`,
 * `[get_weather(city="Paris", days=3), now()]` — keyword arguments only, each value a Python literal
 * (a string in single or double quotes, a number, True/False/None, a list, tuple or dict of them) or,
 * as llama.cpp accepts from LFM2, JSON's true/false/null. Each call's arguments reach the client as
 * JSON text. A body that is not such a list (a positional argument, an expression, an unclosed string)
 * stays in the text, tags and all, as the other formats' do.
 */
import { MAX_DEPTH } from "../engine/grammar.ts";
import { LFM2 } from "../engine/grammar-tool-calls.ts";
import { type CallSyntax, FUNCTION_NAME, type ParsedToolCall } from "./tool-calls.ts";

/** Thrown inside the reader where the text is not a list of calls (caught: the body stays text). */
class NotCalls extends Error {}

/** A Python keyword's name (ASCII or other scripts' letters, digits after the first, `_`). */
const KEYWORD = /[\p{L}_][\p{L}\p{N}_]*/uy;
/** A call's name as function names may be (FUNCTION_NAME's characters). */
const NAME = /[\p{L}\p{N}_.-]+/uy;
/** A Python number literal: sign, digits with `_` separators, a fraction, an exponent. */
const NUMBER = /[+-]?(?:\d(?:_?\d)*)?(?:\.(?:\d(?:_?\d)*)?)?(?:[eE][+-]?\d(?:_?\d)*)?/y;
/** A JSON number, what a Python one is written as. */
const JSON_NUMBER = /^-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?$/;
const WORDS: Readonly<Record<string, string>> = { True: "true", False: "false", None: "null", true: "true", false: "false", null: "null" };
// JSON's `\/` too: llama.cpp reads LFM2's strings as JSON's where they are written so.
const ESCAPES: Readonly<Record<string, string>> = { "\\": "\\", "'": "'", '"': '"', "/": "/", n: "\n", t: "\t", r: "\r", b: "\b", f: "\f", v: "\v", a: "\x07", "0": "\0" };

/** A reader over one body. */
class Reader {
  at = 0;
  constructor(readonly s: string) {}

  ws(): void {
    while (this.at < this.s.length && /\s/.test(this.s[this.at])) this.at++;
  }

  /** Reads `c` (after whitespace) if it is next. */
  eat(c: string): boolean {
    this.ws();
    if (this.s.startsWith(c, this.at)) {
      this.at += c.length;
      return true;
    }
    return false;
  }

  expect(c: string): void {
    if (!this.eat(c)) throw new NotCalls();
  }

  match(re: RegExp): string {
    this.ws();
    re.lastIndex = this.at;
    const m = re.exec(this.s);
    if (m === null || m[0].length === 0) throw new NotCalls();
    this.at += m[0].length;
    return m[0];
  }

  /** The calls of `[CALL, ...]`, the whole body. */
  calls(): ParsedToolCall[] {
    this.expect("[");
    const out: ParsedToolCall[] = [];
    do {
      if (out.length > 0 && this.eat("]")) return this.end(out);
      out.push(this.call());
    } while (this.eat(","));
    this.expect("]");
    return this.end(out);
  }

  private end(out: ParsedToolCall[]): ParsedToolCall[] {
    this.ws();
    if (this.at !== this.s.length || out.length === 0) throw new NotCalls();
    return out;
  }

  /** `NAME(KEY=VALUE, ...)`, its arguments as compact JSON. */
  private call(): ParsedToolCall {
    const name = this.match(NAME);
    if (!FUNCTION_NAME.test(name)) throw new NotCalls();
    this.expect("(");
    const args = new Map<string, string>();
    while (!this.eat(")")) {
      const key = this.match(KEYWORD);
      if (args.has(key)) throw new NotCalls();
      this.expect("=");
      args.set(key, this.value(0));
      if (!this.eat(",")) {
        this.expect(")");
        break;
      }
    }
    return { name, arguments: `{${[...args].map(([k, v]) => `${JSON.stringify(k)}:${v}`).join(",")}}` };
  }

  /** A literal as JSON text. */
  private value(depth: number): string {
    if (depth > MAX_DEPTH) throw new NotCalls();
    this.ws();
    const c = this.s[this.at];
    if (c === '"' || c === "'") return JSON.stringify(this.string());
    if (c === "[" || c === "(") return this.sequence(c === "[" ? "]" : ")", depth);
    if (c === "{") return this.dict(depth);
    const word = /[A-Za-z]+/y;
    word.lastIndex = this.at;
    const w = word.exec(this.s)?.[0];
    if (w !== undefined && WORDS[w] !== undefined) {
      this.at += w.length;
      return WORDS[w];
    }
    return this.number();
  }

  private sequence(close: string, depth: number): string {
    this.at++;
    const items: string[] = [];
    while (!this.eat(close)) {
      items.push(this.value(depth + 1));
      if (!this.eat(",")) {
        this.expect(close);
        break;
      }
    }
    return `[${items.join(",")}]`;
  }

  private dict(depth: number): string {
    this.at++;
    const members: string[] = [];
    while (!this.eat("}")) {
      this.ws();
      const q = this.s[this.at];
      if (q !== '"' && q !== "'") throw new NotCalls();
      const key = JSON.stringify(this.string());
      this.expect(":");
      members.push(`${key}:${this.value(depth + 1)}`);
      if (!this.eat(",")) {
        this.expect("}");
        break;
      }
    }
    return `{${members.join(",")}}`;
  }

  /** A quoted string's value, Python's escapes read (an unknown one kept with its backslash, as Python does). */
  private string(): string {
    const q = this.s[this.at++];
    let out = "";
    while (this.at < this.s.length) {
      const c = this.s[this.at++];
      if (c === q) return out;
      if (c === "\n") throw new NotCalls();
      if (c !== "\\") {
        out += c;
        continue;
      }
      const e = this.s[this.at++];
      if (e === undefined) throw new NotCalls();
      if (e === "\n") continue;
      if (ESCAPES[e] !== undefined) {
        out += ESCAPES[e];
        continue;
      }
      const width = e === "x" ? 2 : e === "u" ? 4 : e === "U" ? 8 : 0;
      if (width === 0) {
        out += `\\${e}`;
        continue;
      }
      const hex = this.s.slice(this.at, this.at + width);
      const code = /^[0-9a-fA-F]+$/.test(hex) && hex.length === width ? parseInt(hex, 16) : NaN;
      if (!(code <= 0x10ffff)) throw new NotCalls();
      out += String.fromCodePoint(code);
      this.at += width;
    }
    throw new NotCalls();
  }

  private number(): string {
    const raw = this.match(NUMBER);
    let n = raw.replaceAll("_", "").replace(/^\+/, "");
    const sign = n.startsWith("-") ? "-" : "";
    n = n.slice(sign.length);
    if (n.startsWith(".")) n = `0${n}`;
    n = n.replace(/\.(?=[eE]|$)/, ".0");
    // Python refuses leading zeros (007); JSON too.
    if (!JSON_NUMBER.test(sign + n)) throw new NotCalls();
    return sign + n;
  }
}

/** The calls of a body `[NAME(KEY=VALUE, ...), ...]`, or null when it is not such a list. */
export function parsePythonicCalls(body: string): ParsedToolCall[] | null {
  try {
    return new Reader(body).calls();
  } catch (e) {
    if (e instanceof NotCalls) return null;
    throw e;
  }
}

/** Whether `body` ends inside a quoted string (a closing tag there is the string's text). */
export function insidePythonString(body: string): boolean {
  let quote: string | undefined;
  for (let i = 0; i < body.length; i++) {
    const c = body[i];
    if (quote === undefined) {
      if (c === '"' || c === "'") quote = c;
    } else if (c === "\\") i++;
    else if (c === quote) quote = undefined;
  }
  return quote !== undefined;
}

/** LFM2's format for ToolCallStream: a list of calls between its tags. */
export const LFM2_SYNTAX: CallSyntax = {
  open: LFM2.open,
  close: LFM2.close,
  parse: parsePythonicCalls,
  unclosed: insidePythonString,
};
