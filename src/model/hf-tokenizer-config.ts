/** What tokenizer_config.json and tokenizer.json say beyond the vocabulary: special token strings, the token appended to every text, the chat template. */
import { pathExists, readTextFile } from "../runtime/fs.ts";
import { isJsonObject, type Json } from "./hf-json.ts";

/** Reads the special token's string whether tokenizer_config stores it as a string or an object. */
export function tokenString(v: unknown): string | undefined {
  if (typeof v === "string") return v;
  if (v && typeof v === "object" && typeof (v as Json).content === "string") return (v as Json).content as string;
  return undefined;
}

/**
 * The special token a tokenizer ends every single text with: tokenizer_config.json's `eos_token`
 * under `add_eos_token: true`, or the last piece of tokenizer.json's TemplateProcessing post-processor
 * (alone or in a Sequence) when it is a special token, as Qwen3-Embedding's `<|endoftext|>`.
 */
export function appendedToken(tokenizerJson: Json, tokCfg: Json): string | undefined {
  if (tokCfg.add_eos_token === true) return tokenString(tokCfg.eos_token);
  const fromProcessor = (p: unknown): string | undefined => {
    if (!p || typeof p !== "object") return undefined;
    const o = p as Json;
    if (o.type === "Sequence" && Array.isArray(o.processors)) return o.processors.map(fromProcessor).find((t) => t !== undefined);
    if (o.type !== "TemplateProcessing" || !Array.isArray(o.single) || o.single.length === 0) return undefined;
    const last = o.single[o.single.length - 1] as Json;
    const special = last?.SpecialToken as Json | undefined;
    return typeof special?.id === "string" ? special.id : undefined;
  };
  return fromProcessor(tokenizerJson.post_processor);
}

/** The chat template: tokenizer_config.json's (a string, or the "default" of a named list, else its first), else chat_template.jinja's. */
export async function chatTemplate(dir: string, tokCfg: Json): Promise<string | undefined> {
  const t = tokCfg.chat_template;
  if (typeof t === "string") return t;
  if (Array.isArray(t)) {
    const named = t.filter((x): x is { name?: unknown; template: string } => isJsonObject(x) && typeof x.template === "string");
    return (named.find((x) => x.name === "default") ?? named[0])?.template;
  }
  const jinja = `${dir}/chat_template.jinja`;
  return (await pathExists(jinja)) ? await readTextFile(jinja) : undefined;
}
