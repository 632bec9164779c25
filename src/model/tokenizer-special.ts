/**
 * Pieces shared by the GGUF tokenizers: token types and splitting text at special-token strings
 * (chat templates put "<|im_start|>" etc. in the text; they must become one id, as in llama.cpp).
 */

/** GGUF `tokenizer.ggml.token_type` values (llama.cpp `llama_token_type`). */
export const TokenType = {
  NORMAL: 1,
  UNKNOWN: 2,
  CONTROL: 3,
  USER_DEFINED: 4,
  UNUSED: 5,
  BYTE: 6,
} as const;

/** A stretch of text to tokenize normally, or a special token already resolved to its id. */
export type Fragment = { text: string } | { id: number };

/** Finds special tokens (control and user-defined) inside text, longest match first. */
export class SpecialSplitter {
  /** Special tokens grouped by first character, longest first, so scanning stays cheap. */
  private readonly byFirst = new Map<string, { text: string; id: number }[]>();

  constructor(tokens: readonly string[], types: readonly number[]) {
    tokens.forEach((text, id) => {
      const t = types[id];
      if ((t !== TokenType.CONTROL && t !== TokenType.USER_DEFINED) || text.length === 0) return;
      const list = this.byFirst.get(text[0]) ?? [];
      list.push({ text, id });
      this.byFirst.set(text[0], list);
    });
    for (const list of this.byFirst.values()) list.sort((a, b) => b.text.length - a.text.length);
  }

  /** Splits `text` into plain fragments and special-token ids, left to right. */
  split(text: string): Fragment[] {
    if (this.byFirst.size === 0) return [{ text }];
    const out: Fragment[] = [];
    let start = 0;
    let plainFrom = 0;
    while (start < text.length) {
      const hit = this.matchAt(text, start);
      if (hit) {
        if (start > plainFrom) out.push({ text: text.slice(plainFrom, start) });
        out.push({ id: hit.id });
        start += hit.text.length;
        plainFrom = start;
      } else {
        start++;
      }
    }
    if (plainFrom < text.length) out.push({ text: text.slice(plainFrom) });
    return out;
  }

  private matchAt(text: string, at: number): { text: string; id: number } | undefined {
    const list = this.byFirst.get(text[at]);
    if (list) for (const s of list) if (text.startsWith(s.text, at)) return s;
    return undefined;
  }
}

/** Decodes collected bytes as UTF-8 (invalid sequences become U+FFFD). */
export function utf8(bytes: readonly number[]): string {
  return new TextDecoder("utf-8").decode(new Uint8Array(bytes));
}
