/**
 * The chat endpoint, request side: messages rendered by the chat template (harmony's and Mistral's
 * forms, reasoning effort, `continue_final_message`), the output grammar placed after reasoning, and
 * the engine requests submitted with how to split their answers.
 */
import { type TurnOptions } from "./chat-template.ts";
import { ApiError } from "./errors.ts";
import type { PromptImage } from "../engine/engine-types.ts";
import type { PreparedImage } from "./image-prep.ts";
import { encodeWithImages, tooManyImages } from "./prompt-images.ts";
import { MAY_THINK } from "../engine/grammar.ts";
import { chatEcho } from "./request-checks.ts";
import { chatGrammar } from "./output-grammar.ts";
import { effortVariables } from "./reasoning-effort.ts";
import { promptOpensReasoning, reasoningTags as reasoningTagsOf, THINK_TAGS } from "./reasoning.ts";
import type { ChatRequest, ToolDef } from "./schemas.ts";
import type { ToolSpec } from "./tool-calls-pairs.ts";
import { mistralMessageIds } from "./tool-calls-mistral.ts";
import { startsInAnalysis } from "./harmony.ts";
import { checkHarmonyGrammar, harmonyGrammarPrefix, harmonyMessages, harmonyStart, harmonyTools } from "./harmony-prompt.ts";
import { checkUnsupported, engineRequest, paramNames, submit, withPromptLogprobs } from "./generation-request.ts";
import { checkTextLength, encodeToTruncate, truncatedPrompt } from "./prompt-length.ts";
import type { ServeContext, Submitted } from "./serve-context.ts";

/** The name and parameters of each function tool (what a tool-call parser reads argument types from). */
function toolSpecs(tools: readonly ToolDef[] | undefined): ToolSpec[] {
  return (tools ?? []).map((t) => ({ name: t.function.name, ...(t.function.parameters === undefined ? {} : { parameters: t.function.parameters }) }));
}

/**
 * A chat body's prompt: its messages rendered by the chat template, with the tools it may call, and
 * tokenized (what {@link submitChat} submits; the Responses API's `truncation` measures with it).
 */
export function chatPrompt(ctx: ServeContext, body: ChatRequest): { text: string; prompt: number[]; tools: ToolDef[] | undefined; images?: PromptImage[] } {
  // tool_choice "none" reads no calls, but the template still lists the tools (vLLM's default,
  // exclude_tools_when_tool_choice_none false): an agent's last turn without tools keeps the prefix
  // its earlier turns cached.
  const tools = (body.tool_choice ?? "auto") === "none" ? undefined : body.tools ?? undefined;
  const mistral = ctx.toolCallParser === "mistral" || ctx.toolCallParser === "mistral_pre_v11";
  const messages = mistral ? mistralMessageIds(body.messages) : isHarmony(ctx) ? harmonyMessages(body.messages) : body.messages;
  // reasoning_effort reaches the template as its variables (reasoning-effort.ts); chat_template_kwargs say last.
  const variables = effortVariables(body.reasoning_effort, body.chat_template_kwargs);
  const rendered = isHarmony(ctx) ? harmonyTools(body.tools ?? undefined) : body.tools ?? undefined;
  const { text, startsWithBos } = ctx.chat.render(messages, rendered, variables, turnOptions(ctx, body));
  // The rendered text holds every message (templates add text, never remove it). Truncated, it may be longer.
  if (body.truncate_prompt_tokens === undefined || body.truncate_prompt_tokens === null) checkTextLength(ctx, text, "messages");
  const room = body.max_completion_tokens ?? body.max_tokens ?? 1;
  const images = chatImages(ctx, body.messages);
  if (images.length > 0) {
    if (body.truncate_prompt_tokens !== undefined && body.truncate_prompt_tokens !== null) {
      throw new ApiError(400, "truncate_prompt_tokens cannot be used with images: a cut could fall inside one", "truncate_prompt_tokens", "unsupported_parameter");
    }
    return { text, tools, ...encodeWithImages(ctx, text, images, ctx.config.addBos && !startsWithBos, "messages") };
  }
  const prompt = encodeToTruncate(ctx, text, body.truncate_prompt_tokens, room, ctx.config.addBos && !startsWithBos);
  if (prompt.length === 0) throw new ApiError(400, "The messages render to an empty prompt", "messages", "invalid_value");
  return { text, prompt, tools };
}

