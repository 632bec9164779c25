/**
 * Renders chat messages into a prompt: the model's own Jinja chat template (GGUF
 * tokenizer.chat_template or tokenizer_config.json) through @huggingface/jinja, or, for a model
 * without one, a plain fallback that joins the message texts with newlines. With the fallback, turn
 * N+1's prompt extends turn N's prompt, but not its answer: the newline before the answer is not in
 * the prompt the answer was generated after, so the answer's KV is not reused (measured in
 * scripts/sim-validate.ts).
 */
import { Template } from "@huggingface/jinja";
import type { LoadedModel } from "../model/config.ts";
import type { ChatMessageIn, ToolDef } from "./schemas.ts";
import { ApiError } from "./errors.ts";

/** The text of a message content (string, text parts, or nothing). */
export function messageText(content: ChatMessageIn["content"]): string {
  if (content === null || content === undefined) return "";
  if (typeof content === "string") return content;
  // Parts apart by a newline, as vLLM joins them for templates that take text.
  return content.map((p) => p.text).join("\n");
}

/** A chat renderer for one model. */
export interface ChatRenderer {
  /** True when the model ships its own template. */
  readonly fromModel: boolean;
  /**
   * The prompt text; `startsWithBos` says whether the template already put BOS in it. `tools` go to
   * the template as its `tools` variable (Qwen/Hermes-style templates list them in the system turn);
   * `variables` are more of the template's variables (a request's `chat_template_kwargs`), under
   * the ones the renderer sets.
   */
  render(
    messages: readonly ChatMessageIn[],
    tools?: readonly ToolDef[],
    variables?: Readonly<Record<string, unknown>>,
    turn?: TurnOptions,
  ): { text: string; startsWithBos: boolean };
}

/**
 * How the prompt ends (vLLM's chat parameters): with the generation prompt that opens the
 * assistant's turn (the default), without it, or inside the final message, which the answer then
 * continues (a prefilled answer: `continueFinal`, rendered without the generation prompt and cut
 * right after the final message's text, as vLLM's `continue_final_message` does).
 */
export interface TurnOptions {
  addGenerationPrompt?: boolean;
  continueFinal?: boolean;
}

/** The rendered `text` cut right after the last occurrence of the final message's text (a 400 if the template did not write it as given). */
function openFinal(text: string, messages: readonly ChatMessageIn[]): string {
  const last = messageText(messages[messages.length - 1]?.content);
  const at = text.lastIndexOf(last);
  if (at < 0) {
    throw new ApiError(400, "The chat template does not write the final message's text as given, so the answer cannot continue it; send continue_final_message = false", "continue_final_message", "invalid_value");
  }
  return text.slice(0, at + last.length);
}

/** The renderer the server uses for `model`: its template, with its BOS and EOS texts. */
export function modelChatRenderer(model: LoadedModel): ChatRenderer {
  const tok = model.tokenizer;
  const special = (id: number | undefined) => (id === undefined || !tok.tokenText ? undefined : tok.tokenText(id));
  return chatRenderer(model.chatTemplate, { bos: special(model.config.bosTokenId), eos: special(model.config.eosTokenIds[0]) });
}

/** Builds the renderer; a template that does not parse fails here, at start-up, not per request. */
export function chatRenderer(template: string | undefined, special: { bos?: string; eos?: string }): ChatRenderer {
  if (!template) {
    return {
      fromModel: false,
      render(messages, tools) {
        if (tools && tools.length > 0) {
          throw new ApiError(400, "This model has no chat template, so it cannot be told about tools; send the request without `tools`", "tools", "unsupported_parameter");
        }
        // The joined texts end with the final message's: it is open either way.
        return { text: messages.map((m) => messageText(m.content)).join("\n"), startsWithBos: false };
      },
    };
  }
  const compiled = new Template(template);
  return {
    fromModel: true,
    render(messages, tools, variables, turn = {}) {
      let text: string;
      try {
        text = compiled.render({
          ...variables,
          messages: messages.map((m) => ({ ...m, content: messageText(m.content), ...toolCallsForTemplate(m) })),
          ...(tools && tools.length > 0 ? { tools } : {}),
          add_generation_prompt: !turn.continueFinal && turn.addGenerationPrompt !== false,
          bos_token: special.bos ?? "",
          eos_token: special.eos ?? "",
        });
      } catch (e) {
        // Templates raise on conversations they do not support (e.g. roles out of order): the client's input.
        throw new ApiError(400, `The chat template rejected these messages: ${e instanceof Error ? e.message : String(e)}`, "messages", "invalid_messages");
      }
      if (turn.continueFinal) text = openFinal(text, messages);
      return { text, startsWithBos: !!special.bos && text.startsWith(special.bos) };
    },
  };
}

/**
 * An assistant message's `tool_calls` with JSON-text arguments turned into objects, as templates
 * expect (`tool_call.arguments | tojson`); vLLM does the same. Arguments that are not JSON stay text.
 */
function toolCallsForTemplate(m: ChatMessageIn): { tool_calls?: unknown[] } {
  const calls = (m as { tool_calls?: unknown }).tool_calls;
  if (!Array.isArray(calls)) return {};
  return {
    tool_calls: calls.map((c) => {
      const f = (c as { function?: { arguments?: unknown } } | null)?.function;
      if (typeof f?.arguments !== "string") return c;
      try {
        return { ...c, function: { ...f, arguments: JSON.parse(f.arguments) } };
      } catch {
        return c;
      }
    }),
  };
}
