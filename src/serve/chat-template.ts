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
import { IMAGE_MARKER } from "./prompt-images.ts";
import { NumberLiterals } from "./exact-arguments.ts";

/** The text of a message content (string, text parts, or nothing). */
export function messageText(content: ChatMessageIn["content"]): string {
  if (content === null || content === undefined) return "";
  if (typeof content === "string") return content;
  // Parts apart by a newline, as vLLM joins them for templates that take text; an image as its marker (prompt-images.ts).
  return content.map((p) => (p.type === "text" ? p.text : IMAGE_MARKER)).join("\n");
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

/** What stands for the final message's text in a second rendering that finds where the template writes it. */
const FINAL_MARK = "CONTINUE_FINAL_MESSAGE_MARK";

/**
 * The rendered `text` cut right after the final message's text. `marked` renders the conversation
 * with FINAL_MARK for that text: where the mark stands, the text stands, so a short text that also
 * occurs in what the template writes after it (">" or "im" in Qwen's `<|im_end|>`) is not mistaken
 * for it. A template that writes the text differently (trimmed) falls back to its last occurrence
 * (vLLM's rule); a 400 if it is nowhere.
 */
function openFinal(text: string, messages: readonly ChatMessageIn[], marked: (messages: ChatMessageIn[]) => string): string {
  const last = messageText(messages[messages.length - 1]?.content);
  let withMark = "";
  try {
    withMark = marked([...messages.slice(0, -1), { ...messages[messages.length - 1], content: FINAL_MARK }]);
  } catch {
    // A template that refuses the mark: the last occurrence decides.
  }
  const mark = withMark.lastIndexOf(FINAL_MARK);
  if (mark >= 0 && text.startsWith(withMark.slice(0, mark)) && text.startsWith(last, mark)) return text.slice(0, mark + last.length);
  const at = text.lastIndexOf(last);
  if (at < 0) {
    throw new ApiError(400, "The chat template does not write the final message's text as given, so the answer cannot continue it; send continue_final_message = false", "continue_final_message", "invalid_value");
  }
  return text.slice(0, at + last.length);
}

/** What @huggingface/jinja writes for an object joined to text. */
const OBJECT_TEXT = "[object Map]";

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
  // Most templates know no `developer` role and drop its message unseen; gpt-oss's reads it itself.
  const knowsDeveloper = template.includes("developer");
  const typedContent = takesTypedContent(compiled, special);
  return {
    fromModel: true,
    render(messages, tools, variables, turn = {}) {
      const exact = messages.some((m) => Array.isArray((m as { tool_calls?: unknown }).tool_calls)) &&
        NumberLiterals.usableFor(JSON.stringify([messages, tools ?? null, variables]));
      const run = (shape: MessageShape, list: readonly ChatMessageIn[] = messages) => {
        const literals = exact ? new NumberLiterals() : null;
        return (literals?.restore.bind(literals) ?? ((t: string) => t))(compiled.render({
          ...variables,
          messages: list.map((m) => templateMessage(m, knowsDeveloper, shape, literals, typedContent)),
          ...(tools && tools.length > 0 ? { tools } : {}),
          add_generation_prompt: !turn.continueFinal && turn.addGenerationPrompt !== false,
          bos_token: special.bos ?? "",
          eos_token: special.eos ?? "",
        }));
      };
      let shape: MessageShape = { parseArguments: true, nullContent: messages.some(callsWithoutContent) };
      let text: string;
      try {
        try {
          text = run(shape);
        } catch (e) {
          // A template that joins a call turn's content to text fails on null: it gets "", as vLLM gives it.
          if (!shape.nullContent) throw e;
          shape = { ...shape, nullContent: false };
          text = run(shape);
        }
        // DeepSeek-R1's and V3's templates join arguments to text (`'```json\n' + arguments`), where
        // an object becomes "[object Map]" (Python raises): they get the arguments as the client sent them.
        if (text.includes(OBJECT_TEXT) && !messages.some((m) => JSON.stringify(m).includes(OBJECT_TEXT))) {
          shape = { ...shape, parseArguments: false };
          text = run(shape);
        }
      } catch (e) {
        // Templates raise on conversations they do not support (e.g. roles out of order): the client's input.
        throw new ApiError(400, `The chat template rejected these messages: ${e instanceof Error ? e.message : String(e)}`, "messages", "invalid_messages");
      }
      if (turn.continueFinal) text = openFinal(text, messages, (list) => run(shape, list));
      return { text, startsWithBos: !!special.bos && text.startsWith(special.bos) };
    },
  };
}

