/**
 * Streamed and whole answers carry the same thing, field by field (ids' shapes kept, timestamps left
 * out), for the APIs whose streams are named events: the Responses API (`responses.stream(...)`'s
 * final response, and the output items rebuilt from the deltas alone, against `responses.create`)
 * and Anthropic Messages (`messages.stream(...).finalMessage()` against `messages.create`), over
 * plain text, a stop sequence, the token limit, each tool-call format, parallel calls, reasoning,
 * logprobs and a multi-byte answer split across tokens.
 */
import assert from "node:assert/strict";
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { test } from "../harness.ts";
import { FORMATS, scrub, type Setup, TOOLS, withServer } from "./stream-parity-model.ts";

type Json = Record<string, unknown>;

/** Runs each case on its server; returns the ones whose forms differ. */
async function mismatches<C extends [string, Setup, ...unknown[]]>(cases: C[], run: (url: string, model: string, c: C) => Promise<[unknown, unknown][]>): Promise<string[]> {
  const found: string[] = [];
  for (const setup of new Set(cases.map((c) => c[1]))) {
    await withServer(setup, async (url, model) => {
      for (const c of cases.filter((x) => x[1] === setup)) {
        for (const [whole, streamed] of await run(url, model, c)) {
          try {
            assert.deepEqual(scrub(streamed), scrub(whole));
          } catch (e) {
            found.push(`${c[0]}: ${(e as Error).message}`);
          }
        }
      }
    });
  }
  return found;
}

type ResponsesBody = Omit<OpenAI.Responses.ResponseCreateParamsNonStreaming, "model" | "input" | "stream">;
const FUNCTIONS: OpenAI.Responses.FunctionTool[] = TOOLS.map((t) => ({ type: "function", name: t.function.name, parameters: t.function.parameters ?? null, strict: false }));
const LOGPROBS: ResponsesBody = { include: ["message.output_text.logprobs"], top_logprobs: 2 };

const RESPONSES: [string, Setup, string, ResponsesBody][] = [
  ["plain text", "hermes", ".", {}],
  ["max_output_tokens hit", "hermes", ".", { max_output_tokens: 2 }],
  ["one hermes call", "hermes", "?", { tools: FUNCTIONS }],
  ["two parallel hermes calls", "hermes", "!", { tools: FUNCTIONS }],
  ["parallel_tool_calls false", "hermes", "!", { tools: FUNCTIONS, parallel_tool_calls: false }],
  ["a call cut by max_output_tokens", "hermes", "!", { tools: FUNCTIONS, max_output_tokens: 2 }],
  ["llama3_json calls", "llama3_json", "#", { tools: FUNCTIONS }],
  ["mistral call", "mistral", "@", { tools: FUNCTIONS }],
  ["reasoning + answer", "reasoning", "?", LOGPROBS],
  ["reasoning + tool calls", "reasoning", "?", { tools: FUNCTIONS, ...LOGPROBS }],
  ["reasoning opened by the prompt", "reasoning", "^", { tools: FUNCTIONS }],
  ["reasoning cut by max_output_tokens", "reasoning", "?", { max_output_tokens: 5 }],
  ["text around a call with split tags", "hermes", "&", { tools: FUNCTIONS, ...LOGPROBS }],
  ["max_tool_calls 1", "hermes", "!", { tools: FUNCTIONS, max_tool_calls: 1 }],
  ["text then a mistral call", "mistral", "$", { tools: FUNCTIONS }],
  ["python_tag then llama3_json calls", "llama3_json", "=", { tools: FUNCTIONS }],
  ["split reasoning tags", "think", "*", LOGPROBS],
  ["reasoning then a call", "think", "~", { tools: FUNCTIONS, ...LOGPROBS }],
  ["logprobs with top_logprobs", "hermes", ".", LOGPROBS],
  ["multi-byte split across tokens", "hermes", "%", LOGPROBS],
  ["multi-byte cut mid-character", "hermes", "%", { max_output_tokens: 2, ...LOGPROBS }],
  ...FORMATS.map(([f, last]): [string, Setup, string, ResponsesBody] => [`${f} calls`, f, last, { tools: FUNCTIONS }]),
];

/** The output items rebuilt from a stream's events alone: each added item, its deltas, its final status. */
function itemsFromDeltas(events: Json[]): Json[] {
  const items: Json[] = [];
  for (const e of events) {
    const i = e.output_index as number;
    if (e.type === "response.output_item.added") items[i] = structuredClone(e.item as Json);
    else if (e.type === "response.content_part.added") ((items[i].content ??= []) as Json[])[e.content_index as number] = structuredClone(e.part as Json);
    else if (e.type === "response.output_text.delta" || e.type === "response.reasoning_text.delta") {
      const part = (items[i].content as Json[])[e.content_index as number];
      part.text += e.delta as string;
      if (e.type === "response.output_text.delta") part.logprobs = [...(part.logprobs as Json[]), ...(e.logprobs as Json[])];
    } else if (e.type === "response.function_call_arguments.delta") items[i].arguments += e.delta as string;
    else if (e.type === "response.output_item.done" && "status" in (e.item as Json)) items[i].status = (e.item as Json).status;
  }
  return items;
}

