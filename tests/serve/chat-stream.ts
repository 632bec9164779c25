/** Reading a streamed chat completion (the `openai` client's chunks) in the serve tests. */
import type OpenAI from "openai";

/** A streamed chat answer's content, its tool calls (name and parsed arguments) and its finish reason. */
export async function readChatStream(stream: AsyncIterable<OpenAI.ChatCompletionChunk>): Promise<{ content: string; finish: string | null; calls: [string | undefined, unknown][] }> {
  let content = "";
  let finish: string | null = null;
  const calls: { name?: string; arguments: string }[] = [];
  for await (const c of stream) {
    const d = c.choices[0]?.delta;
    content += d?.content ?? "";
    for (const tc of d?.tool_calls ?? []) {
      calls[tc.index] ??= { arguments: "" };
      if (tc.function?.name) calls[tc.index].name = tc.function.name;
      calls[tc.index].arguments += tc.function?.arguments ?? "";
    }
    finish = c.choices[0]?.finish_reason ?? finish;
  }
  return { content, finish, calls: calls.map((c) => [c.name, JSON.parse(c.arguments)]) };
}
