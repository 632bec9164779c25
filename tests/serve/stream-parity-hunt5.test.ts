/**
 * Streamed and whole answers carry the same thing, field by field (ids' shapes kept, timestamps left
 * out): the chat API (chunks assembled per choice: content, reasoning, tool calls, finish and stop
 * reasons, log probabilities, usage) and legacy completions, over plain text, a stop string, the
 * token limit, each tool-call format, parallel calls, reasoning, logprobs, n = 2 and a multi-byte
 * answer split across tokens. Each request is sent once before, so both forms find the prefix cached.
 */
import assert from "node:assert/strict";
import OpenAI from "openai";
import { test } from "../harness.ts";
import { assembleChat, both, tidy } from "./stream-parity-chat.ts";
import { FORMATS, scrub, type Setup, TOOLS, withServer } from "./stream-parity-model.ts";

type Json = Record<string, unknown>;
type ChatBody = Omit<OpenAI.ChatCompletionCreateParamsNonStreaming, "model" | "messages">;
const ask = (last: string): OpenAI.ChatCompletionMessageParam[] => [{ role: "user", content: `What now${last}` }];

/** Chat cases: name, server, the answer's picking character, the request's other fields. */
const CHAT: [string, Setup, string, ChatBody][] = [
  ["plain text", "hermes", ".", {}],
  ["stop string hit", "hermes", ".", { stop: ["there"] }],
  ["max_tokens hit", "hermes", ".", { max_tokens: 2 }],
  ["one hermes call", "hermes", "?", { tools: TOOLS }],
  ["two parallel hermes calls", "hermes", "!", { tools: TOOLS }],
  ["parallel_tool_calls false", "hermes", "!", { tools: TOOLS, parallel_tool_calls: false }],
  ["a call cut by max_tokens", "hermes", "!", { tools: TOOLS, max_tokens: 2 }],
  ["calls with logprobs", "hermes", "!", { tools: TOOLS, logprobs: true, top_logprobs: 2 }],
  ["llama3_json calls", "llama3_json", "#", { tools: TOOLS }],
  ["mistral call", "mistral", "@", { tools: TOOLS }],
  ["reasoning + answer", "reasoning", "?", {}],
  ["reasoning + tool calls", "reasoning", "?", { tools: TOOLS }],
  ["reasoning opened by the prompt", "reasoning", "^", { tools: TOOLS }],
  ["reasoning cut by max_tokens", "reasoning", "?", { max_tokens: 5 }],
  ["reasoning + calls with logprobs", "reasoning", "?", { tools: TOOLS, logprobs: true, top_logprobs: 2 }],
  ["text around a call with split tags", "hermes", "&", { tools: TOOLS }],
  ["text around a split call, logprobs", "hermes", "&", { tools: TOOLS, logprobs: true }],
  ["stop string inside a call", "hermes", "!", { tools: TOOLS, stop: ["Paris"] }],
  ["stop string inside a call, kept", "hermes", "!", { tools: TOOLS, stop: ["Paris"], include_stop_str_in_output: true } as ChatBody],
  ["stop string with logprobs", "hermes", ".", { stop: ["ther"], logprobs: true, top_logprobs: 1 }],
  ["stop string kept", "hermes", ".", { stop: ["friend"], include_stop_str_in_output: true } as ChatBody],
  ["text then a mistral call", "mistral", "$", { tools: TOOLS }],
  ["python_tag then llama3_json calls", "llama3_json", "=", { tools: TOOLS }],
  ["split reasoning tags", "think", "*", { tools: TOOLS }],
  ["split reasoning tags cut by max_tokens", "think", "*", { max_tokens: 3 }],
  ["reasoning then a call", "think", "~", { tools: TOOLS, logprobs: true }],
  ["reasoning then a call, n = 2", "think", "~", { tools: TOOLS, n: 2 }],
  ["stop string inside reasoning", "think", "*", { stop: ["Plan"] }],
  ["tool_choice required", "hermes", ".", { tools: TOOLS, tool_choice: "required", max_tokens: 40 }],
  ["tool_choice named", "llama3_json", ".", { tools: TOOLS, tool_choice: { type: "function", function: { name: "get_time" } }, max_tokens: 40 }],
  ["response_format beside tools", "hermes", "&", { tools: TOOLS, response_format: { type: "json_schema", json_schema: { name: "a", schema: { type: "object", properties: { x: { type: "integer" } }, required: ["x"] } } }, max_tokens: 40 }],
  ["echo", "hermes", "?", { tools: TOOLS, echo: true } as ChatBody],
  ["logprobs with top_logprobs", "hermes", ".", { logprobs: true, top_logprobs: 3 }],
  ["n = 2, seeded", "hermes", ".", { n: 2, temperature: 1, seed: 7, logprobs: true, top_logprobs: 1 }],
  ["n = 2 with calls", "hermes", "!", { n: 2, tools: TOOLS }],
  ["multi-byte split across tokens", "hermes", "%", { logprobs: true, top_logprobs: 2 }],
  ["multi-byte cut mid-character", "hermes", "%", { max_tokens: 2, logprobs: true }],
  ["stop string on a split character", "hermes", "%", { stop: ["é"], logprobs: true }],
  ["stop string on a split emoji, kept", "hermes", "%", { stop: ["😀"], include_stop_str_in_output: true, logprobs: true } as ChatBody],
  ...FORMATS.map(([f, last]): [string, Setup, string, ChatBody] => [`${f} calls`, f, last, { tools: TOOLS }]),
];

