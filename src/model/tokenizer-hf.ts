/**
 * Hugging Face `tokenizer.json` through `@huggingface/tokenizers`. BOS is prepended by us (not by
 * the post-processor) so `encode(text, { addBos })` means the same thing for every tokenizer.
 */
import { Tokenizer as HfTokenizerImpl } from "@huggingface/tokenizers";
import type { Tokenizer } from "./config.ts";
import { ModelLoadError } from "./config.ts";

/** Tokenizer backed by a parsed tokenizer.json (+ tokenizer_config.json). */
export class HfTokenizer implements Tokenizer {
  readonly vocabSize: number;
  private readonly impl: HfTokenizerImpl;
  private readonly specialIds: Set<number>;
  /** BOS id, given directly or resolved from its token string. */
  readonly bosId: number | undefined;

  constructor(tokenizerJson: object, tokenizerConfig: object, bos: number | string | undefined, source: string) {
    try {
      this.impl = new HfTokenizerImpl(tokenizerJson, tokenizerConfig);
    } catch (e) {
      throw new ModelLoadError(`Cannot build the tokenizer from "${source}": ${(e as Error).message.split("\n")[0]}`);
    }
    const vocab = this.impl.get_vocab(true);
    let maxId = -1;
    for (const id of vocab.values()) maxId = Math.max(maxId, id);
    this.vocabSize = maxId + 1;
    this.bosId = typeof bos === "string" ? this.impl.token_to_id(bos) : bos;
    this.specialIds = new Set<number>();
    for (const [id, tok] of this.impl.get_added_tokens_decoder()) if (tok.special) this.specialIds.add(id);
  }

  encode(text: string, options: { addBos?: boolean } = {}): number[] {
    const ids = this.impl.encode(text, { add_special_tokens: false }).ids;
    return options.addBos && this.bosId !== undefined ? [this.bosId, ...ids] : ids;
  }

  decode(ids: readonly number[]): string {
    return this.impl.decode(ids.filter((id) => !this.specialIds.has(id)), {
      skip_special_tokens: true,
      clean_up_tokenization_spaces: false,
    });
  }

  tokenText(id: number): string {
    return this.specialIds.has(id) ? "" : this.impl.decode([id], { skip_special_tokens: true, clean_up_tokenization_spaces: false });
  }

  /** The id of a token string, if the vocab has it. */
  tokenId(token: string): number | undefined {
    return this.impl.token_to_id(token);
  }
}
