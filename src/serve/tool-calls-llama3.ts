/**
 * Tool calls in Llama 3.1–3.3's JSON format (vLLM's `llama3_json` parser): an answer that is calls
 * starts with `{` (after optional whitespace, or after `<|python_tag|>`) and holds one or more
 * `{"name": ..., "parameters": {...}}` objects separated by `;`. An answer that starts otherwise is
 * text, and stays text whatever follows; an object that is not a call (not JSON, no name) ends the
 * calls, and it and the rest are returned as the model wrote them, never dropped.
 */
import { type ParsedToolCall, parseToolCallBody, partialTagSuffix, type ToolStreamPart } from "./tool-calls.ts";
import { HeldJsonValue, jsonObject } from "./tool-calls-json.ts";

/** What Llama 3.1's template has the model write before code or a call in its built-in format. */
const PYTHON_TAG = "<|python_tag|>";

/**
 * Incremental splitter for Llama 3 JSON calls. A call is released whole as soon as its object
 * closes; text is released as soon as the answer is known not to start with a call.
 */
export class Llama3JsonStream {
  private buf = "";
  /** "start": nothing but whitespace (or part of the tag) so far; "calls": reading calls; "text": passing through. */
  private mode: "start" | "calls" | "text" = "start";
  /** The object being read, held while it is open. */
  private readonly json = new HeldJsonValue();

  /** Feeds the next delta; returns what can be released. */
  push(delta: string): ToolStreamPart[] {
    const buf = this.json.append(this.buf, delta);
    if (buf === null) return [];
    this.buf = buf;
    const out: ToolStreamPart[] = [];
    if (this.mode === "start") {
      const lead = this.buf.length - this.buf.trimStart().length;
      const rest = this.buf.slice(lead);
      if (rest === "" || (rest.length < PYTHON_TAG.length && partialTagSuffix(rest, PYTHON_TAG) === rest.length)) return out;
      if (rest.startsWith(PYTHON_TAG) || rest.startsWith("{")) {
        this.mode = "calls";
        // Leading whitespace and the tag are the format's, not content.
        this.buf = rest.startsWith(PYTHON_TAG) ? rest.slice(PYTHON_TAG.length) : rest;
      } else {
        this.mode = "text";
      }
    }
    if (this.mode === "calls") this.readCalls(out, false);
    if (this.mode === "text" && this.buf !== "") {
      out.push({ kind: "text", text: this.buf });
      this.buf = "";
    }
    return out;
  }

  /** The output ended: an object left open is text. */
  end(): ToolStreamPart[] {
    this.buf = this.json.release(this.buf);
    const out: ToolStreamPart[] = [];
    if (this.mode === "calls") this.readCalls(out, true);
    if (this.buf !== "") out.push({ kind: "text", text: this.buf });
    this.buf = "";
    return out;
  }

  /** Releases each whole call at the front of the buffer; switches to text at anything else. */
  private readCalls(out: ToolStreamPart[], final: boolean): void {
    for (;;) {
      const lead = this.buf.match(/^[\s;]*/)![0].length;
      if (lead === this.buf.length) {
        if (final) this.buf = "";
        return;
      }
      if (this.buf[lead] !== "{") {
        this.mode = "text";
        return;
      }
      const end = this.json.end(this.buf, lead);
      if (end < 0) {
        // Open: hold it and scan only what comes next.
        if (!final) {
          this.json.hold(this.buf);
          this.buf = "";
        }
        return;
      }
      const call = parseLlama3Call(this.buf.slice(lead, end));
      if (call === null) {
        this.mode = "text";
        return;
      }
      out.push({ kind: "call", call });
      this.buf = this.buf.slice(end);
    }
  }
}

/**
 * The call an object is, or null: a name and its "parameters" (or "arguments"), as vLLM's parser
 * requires. An answer that is JSON for the user (`{"name": "Ada", "age": 36}`, say under a
 * response_format) is text, not a call to a function "Ada" that drops the other keys.
 */
function parseLlama3Call(text: string): ParsedToolCall | null {
  const o = jsonObject(text);
  return o !== null && ("parameters" in o || "arguments" in o) ? parseToolCallBody(text) : null;
}
