/**
 * Tool-call arguments a client sends back (JSON text) given to a chat template as an object whose
 * numbers come out as they were written. JSON.parse rounds 12345678901234567890 (a snowflake id an
 * agent passes from one tool to the next) to 12345678901234567000 and turns 1.0 into 1, so the next
 * prompt would show the model a different id than it wrote, and would no longer repeat its own
 * output token for token (the previous turn's KV stops matching there). Each such number stands in
 * the parsed value as a placeholder string that {@link NumberLiterals.restore} puts back into the
 * rendered prompt, quoted (`tojson`) or bare (`{{ value }}`).
 */

/** Placeholder text: ASCII, so `tojson` with ensure_ascii leaves it alone. */
const MARK = "__evolving_number_";
const PLACEHOLDER = /"?__evolving_number_(\d+)__"?/g;

/** The number literals set aside while one prompt's messages are prepared. */
export class NumberLiterals {
  private readonly literals: string[] = [];

  /** Whether placeholders can be used for `text` (false if it already holds the marker). */
  static usableFor(text: string): boolean {
    return !text.includes(MARK);
  }

  /**
   * JSON text parsed, numbers that would not print back as written replaced by placeholders.
   * Throws as JSON.parse does on text that is not JSON.
   */
  parse(text: string): unknown {
    const plain = JSON.parse(text); // what is not JSON (e.g. "01") stays refused
    let out = "";
    let from = 0;
    for (let i = 0; i < text.length; i++) {
      const c = text.charCodeAt(i);
      if (c === 34) { // a string: skip to its closing quote
        for (i++; i < text.length && text.charCodeAt(i) !== 34; i++) if (text.charCodeAt(i) === 92) i++;
        continue;
      }
      if (c !== 45 && (c < 48 || c > 57)) continue;
      const m = /^-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?/.exec(text.slice(i, i + 400));
      if (m === null) continue;
      const literal = m[0];
      if (JSON.stringify(Number(literal)) !== literal) {
        out += text.slice(from, i) + `"${MARK}${this.literals.length}__"`;
        this.literals.push(literal);
        from = i + literal.length;
      }
      i += literal.length - 1;
    }
    return from === 0 ? plain : JSON.parse(out + text.slice(from));
  }

  /** The rendered prompt with each placeholder (and the quotes `tojson` put around it) replaced by its number. */
  restore(rendered: string): string {
    if (this.literals.length === 0) return rendered;
    return rendered.replace(PLACEHOLDER, (whole, k: string) => this.literals[Number(k)] ?? whole);
  }
}
