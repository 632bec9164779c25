/**
 * The prompt side of gpt-oss's harmony format (harmony.ts reads the answers): where a rendered prompt
 * leaves the answer, the messages a client sends back made fit for gpt-oss's chat template, and the
 * token ids the engine tracks analysis messages by (src/engine/reasoning-spans.ts).
 */
import type { FreePrefix, OutputGrammar } from "../engine/grammar.ts";
import { HARMONY } from "../engine/grammar-tool-calls.ts";
import type { ReasoningTokens } from "../engine/reasoning-spans.ts";
import type { Tokenizer } from "../model/config.ts";
import { messageText } from "./chat-template.ts";
import { ApiError, describe } from "./errors.ts";
import type { HarmonyStart } from "./harmony.ts";
import { type ReasoningParserName, reasoningTags, reasoningTokenIds, singleTokenId } from "./reasoning.ts";
import type { ChatMessageIn, ToolDef } from "./schemas.ts";

/**
 * Where `prompt` leaves the answer. gpt-oss's template ends with `<|start|>assistant`, so the answer
 * starts in that message's header (right at `<|channel|>`, or at ` to=` for a call); a prompt that
 * ends inside a body (a template that opens `<|channel|>final<|message|>` itself) continues that
 * body, one that ends after an end tag starts between messages. A prompt with no `<|start|>` at all
 * (not a harmony template) is taken to have left an assistant header open.
 */
export function harmonyStart(prompt: string): HarmonyStart {
  const at = prompt.lastIndexOf(HARMONY.start);
  if (at < 0) return { at: "header", header: "assistant" };
  const tail = prompt.slice(at + HARMONY.start.length);
  if ([HARMONY.end, HARMONY.call, HARMONY.return].some((t) => tail.includes(t))) return { at: "outside" };
  const m = tail.indexOf(HARMONY.message);
  return m < 0 ? { at: "header", header: tail } : { at: "body", header: tail.slice(0, m) };
}

/**
 * Refuses a forced call in harmony format after a prompt that does not end with `<|start|>assistant`
 * (gpt-oss's template's end): its grammar writes the message from the header's start.
 */
export function checkHarmonyGrammar(start: HarmonyStart, grammar: OutputGrammar | undefined, prompt: string): void {
  if (grammar?.kind !== "tool_calls" || grammar.format !== "harmony" || (start.at === "header" && start.header === "assistant")) return;
  throw new ApiError(400, `A forced tool call in harmony format needs a prompt that ends with <|start|>assistant; this one ends with ${describe(prompt.slice(-40))}`, "messages", "unsupported_parameter");
}

/**
 * Where structured output (response_format, structured_outputs) starts in a harmony answer: in the
 * final message's body, after its header `<|channel|>final` … `<|message|>` (a `<|constrain|>` may
 * come between), the analysis and any preamble before it left free — vLLM likewise constrains only
 * gpt-oss's final message. Undefined where the grammar applies from the first token: a forced call
 * (its grammar writes the whole message) or a prompt that leaves the final message's body open.
 */
export function harmonyGrammarPrefix(start: HarmonyStart, grammar: OutputGrammar | undefined): FreePrefix | undefined {
  if (!grammar || grammar.kind === "tool_calls") return undefined;
  const final = HARMONY.channel + "final";
  if (start.at === "body" && start.header.includes(final)) return undefined;
  // A header the prompt left open in the final channel needs only its `<|message|>`.
  if (start.at === "header" && start.header.includes(final)) return { until: [HARMONY.message], then: "" };
  return { until: [final, HARMONY.message], then: "" };
}

/**
 * Tools as gpt-oss's template can render them: it writes `"// " + description` for each function and
 * fails on one without a description (valid in OpenAI's API, where harmony's own renderer leaves the
 * line out); such a function gets an empty one, an empty comment line.
 */
export function harmonyTools(tools: readonly ToolDef[] | undefined): ToolDef[] | undefined {
  if (!tools?.some((t) => typeof t.function?.description !== "string")) return tools as ToolDef[] | undefined;
  return tools.map((t) => (typeof t.function?.description === "string" ? t : { ...t, function: { ...t.function, description: "" } }));
}

/**
 * `messages` made fit for gpt-oss's chat template. Each assistant message's `reasoning_content` (or
 * vLLM's newer `reasoning`) is also given as `thinking`, the field the template reads an analysis
 * message from. The template writes a tool-call turn's analysis back into the next prompt (until a
 * final answer follows), so with it the prompt repeats the answer the model wrote and its KV is
 * reused; without it the prompt departs from the answer at its first token. A message that sets
 * `thinking` itself keeps it. A call turn with content keeps only its content: the template refuses
 * both (it writes content as the analysis).
 *
 * `tool_calls: null` or `[]` (what clients echo back from an answer without calls) is dropped: the
 * template tests the key, not its value, and would index a call that is not there (or take a final
 * answer for a call turn). The template writes only an assistant message's first call and names each
 * tool result after the last call written, so a message with several calls becomes one message per
 * call, each followed by the results that answer it (matched by `tool_call_id`), as harmony has
 * every call message followed by its result.
 */
