/** A GGUF's own tokenizer from its `tokenizer.ggml.*` metadata: SentencePiece-style "llama" or byte-level BPE "gpt2". */
import { type ModelConfig, ModelLoadError, type Tokenizer } from "./config.ts";
import { GgufMetadata, showGgufValue } from "./gguf-metadata.ts";
import type { GgufHeader } from "./gguf-reader.ts";
import { BpeTokenizer } from "./tokenizer-bpe.ts";
import { SpmTokenizer } from "./tokenizer-spm.ts";
import { SpmBpeTokenizer } from "./tokenizer-spm-bpe.ts";

/** Builds the GGUF's own tokenizer (SentencePiece-style "llama" or byte-level BPE "gpt2"). */
export function ggufTokenizer(header: GgufHeader, config: ModelConfig, path: string): Tokenizer {
  const meta = new GgufMetadata(header.metadata, path);
  const model = meta.string("tokenizer.ggml.model", "");
  const tokens = meta.array("tokenizer.ggml.tokens");
  if (!tokens || tokens.length === 0) {
    throw new ModelLoadError(`Model "${path}" has no tokenizer vocab (tokenizer.ggml.tokens${tokens ? " is empty" : ""})`);
  }
  const bad = tokens.findIndex((t) => typeof t !== "string");
  if (bad >= 0) {
    throw new ModelLoadError(`GGUF metadata "tokenizer.ggml.tokens" in "${path}" should hold strings, got ${showGgufValue(tokens[bad])} at index ${bad}`);
  }
  const tokenStrings = tokens as string[];
  /** A per-token array (`token_type`, `scores`): numbers, one per token, or absent. */
  const perToken = (key: string): number[] => {
    const values = meta.array(key) ?? [];
    if (values.length > 0 && values.length !== tokens.length) {
      throw new ModelLoadError(`GGUF metadata "${key}" in "${path}" has ${values.length} values for ${tokens.length} tokens`);
    }
    // A NaN score would leave SentencePiece's merge order undefined.
    const at = values.findIndex((v) => typeof v !== "number" || Number.isNaN(v));
    if (at >= 0) throw new ModelLoadError(`GGUF metadata "${key}" in "${path}" should hold numbers, got ${showGgufValue(values[at])} at index ${at}`);
    return values as number[];
  };
  const types = perToken("tokenizer.ggml.token_type");
  const unkId = meta.optionalNumber("tokenizer.ggml.unknown_token_id");
  switch (model) {
    case "llama":
      return new SpmTokenizer({
        tokens: tokenStrings,
        scores: perToken("tokenizer.ggml.scores"),
        types,
        bosId: config.bosTokenId,
        // As llama.cpp, an id outside the vocabulary is ignored.
        unkId: unkId !== undefined && Number.isInteger(unkId) && unkId >= 0 && unkId < tokens.length ? unkId : undefined,
        addSpacePrefix: meta.bool("tokenizer.ggml.add_space_prefix", true),
      });
    case "gpt2":
      return new BpeTokenizer({
        tokens: tokenStrings,
        types,
        merges: (meta.array("tokenizer.ggml.merges") ?? []).map(String),
        pre: meta.string("tokenizer.ggml.pre", "default"),
        bosId: config.bosTokenId,
      });
    case "gemma4":
      // Gemma 4's SentencePiece-style BPE (tokenizer-spm-bpe.ts).
      return new SpmBpeTokenizer({ tokens: tokenStrings, types, merges: (meta.array("tokenizer.ggml.merges") ?? []).map(String), bosId: config.bosTokenId });
    default:
      throw new ModelLoadError(`Model "${path}" uses tokenizer "${model}"; supported GGUF tokenizers are "llama", "gpt2" and "gemma4"`);
  }
}