/** Runs each case of `cases` on its server; returns the ones whose forms differ. */
async function mismatches<C extends [string, Setup, ...unknown[]]>(cases: C[], run: (url: string, model: string, c: C) => Promise<[unknown, unknown]>): Promise<string[]> {
  const found: string[] = [];
  for (const setup of new Set(cases.map((c) => c[1]))) {
    await withServer(setup, async (url, model) => {
      for (const c of cases.filter((x) => x[1] === setup)) {
        const [whole, streamed] = await run(url, model, c);
        try {
          assert.deepEqual(scrub(streamed), scrub(whole));
        } catch (e) {
          found.push(`${c[0]}: ${(e as Error).message}`);
        }
      }
    });
  }
  return found;
}

test("chat completions: the streamed chunks, assembled, are the whole answer in every case", async () => {
  const found = await mismatches(CHAT, async (url, model, [, , last, extra]) => {
    const { whole, chunks } = await both(url, "/v1/chat/completions", { model, messages: ask(last), temperature: 0, max_tokens: 64, ...extra });
    return [{ choices: (whole.choices as Json[]).map(tidy), usage: whole.usage }, assembleChat(chunks)];
  });
  assert.deepEqual(found, []);
});

/** Completions cases: name, the prompt's last character, the request's other fields. */
const COMPLETIONS: [string, Setup, string, Json][] = [
  ["plain text", "hermes", ".", {}],
  ["stop string hit", "hermes", ".", { stop: ["there"] }],
  ["max_tokens hit", "hermes", ".", { max_tokens: 2 }],
  ["logprobs", "hermes", ".", { logprobs: 3 }],
  ["echo with logprobs", "hermes", ".", { logprobs: 2, echo: true }],
  ["n = 2, seeded", "hermes", ".", { n: 2, temperature: 1, seed: 7, logprobs: 1 }],
  ["two prompts", "hermes", ".", { prompt: ["user: a.\nassistant.", "user: b.\nassistant%"], logprobs: 1 }],
  ["multi-byte split across tokens", "hermes", "%", { logprobs: 2 }],
  ["multi-byte cut mid-character", "hermes", "%", { max_tokens: 2, logprobs: 1 }],
];

/** A streamed completion put together as the whole one reads. */
function assembleCompletion(chunks: Json[]): Json {
  const choices: Json[] = [];
  let usage: unknown = null;
  for (const c of chunks) {
    if (c.usage) usage = c.usage;
    for (const ch of c.choices as Json[]) {
      const a = choices[ch.index as number] ??= { index: ch.index, text: "", logprobs: null, finish_reason: null, stop_reason: null };
      a.text += ch.text as string;
      const lp = ch.logprobs as Record<string, unknown[]> | null;
      if (lp) {
        const prev = a.logprobs as Record<string, unknown[]> | null;
        a.logprobs = prev ? Object.fromEntries(Object.keys(lp).map((k) => [k, [...prev[k], ...lp[k]]])) : lp;
      }
      if (ch.finish_reason) [a.finish_reason, a.stop_reason] = [ch.finish_reason, ch.stop_reason];
    }
  }
  return { choices, usage };
}

test("completions: the streamed chunks, assembled, are the whole answer in every case", async () => {
  const found = await mismatches(COMPLETIONS, async (url, model, [, , last, extra]) => {
    const { whole, chunks } = await both(url, "/v1/completions", { model, prompt: `user: What now${last}\nassistant${last}`, temperature: 0, max_tokens: 64, ...extra });
    return [{ choices: whole.choices, usage: whole.usage }, assembleCompletion(chunks)];
  });
  assert.deepEqual(found, []);
});
