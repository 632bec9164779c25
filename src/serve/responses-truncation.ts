/**
 * `truncation: "auto"` for the Responses API: a turn whose prompt is longer than the context has
 * its oldest items dropped, as few as make it fit, as OpenAI drops items from the beginning (or
 * middle) of the conversation. The instructions (leading system and developer messages) always stay.
 */
import { ApiError } from "./errors.ts";
import { chatPrompt, type ServeContext } from "./openai.ts";
import type { ChatMessageIn, ChatRequest } from "./schemas.ts";

/**
 * The ways to shorten `messages`, dropping more with each: whole exchanges first (an exchange runs
 * from a user message to the next), then, within the last exchange, its oldest model steps (an
 * assistant message and the tool outputs that answer it), keeping the user messages that open it.
 * An agent's loop is one exchange of many steps, so its oldest tool calls go and its task stays;
 * a tool output never loses its call. The last exchange's opening and last step always stay.
 */
function cuts(messages: readonly ChatMessageIn[]): ChatMessageIn[][] {
  let lead = 0;
  while (lead < messages.length && (messages[lead].role === "system" || messages[lead].role === "developer")) lead++;
  const instructions = messages.slice(0, lead);
  const starts = messages.flatMap((m, i) => (i === lead || (i > lead && m.role === "user") ? [i] : []));
  const out = starts.map((s) => [...instructions, ...messages.slice(s)]);
  const last = starts[starts.length - 1] ?? lead;
  let opened = last;
  while (opened < messages.length && messages[opened].role !== "assistant") opened++;
  const opening = messages.slice(last, opened);
  for (let i = opened + 1; i < messages.length; i++) {
    if (messages[i].role === "assistant" && messages[i - 1].role === "tool") out.push([...instructions, ...opening, ...messages.slice(i)]);
  }
  return out.length > 0 ? out : [[...messages]];
}

/**
 * `chat` with its oldest items dropped ({@link cuts}), as few as make the prompt and the output
 * budget (`max_completion_tokens`, else one token) fit the context; the shortest cut when none fits,
 * so that a turn too long on its own is still refused. Searched by halving, as dropping more never
 * lengthens the prompt.
 */
export function truncated(ctx: ServeContext, chat: ChatRequest): ChatRequest {
  const options = cuts(chat.messages);
  const from = (k: number): ChatRequest => ({ ...chat, messages: options[k] });
  const budget = chat.max_completion_tokens ?? 1;
  const fits = (k: number): boolean => {
    try {
      return chatPrompt(ctx, from(k)).prompt.length + budget <= ctx.engine.maxModelLen;
    } catch (e) {
      if (e instanceof ApiError && e.code === "context_length_exceeded") return false;
      throw e;
    }
  };
  let lo = 1;
  let hi = options.length - 1;
  if (hi < lo || !fits(hi)) return from(Math.max(hi, 0));
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (fits(mid)) hi = mid;
    else lo = mid + 1;
  }
  return from(lo);
}
