/**
 * Putting streamed chat answers together for the stream-parity tests (stream-parity*-hunt5.test.ts):
 * a request sent whole and streamed, and the stream's chunks assembled as the whole answer reads.
 */
import assert from "node:assert/strict";

type Json = Record<string, unknown>;

/** A streamed chat answer put together as the whole one reads. */
export function assembleChat(chunks: Json[]): Json {
  const choices: Json[] = [];
  let usage: unknown = null;
  for (const c of chunks) {
    if (c.usage) usage = c.usage;
    for (const ch of c.choices as Json[]) {
      const i = ch.index as number;
      const a = choices[i] ??= { index: i, message: { role: "assistant", content: "", reasoning_content: "", tool_calls: [] }, logprobs: null, finish_reason: null, stop_reason: null };
      const m = a.message as { content: string; reasoning_content: string; tool_calls: Json[] };
      const d = ch.delta as Json;
      m.content += (d.content as string | undefined) ?? "";
      m.reasoning_content += (d.reasoning_content as string | undefined) ?? "";
      for (const tc of (d.tool_calls as Json[] | undefined) ?? []) {
        const fn = tc.function as Json;
        const call = m.tool_calls[tc.index as number] ??= { id: tc.id, type: tc.type, function: { name: fn.name, arguments: "" } };
        (call.function as Json).arguments += (fn.arguments as string | undefined) ?? "";
      }
      const lp = ch.logprobs as { content: unknown[] } | null;
      if (lp) a.logprobs = a.logprobs ? { ...a.logprobs, content: [...(a.logprobs as { content: unknown[] }).content, ...lp.content] } : lp;
      if (ch.finish_reason) [a.finish_reason, a.stop_reason] = [ch.finish_reason, ch.stop_reason];
    }
  }
  return { choices: choices.map(tidy), usage };
}

/** Fields that say nothing in both forms: empty content, reasoning and calls. */
export function tidy(choice: Json): Json {
  const m = { ...(choice.message as Json) };
  for (const k of ["content", "reasoning_content"]) if (m[k] === "" || m[k] === null) delete m[k];
  if (Array.isArray(m.tool_calls) && m.tool_calls.length === 0) delete m.tool_calls;
  return { ...choice, message: m };
}

/** Sends `body` whole and streamed (after a warm-up) and returns both. */
export async function both(url: string, path: string, body: Json): Promise<{ whole: Json; chunks: Json[] }> {
  const post = (b: Json) => fetch(`${url}${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(b) });
  await (await post(body)).text();
  const res = await post(body);
  const whole = await res.json() as Json;
  assert.equal(res.status, 200, JSON.stringify(whole));
  const text = await (await post({ ...body, stream: true, stream_options: { include_usage: true } })).text();
  const chunks = text.split("\n\n").filter((b) => b.startsWith("data: ") && b !== "data: [DONE]").map((b) => JSON.parse(b.slice(6)) as Json);
  return { whole, chunks };
}