/**
 * Whether a template reads a message's content only as OpenAI's list of parts (`for part in
 * message['content']`, `part['type'] == 'text'`), as SmolVLM's does: given a user message's text as a
 * string it throws (SmolVLM's: "Expected iterable ... got StringValue") or leaves the text out, and
 * given one text part it writes it (llama.cpp's probe, its "requires typed content"). Such a template
 * gets every content as one text part.
 */
function takesTypedContent(compiled: Template, special: { bos?: string; eos?: string }): boolean {
  const probe = "TYPED_CONTENT_PROBE_7c1e";
  const writes = (content: unknown) => {
    try {
      return compiled.render({ messages: [{ role: "user", content }], add_generation_prompt: false, bos_token: special.bos ?? "", eos_token: special.eos ?? "" }).includes(probe);
    } catch {
      return false;
    }
  };
  return !writes(probe) && writes([{ type: "text", text: probe }]);
}

/**
 * How messages are given to a template: `parseArguments`, tool calls' JSON-text arguments as
 * objects; `nullContent`, a call turn without content with content null, as Hugging Face's
 * apply_chat_template gives it (DeepSeek-R1's template writes a turn's calls only when its content
 * `is none`), else "" (vLLM's).
 */
interface MessageShape {
  parseArguments: boolean;
  nullContent: boolean;
}

/** True for an assistant message that calls tools and has no content. */
function callsWithoutContent(m: ChatMessageIn): boolean {
  const calls = (m as { tool_calls?: unknown }).tool_calls;
  return m.role === "assistant" && (m.content === null || m.content === undefined) && Array.isArray(calls) && calls.length > 0;
}

/**
 * A message as templates read it (vLLM's chat_utils prepares messages the same way): its content as
 * text (null for a call turn without content, by `shape`); a `developer` message as a system one
 * where the template knows no developer role (as llama.cpp does: such templates drop it unseen);
 * vLLM's newer `reasoning` field also as `reasoning_content`, which Qwen3's, GLM-4.5's and
 * DeepSeek's templates read, so the prompt repeats the reasoning the model wrote and its KV is
 * reused; and its tool calls as `shape` says.
 */
function templateMessage(m: ChatMessageIn, knowsDeveloper: boolean, shape: MessageShape, literals: NumberLiterals | null, typedContent: boolean): Record<string, unknown> {
  const text = shape.nullContent && callsWithoutContent(m) ? null : messageText(m.content);
  // A template that reads only OpenAI's parts (SmolVLM's) gets the text as one text part, image markers in it.
  const out: Record<string, unknown> = { ...m, content: typedContent && text !== null ? [{ type: "text", text }] : text };
  if (m.role === "developer" && !knowsDeveloper) out.role = "system";
  const reasoning = (m as { reasoning?: unknown }).reasoning;
  if (m.role === "assistant" && typeof reasoning === "string" && typeof out.reasoning_content !== "string") out.reasoning_content = reasoning;
  const calls = (m as { tool_calls?: unknown }).tool_calls;
  // An empty list is no calls (vLLM drops it): templates that test `'tool_calls' in message` would raise.
  if (Array.isArray(calls) && calls.length === 0) delete out.tool_calls;
  else if (Array.isArray(calls) && shape.parseArguments) out.tool_calls = calls.map((c) => toolCallForTemplate(c, literals));
  return out;
}

/**
 * A tool call with JSON-text arguments turned into an object, as templates expect
 * (`tool_call.arguments | tojson`); vLLM does the same, and takes empty or missing arguments as `{}`.
 * Arguments that are not JSON stay text. With `literals`, numbers keep the digits they were written with.
 */
function toolCallForTemplate(c: unknown, literals: NumberLiterals | null): unknown {
  const f = (c as { function?: { arguments?: unknown } } | null)?.function;
  if (f === null || typeof f !== "object") return c;
  const args = f.arguments;
  if (args === undefined || args === null || args === "") return { ...(c as object), function: { ...f, arguments: {} } };
  if (typeof args !== "string") return c;
  try {
    return { ...(c as object), function: { ...f, arguments: literals ? literals.parse(args) : JSON.parse(args) } };
  } catch {
    return c;
  }
}
