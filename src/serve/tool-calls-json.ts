/**
 * JSON as tool-call parsers read it: an object's members and a value's text as the model wrote them
 * (numbers kept: a round trip through a double rounds a 19-digit id and nulls 1e400), and where a
 * streamed JSON value ends, each character scanned once.
 */

/** The JSON object `text` holds, or null when it is not JSON or not an object. */
export function jsonObject(text: string): Record<string, unknown> | null {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    return null;
  }
  return typeof v === "object" && v !== null && !Array.isArray(v) ? v as Record<string, unknown> : null;
}

/**
 * Valid JSON text without its insignificant whitespace, each string as JSON.stringify writes it
 * and each number as written: JSON.stringify(JSON.parse(text)) but for numbers, which a round trip
 * through a double would round (a 19-digit id) or turn to null (1e400).
 */
export function compactJson(text: string): string {
  let out = "";
  for (let i = 0; i < text.length;) {
    const c = text[i];
    if (c === '"') {
      const end = stringEnd(text, i);
      out += JSON.stringify(JSON.parse(text.slice(i, end)));
      i = end;
    } else {
      if (!/\s/.test(c)) out += c;
      i++;
    }
  }
  return out;
}

/** The members of a valid JSON object (each key, decoded) or the items of a valid JSON array, as written. */
export function jsonParts(text: string): { key?: string; raw: string }[] {
  const parts: { key?: string; raw: string }[] = [];
  const isObject = text[0] === "{";
  const skip = (i: number) => {
    while (/\s/.test(text[i] ?? "")) i++;
    return i;
  };
  for (let i = skip(1); text[i] !== "}" && text[i] !== "]";) {
    let key: string | undefined;
    if (isObject) {
      const end = stringEnd(text, i);
      key = JSON.parse(text.slice(i, end)) as string;
      i = skip(skip(end) + 1); // past the colon
    }
    const end = valueEnd(text, i);
    parts.push({ ...(key === undefined ? {} : { key }), raw: text.slice(i, end) });
    i = skip(end);
    if (text[i] === ",") i = skip(i + 1);
  }
  return parts;
}

/** The index just past the JSON string that opens at `at`. */
function stringEnd(text: string, at: number): number {
  let i = at + 1;
  while (text[i] !== '"') i += text[i] === "\\" ? 2 : 1;
  return i + 1;
}

/** The index just past the JSON value that starts at `at` in valid JSON text. */
function valueEnd(text: string, at: number): number {
  if (text[at] === '"') return stringEnd(text, at);
  if (text[at] !== "{" && text[at] !== "[") {
    // A number or literal: up to the next delimiter, searched in place (no copy of the rest).
    const delimiter = /[\s,\]}]/g;
    delimiter.lastIndex = at;
    return delimiter.exec(text)?.index ?? text.length;
  }
  let depth = 0;
  for (let i = at; ; i++) {
    const c = text[i];
    if (c === '"') i = stringEnd(text, i) - 1;
    else if (c === "{" || c === "[") depth++;
    else if ((c === "}" || c === "]") && --depth === 0) return i + 1;
  }
}

/**
 * A streamed call's JSON value (Llama 3's call object, Mistral's arguments or list) for its stream:
 * where it ends and, while it is open, its text held in the pieces it came in, each character
 * scanned once and the pieces joined once it closes. Rescanning the value from its start at every
 * delta, or growing one string and reading it (V8 copies a grown string whole before a read), is
 * quadratic in a long value — a whole file, for an agent writing one.
 */
export class HeldJsonValue {
  private pieces: string[] | null = null;
  private readonly scanner = new JsonValueScanner();

  /** The index just past the JSON object or array that opens at `at` in `text`, or -1 while it is open (then {@link hold} the text). */
  end(text: string, at: number): number {
    this.scanner.reset();
    const k = this.scanner.feed(text.slice(at));
    return k < 0 ? -1 : at + k;
  }

  /** Holds `text`, whose value {@link end} found open; the stream's buffer is empty until the value closes. */
  hold(text: string): void {
    this.pieces = [text];
  }

  /** The stream's buffer `buf` with `delta` added: while a value is held, null until it closes, then the whole text. */
  append(buf: string, delta: string): string | null {
    if (this.pieces === null) return buf + delta;
    this.pieces.push(delta);
    if (this.scanner.feed(delta) < 0) return null;
    return this.release(buf);
  }

  /** The stream's whole text: what is held (the output ended, or the value closed), or `buf` when nothing is. */
  release(buf: string): string {
    if (this.pieces === null) return buf;
    const text = this.pieces.join("");
    this.pieces = null;
    return text;
  }
}

/** Finds where a JSON object or array ends in text that arrives in pieces, scanning each character once. */
class JsonValueScanner {
  private depth = 0;
  private inString = false;
  private escaped = false;

  /** Scans the next piece of a value (the first piece starts with its `{` or `[`): the index in `text` just past the value's end, or -1 while it is still open. */
  feed(text: string): number {
    for (let i = 0; i < text.length; i++) {
      const c = text[i];
      if (this.inString) {
        if (this.escaped) this.escaped = false;
        else if (c === "\\") this.escaped = true;
        else if (c === '"') this.inString = false;
      } else if (c === '"') {
        this.inString = true;
      } else if (c === "{" || c === "[") {
        this.depth++;
      } else if ((c === "}" || c === "]") && --this.depth === 0) {
        this.reset();
        return i + 1;
      }
    }
    return -1;
  }

  /** Starts over, for the next value. */
  reset(): void {
    this.depth = 0;
    this.inString = false;
    this.escaped = false;
  }
}
