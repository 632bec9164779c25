/**
 * vLLM's `POST /tokenize` and `POST /detokenize`: a prompt's or a chat's token ids exactly as the
 * server would hand them to the engine (the chat rendered by the model's template, with its tools and
 * `chat_template_kwargs`), and token ids back to text. Agents use them to count and budget context.
 */
import { z } from "zod";
import { decodeChar, utf8Length } from "../engine/utf8-pieces.ts";
import { tokenTextOf } from "../model/config.ts";
import { ApiError } from "./errors.ts";
import { chatPrompt, type ServeContext } from "./openai.ts";
import { type ChatRequest, ChatRequestSchema, isObject } from "./schemas.ts";

const tokenStrs = { return_token_strs: z.boolean().nullish() };

/** `/tokenize` with a `prompt` (text; BOS as the model adds it unless `add_special_tokens` is false) and no `messages`. */
const CompletionTokenize = z.looseObject({ model: z.string().nullish(), prompt: z.string(), messages: z.never().optional(), add_special_tokens: z.boolean().nullish(), ...tokenStrs });
/** `/tokenize` with `messages`: the chat request's fields that shape its prompt. */
const ChatTokenize = ChatRequestSchema.extend({ model: z.string().nullish(), ...tokenStrs });

/**
 * POST /tokenize: a prompt, or chat messages (vLLM's two shapes). The shape is picked by whether
 * `messages` is given, so a bad value gets the issue of its own shape, naming the field (a union
 * of the two would say only "Invalid input").
 */
export const TokenizeRequestSchema = z.unknown().transform((v, ctx): z.infer<typeof CompletionTokenize> | z.infer<typeof ChatTokenize> => {
  const chat = isObject(v) && v.messages !== undefined;
  if (isObject(v) && !chat && v.prompt === undefined) {
    ctx.addIssue({ code: "custom", message: "needs a prompt (text) or messages (a chat)", path: ["prompt"], input: undefined });
    return z.NEVER;
  }
  const r = (chat ? ChatTokenize : CompletionTokenize).safeParse(v);
  if (r.success) return r.data;
  for (const issue of r.error.issues) ctx.addIssue({ code: "custom", message: issue.message, path: issue.path, input: issue.input });
  return z.NEVER;
});
/** POST /detokenize. */
export const DetokenizeRequestSchema = z.looseObject({ model: z.string().nullish(), tokens: z.array(z.number().int().min(0)) });

/** A model named in the body must be the one served (vLLM takes the field as optional; so do /score and /rerank). */
export function checkModel(ctx: ServeContext, model: string | null | undefined): void {
  if (model !== undefined && model !== null && model !== ctx.modelName) {
    throw new ApiError(404, `The model '${model}' does not exist; this server serves '${ctx.modelName}'`, "model", "model_not_found");
  }
}

/** The token ids of a /tokenize body, with their count, the context length, and (asked) each token's text. */
export function tokenize(ctx: ServeContext, body: z.infer<typeof TokenizeRequestSchema>): Record<string, unknown> {
  checkModel(ctx, body.model);
  const tokens = body.messages !== undefined
    ? chatPrompt(ctx, { ...body, model: ctx.modelName } as ChatRequest).prompt
    : ctx.tokenizer.encode(body.prompt, { addBos: ctx.config.addBos && body.add_special_tokens !== false });
  return {
    count: tokens.length, max_model_len: ctx.engine.maxModelLen, tokens,
    token_strs: body.return_token_strs ? tokens.map((id) => tokenStr(ctx, id)) : null,
  };
}

/**
 * A token's text for `return_token_strs`: its streamed text, except that bytes which are no whole
 * UTF-8 character by themselves (byte-fallback tokens, pieces of an emoji) are written as
 * SentencePiece names them, `<0xF0>`, rather than as U+FFFD, which would lose which bytes they are.
 */
function tokenStr(ctx: ServeContext, id: number): string {
  const text = tokenTextOf(ctx.tokenizer, id, { special: true });
  const bytes = text.includes("\uFFFD") ? ctx.tokenizer.tokenBytes?.(id) : undefined;
  if (bytes === undefined || bytes.length === 0) return text;
  let out = "";
  for (let i = 0; i < bytes.length;) {
    const n = utf8Length(bytes[i]);
    const cp = n === 0 ? null : decodeChar([...bytes.subarray(i, i + n)]);
    out += cp === null ? `<0x${bytes[i].toString(16).toUpperCase().padStart(2, "0")}>` : String.fromCodePoint(cp);
    i += cp === null ? 1 : n;
  }
  return out;
}

/** The text of a /detokenize body's token ids. */
export function detokenize(ctx: ServeContext, body: z.infer<typeof DetokenizeRequestSchema>): Record<string, unknown> {
  checkModel(ctx, body.model);
  const bad = body.tokens.findIndex((id) => id >= ctx.config.vocabSize);
  if (bad >= 0) throw new ApiError(400, `Token id ${body.tokens[bad]} is outside the vocabulary (0..${ctx.config.vocabSize - 1})`, `tokens[${bad}]`, "invalid_value");
  return { prompt: ctx.tokenizer.decode(body.tokens, { whole: true }) };
}