export function harmonyMessages(messages: readonly ChatMessageIn[]): ChatMessageIn[] {
  const out: ChatMessageIn[] = [];
  for (let i = 0; i < messages.length; i++) {
    const m = withThinking(withoutEmptyCalls(messages[i]));
    const calls = callsOf(m);
    if (calls.length < 2) {
      out.push(m);
      continue;
    }
    // The results that follow this message; each goes after the call it answers.
    let end = i + 1;
    while (end < messages.length && messages[end].role === "tool") end++;
    const results = messages.slice(i + 1, end);
    const used = new Set<ChatMessageIn>();
    calls.forEach((call, k) => {
      const first: ChatMessageIn = { ...m, tool_calls: [call] };
      out.push(k === 0 ? first : { role: "assistant", content: null, tool_calls: [call] } as ChatMessageIn);
      const id = (call as { id?: unknown }).id;
      for (const r of results) {
        if (used.has(r) || id === undefined || id === null || (r as { tool_call_id?: unknown }).tool_call_id !== id) continue;
        out.push(r);
        used.add(r);
      }
    });
    // Results that answer no call by id keep their order, after the last call.
    out.push(...results.filter((r) => !used.has(r)));
    i = end - 1;
  }
  return out;
}

type Loose = ChatMessageIn & { thinking?: unknown; reasoning_content?: unknown; reasoning?: unknown; tool_calls?: unknown };

/** The tool calls of an assistant message (an empty list for any other). */
function callsOf(m: ChatMessageIn): unknown[] {
  const calls = (m as Loose).tool_calls;
  return m.role === "assistant" && Array.isArray(calls) ? calls : [];
}

/** `m` without a `tool_calls` key that holds no call. */
function withoutEmptyCalls(m: ChatMessageIn): ChatMessageIn {
  const r = m as Loose;
  if (r.role !== "assistant" || !("tool_calls" in r) || callsOf(m).length > 0) return m;
  const { tool_calls: _, ...rest } = r;
  return rest as ChatMessageIn;
}

/** `m` with its reasoning as `thinking` (see {@link harmonyMessages}). */
function withThinking(m: ChatMessageIn): ChatMessageIn {
  const r = m as Loose;
  if (r.role !== "assistant" || r.thinking !== undefined) return m;
  const reasoning = typeof r.reasoning_content === "string" ? r.reasoning_content : typeof r.reasoning === "string" ? r.reasoning : "";
  if (reasoning === "") return m;
  if (callsOf(m).length > 0 && messageText(r.content) !== "") return m;
  return { ...m, thinking: reasoning };
}

/**
 * The ids the engine types analysis messages' KV by: `<|channel|>`, `<|message|>`, `<|end|>` (and
 * `<|call|>`, `<|return|>`, `<|start|>` where present) as single tokens, and `analysis` as the
 * tokenizer encodes it; undefined when the vocabulary lacks the three tags (not gpt-oss's).
 */
export function harmonyReasoningTokens(tokenizer: Pick<Tokenizer, "encode" | "decode">): ReasoningTokens | undefined {
  const [start, message, end] = [HARMONY.channel, HARMONY.message, HARMONY.end].map((t) => singleTokenId(tokenizer, t));
  const analysis = tokenizer.encode("analysis", { addBos: false });
  if (start === undefined || message === undefined || end === undefined || tokenizer.decode(analysis) !== "analysis") return undefined;
  const alsoEnd = [HARMONY.call, HARMONY.return, HARMONY.start].flatMap((t) => singleTokenId(tokenizer, t) ?? []);
  return { start, end, harmony: { analysis, message, alsoEnd } };
}

/**
 * The reasoning tokens the engine tracks under `--reasoning-parser parser` (KV typing, reasoning
 * budgets): harmony's, or the tags' where each is one token; undefined otherwise (the server still
 * parses reasoning from the text).
 */
export function reasoningTokensOf(parser: ReasoningParserName, tokenizer: Pick<Tokenizer, "encode" | "decode">): ReasoningTokens | undefined {
  if (parser === "harmony") return harmonyReasoningTokens(tokenizer);
  const tags = reasoningTags(parser);
  return tags ? reasoningTokenIds(tokenizer, tags) : undefined;
}