/** The images of a chat's messages, prepared (image-prep.ts), in the order their parts come (a 400 where the model reads text only). */
function chatImages(ctx: ServeContext, messages: ChatRequest["messages"]): PreparedImage[] {
  const images: PreparedImage[] = [];
  const prep = ctx.imagePrep;
  if (!prep && messages.some((m) => Array.isArray(m.content) && m.content.some((p) => p.type === "image_url"))) {
    throw new ApiError(400, "This model reads text only: image parts need a vision projector, loaded with --mmproj", "messages", "invalid_value");
  }
  messages.forEach((m, i) => {
    if (!Array.isArray(m.content)) return;
    m.content.forEach((part, j) => {
      if (part.type !== "image_url") return;
      if (images.length === ctx.maxImages) throw new ApiError(400, tooManyImages(ctx.maxImages, `image ${ctx.maxImages + 1} is at messages[${i}].content[${j}]`), "messages", "invalid_value");
      images.push(prep!.prepared(part.image_url.url, `messages[${i}].content[${j}].image_url.url`, ctx.preparedImages));
    });
  });
  return images;
}

/** How a chat request's prompt ends (vLLM's add_generation_prompt, continue_final_message); their conflicts are 400s. */
function turnOptions(ctx: ServeContext, body: ChatRequest): TurnOptions {
  const continueFinal = body.continue_final_message === true;
  const addGenerationPrompt = body.add_generation_prompt ?? undefined;
  if (!continueFinal) return addGenerationPrompt === false ? { addGenerationPrompt } : {};
  if (addGenerationPrompt === true) {
    throw new ApiError(400, "continue_final_message and add_generation_prompt cannot both be true: the answer either continues the final message or starts a new one", "continue_final_message", "invalid_value");
  }
  if (body.messages[body.messages.length - 1].role !== "assistant") {
    throw new ApiError(400, `continue_final_message needs the final message to be the assistant's, got role '${body.messages[body.messages.length - 1].role}'`, "continue_final_message", "invalid_value");
  }
  if (isHarmony(ctx)) throw new ApiError(400, "continue_final_message is not supported with gpt-oss's harmony format", "continue_final_message", "unsupported_parameter");
  return { continueFinal };
}

const isHarmony = (ctx: ServeContext) => ctx.reasoningParser === "harmony" || ctx.toolCallParser === "harmony";