/** A value without the fields the SDKs' stream helpers add themselves (`parsed`, `output_parsed`, …) or leave undefined: none are on the wire. */
function unparsed(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(unparsed);
  if (v === null || typeof v !== "object") return v;
  return Object.fromEntries(Object.entries(v).filter(([k, x]) => !["parsed", "output_parsed", "parsed_arguments", "parsed_output"].includes(k) && x !== undefined).map(([k, x]) => [k, unparsed(x)]));
}

test("responses: responses.stream()'s final response, and the items its deltas build, are responses.create()'s", async () => {
  const found = await mismatches(RESPONSES, async (url, model, [, , last, extra]) => {
    const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: "none", maxRetries: 0 });
    const body = { model, input: `What now${last}`, temperature: 0, max_output_tokens: 64, store: false, ...extra };
    await client.responses.create(body);
    const whole = await client.responses.create(body);
    const stream = client.responses.stream(body);
    const events: Json[] = [];
    stream.on("event", (e) => events.push(e as unknown as Json));
    const streamed = await stream.finalResponse();
    return [[whole, unparsed(streamed)], [whole.output, itemsFromDeltas(events)]];
  });
  assert.deepEqual(found, []);
});

type MessagesBody = Omit<Anthropic.MessageCreateParamsNonStreaming, "model" | "messages" | "max_tokens"> & { max_tokens?: number };
const ANTHROPIC_TOOLS: Anthropic.Tool[] = TOOLS.map((t) => ({ name: t.function.name, input_schema: t.function.parameters as Anthropic.Tool.InputSchema }));

const MESSAGES: [string, Setup, string, MessagesBody][] = [
  ["plain text", "hermes", ".", {}],
  ["stop sequence hit", "hermes", ".", { stop_sequences: ["there"] }],
  ["max_tokens hit", "hermes", ".", { max_tokens: 2 }],
  ["one hermes call", "hermes", "?", { tools: ANTHROPIC_TOOLS }],
  ["two parallel hermes calls", "hermes", "!", { tools: ANTHROPIC_TOOLS }],
  ["disable_parallel_tool_use", "hermes", "!", { tools: ANTHROPIC_TOOLS, tool_choice: { type: "auto", disable_parallel_tool_use: true } }],
  ["a call cut by max_tokens", "hermes", "!", { tools: ANTHROPIC_TOOLS, max_tokens: 2 }],
  ["llama3_json calls", "llama3_json", "#", { tools: ANTHROPIC_TOOLS }],
  ["mistral call", "mistral", "@", { tools: ANTHROPIC_TOOLS }],
  ["reasoning + answer", "reasoning", "?", {}],
  ["reasoning + tool calls", "reasoning", "?", { tools: ANTHROPIC_TOOLS }],
  ["reasoning opened by the prompt", "reasoning", "^", { tools: ANTHROPIC_TOOLS }],
  ["reasoning cut by max_tokens", "reasoning", "?", { max_tokens: 5 }],
  ["text around a call with split tags", "hermes", "&", { tools: ANTHROPIC_TOOLS }],
  ["stop sequence inside a call", "hermes", "!", { tools: ANTHROPIC_TOOLS, stop_sequences: ["Paris"] }],
  ["text then a mistral call", "mistral", "$", { tools: ANTHROPIC_TOOLS }],
  ["python_tag then llama3_json calls", "llama3_json", "=", { tools: ANTHROPIC_TOOLS }],
  ["split reasoning tags", "think", "*", { thinking: { type: "enabled", budget_tokens: 1024 }, max_tokens: 1025 }],
  ["reasoning then a call", "think", "~", { tools: ANTHROPIC_TOOLS }],
  ["stop sequence inside reasoning", "think", "*", { stop_sequences: ["Plan"] }],
  ["multi-byte split across tokens", "hermes", "%", {}],
  ["multi-byte cut mid-character", "hermes", "%", { max_tokens: 2 }],
  ...FORMATS.map(([f, last]): [string, Setup, string, MessagesBody] => [`${f} calls`, f, last, { tools: ANTHROPIC_TOOLS }]),
];

test("messages: messages.stream().finalMessage() is messages.create()'s message", async () => {
  const found = await mismatches(MESSAGES, async (url, model, [, , last, extra]) => {
    const client = new Anthropic({ baseURL: url, apiKey: "none", maxRetries: 0 });
    const body = { model, max_tokens: 64, temperature: 0, messages: [{ role: "user" as const, content: `What now${last}` }], ...extra };
    await client.messages.create(body);
    const whole = await client.messages.create(body);
    const streamed = await client.messages.stream(body).finalMessage();
    return [[unparsed(whole), unparsed(streamed)]];
  });
  assert.deepEqual(found, []);
});