/** Tokenizes a chat request and submits it. */
export function submitChat(ctx: ServeContext, body: ChatRequest): Submitted {
  const chosen = chatGrammar(body, ctx.jsonWhitespace, ctx.toolCallParser);
  const { parallelToolCalls } = chosen;
  checkUnsupported(body, "chat", ctx);
  const harmony = isHarmony(ctx);
  const rendered = chatPrompt(ctx, body);
  const { text, tools } = rendered;
  const prompt = truncatedPrompt(ctx, rendered.prompt, body.truncate_prompt_tokens, body.max_completion_tokens ?? body.max_tokens ?? 1);
  const reasoningTags = reasoningTagsOf(ctx.reasoningParser);
  const reasoning = reasoningTags !== undefined;
  const start = harmony ? harmonyStart(text) : undefined;
  const startsInReasoning = reasoning && (start ? startsInAnalysis(start) : promptOpensReasoning(text, reasoningTags));
  // Strict tools' calls amid free text (output-grammar.ts `strictCalls`) are held where a grammar can
  // follow the answer; in harmony, or after a prompt that opens reasoning other than <think>, the
  // answer goes free as before rather than being refused.
  const grammar = chosen.strictOnly && (harmony || (startsInReasoning && reasoningTags !== THINK_TAGS)) ? undefined : chosen.grammar;
  // Harmony constrains only the final message (harmony-prompt.ts). A model that opens its own
  // `<think>` block (Qwen3, GLM-4.5) may reason before the grammar, as vLLM constrains only what
  // follows the reasoning; one whose prompt opened it waits for `</think>` (engine AFTER_THINK).
  const mayThink = grammar !== undefined && !startsInReasoning && reasoningTags === THINK_TAGS;
  const grammarAfter = start ? harmonyGrammarPrefix(start, grammar) : mayThink ? MAY_THINK : undefined;
  if (startsInReasoning && grammar && reasoningTags !== THINK_TAGS && !grammarAfter) {
    // The grammar waits for `</think>` after an open prompt (src/engine/grammar.ts).
    throw new ApiError(400, `Structured output after a prompt that opens ${reasoningTags.open} is not supported`, "messages", "unsupported_parameter");
  }
  if (start) checkHarmonyGrammar(start, grammar, text);
  // With tools the answer keeps control tokens' text unless the request says otherwise: a model whose
  // call tags are control tokens (Mistral's [TOOL_CALLS], Llama 3's <|python_tag|>) shows its calls
  // to the tool-call parser only so (vLLM's parsers set skip_special_tokens false likewise). The
  // same holds for reasoning tags that are control tokens (Magistral's [THINK]).
  // Harmony's tags are control tokens too, and without them its answer could not be told from its
  // reasoning: its answers always keep them (the parser consumes them), whatever skip_special_tokens says.
  // So do answers that may call tools: skipped, the calls could not be read (vLLM's parsers force it too).
  const toolCalls = (tools?.length ?? 0) > 0;
  // Seed-OSS's <seed:think> tags may be special tokens of its vocabulary, as Magistral's [THINK] and Gemma 4's channel tokens are.
  const skipSpecial = !toolCalls && ctx.reasoningParser !== "mistral" && ctx.reasoningParser !== "seed_oss" && ctx.reasoningParser !== "gemma4";
  const budget = body.thinking_token_budget ?? undefined;
  if (budget !== undefined && !ctx.tracksReasoning) {
    throw new ApiError(400, `A thinking_token_budget needs a reasoning parser whose tags are single tokens of this model, got thinking_token_budget = ${budget} with --reasoning-parser ${ctx.reasoningParser}`, "thinking_token_budget", "unsupported_parameter");
  }
  // A conversation's opening turn holds no answer yet; a returning agent's always holds its last one.
  const openingTurn = body.messages.every((m) => m.role !== "assistant" && m.role !== "tool");
  const request = {
    openingTurn,
    ...(rendered.images ? { images: rendered.images } : {}),
    ...engineRequest(harmony || toolCalls ? { ...body, skip_special_tokens: false } : body, ctx, prompt, body.max_completion_tokens ?? body.max_tokens, startsInReasoning, grammar, skipSpecial),
    ...(grammarAfter ? { grammarAfter } : {}),
    ...(budget !== undefined ? { reasoningBudget: budget } : {}),
  };
  const n = body.n ?? 1;
  // Chat's prompt log probabilities are returned once, beside the choices.
  const params = paramNames(body, "chat");
  const handles = submit(ctx, [request], n, "messages", true, params);
  const echo = chatEcho(body);
  return withPromptLogprobs({ kind: "chat", handles, params, perPrompt: n, n, promptTokens: prompt.length, ...(echo === undefined ? {} : { echo }), output: { reasoning, reasoningTags, startsInReasoning, ...(start ? { harmony: start } : {}), toolCalls, parallelToolCalls, toolCallFormat: ctx.toolCallParser, tools: toolSpecs(tools), ...(grammar?.kind === "union" ? { callsOrAnswer: true } : {}) } }, body, ctx);
}
