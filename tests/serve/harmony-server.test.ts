/**
 * gpt-oss's harmony format end to end (`serve --reasoning-parser harmony --tool-call-parser harmony`):
 * the real `openai` client against a real server, serving scripted models whose harmony tags are
 * control tokens (as in o200k_harmony) and whose prompts come from gpt-oss's own chat template. The
 * analysis channel comes back as reasoning_content and the final one as content, whole and streamed,
 * whatever skip_special_tokens says, with the engine counting the analysis tokens; a call comes back
 * as tool_calls, the next turn's prompt repeats the answer and finds its KV cached; a forced call is
 * written in harmony and read back.
 *
 * The models are bigram (tests/model/scripted-model.ts), so no token may appear twice in an answer:
 * each later message's header after `<|start|>` is one token of its own (a user-defined token whose
 * text holds the tags, which the tokenizer also finds in a prompt). The first message's header is the
 * real tokens, which the engine's reasoning tracking reads.
 */
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import OpenAI from "openai";
import { loadModel } from "../../src/model/load.ts";
import type { LoadedModel } from "../../src/model/config.ts";
import { startServer } from "../../src/serve/server.ts";
import { test } from "../harness.ts";
import { writeScriptedModel } from "../model/scripted-model.ts";

const TEMPLATE = readFileSync(new URL("./fixtures/gpt-oss-chat-template.jinja", import.meta.url), "utf8");
const TAGS = ["<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>", "<|call|>", "<|return|>"];
const dir = mkdtempSync(`${tmpdir()}/harmony-server-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));

/** A scripted gpt-oss-like model whose greedy answer to any chat is `answer` (pieces, one token each). */
async function harmonyModel(name: string, answer: string[]): Promise<{ path: string; model: LoadedModel }> {
  const path = `${dir}/${name}.gguf`;
  // The template's generation prompt ends with "assistant", a token here, so it picks the answer.
  const chain = ["assistant", ...answer, "<eos>"];
  await writeScriptedModel(path, {
    pieces: [...TAGS, "assistant", "analysis", ...answer.filter((p) => !TAGS.includes(p))],
    literalPieces: true, controlPieces: TAGS, chatTemplate: TEMPLATE, contextLength: 4096,
    next: chain.slice(1).map((to, i): [string, string] => [chain[i], to]),
  });
  return { path, model: await loadModel(path) };
}

async function withServer(m: { path: string; model: LoadedModel }, fn: (client: OpenAI) => Promise<void>) {
  const s = await startServer({ modelPath: m.path, model: m.model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 256, reasoningParser: "harmony", toolCallParser: "harmony" });
  try {
    assert.ok(s.reasoningTokens?.harmony, "the engine tracks analysis messages by their tokens");
    await fn(new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 }));
  } finally {
    await s.shutdown();
  }
}

type Extra = Record<string, unknown>;
type Delta = { content?: string | null; reasoning_content?: string; tool_calls?: OpenAI.ChatCompletionChunk.Choice.Delta.ToolCall[] };
const THOUGHTS = [" Tokyo is in Japan.", " It is summer."];
const FINAL = ["<|channel|>", "analysis", "<|message|>", ...THOUGHTS, "<|end|>", "<|start|>", "assistant<|channel|>final<|message|>", "Sunny, 28 °C."];

test("chat completions with --reasoning-parser harmony: analysis as reasoning_content, final as content, whole and streamed, control tokens skipped or not", async () => {
  await withServer(await harmonyModel("final", FINAL), async (client) => {
    const body = { model: "final", messages: [{ role: "user" as const, content: "Weather in Tokyo?" }], temperature: 0, max_tokens: 32 };
    for (const skip of [undefined, true, false]) {
      const r = await client.chat.completions.create({ ...body, ...(skip === undefined ? {} : { skip_special_tokens: skip }) } as OpenAI.ChatCompletionCreateParamsNonStreaming & Extra);
      assert.deepEqual(r.choices[0].message, { role: "assistant", content: "Sunny, 28 °C.", reasoning_content: THOUGHTS.join("") }, `skip_special_tokens ${skip}`);
      assert.equal(r.choices[0].finish_reason, "stop");
      assert.equal(r.usage?.completion_tokens_details?.reasoning_tokens, 3 + THOUGHTS.length + 1, "the analysis header, its body and its <|end|>");
    }
    let reasoning = "";
    let content = "";
    const deltas: Delta[] = [];
    for await (const c of await client.chat.completions.create({ ...body, stream: true, skip_special_tokens: true } as OpenAI.ChatCompletionCreateParamsStreaming & Extra)) {
      const d = c.choices[0]?.delta as Delta | undefined;
      if (d) deltas.push(d);
      reasoning += d?.reasoning_content ?? "";
      content += d?.content ?? "";
    }
    assert.deepEqual([reasoning, content], [THOUGHTS.join(""), "Sunny, 28 °C."]);
    assert.equal(deltas.filter((d) => d.reasoning_content).length, THOUGHTS.length, "each thought streams as it comes");
    // Cut by max_tokens inside the analysis: what came is reasoning, there is no content.
    const cut = await client.chat.completions.create({ ...body, max_tokens: 4 });
    assert.deepEqual([cut.choices[0].message.content, (cut.choices[0].message as { reasoning_content?: string }).reasoning_content, cut.choices[0].finish_reason], [null, THOUGHTS[0], "length"]);
  });
});

test("chat completions with --reasoning-parser harmony keep thinking_token_budget: <|end|> forced after the budget's analysis tokens, then the final message", async () => {
  await withServer(await harmonyModel("budget", FINAL), async (client) => {
    const body = { model: "budget", messages: [{ role: "user" as const, content: "Weather in Tokyo?" }], temperature: 0, max_tokens: 32, thinking_token_budget: 1 };
    const r = await client.chat.completions.create(body as OpenAI.ChatCompletionCreateParamsNonStreaming & Extra);
    assert.deepEqual(r.choices[0].message, { role: "assistant", content: "Sunny, 28 °C.", reasoning_content: THOUGHTS[0] });
    assert.equal(r.usage?.completion_tokens_details?.reasoning_tokens, 3 + 1 + 1, "the header, one thought and the forced <|end|>");
  });
});

const WEATHER: OpenAI.ChatCompletionTool = {
  type: "function",
  function: { name: "get_weather", description: "Current weather", parameters: { type: "object", properties: { location: { type: "string", description: "A city" } }, required: ["location"] } },
};
const SET_UNIT: OpenAI.ChatCompletionTool = {
  type: "function",
  function: { name: "set_unit", description: "Set the unit", parameters: { type: "object", properties: { unit: { enum: ["c", "f"] }, days: { type: "integer", maximum: 9 } }, required: ["unit", "days"] } },
};
/** Reasoning long enough that the answer fills a KV block of its own (16 tokens) whatever the prompt's length. */
const STEPS = Array.from({ length: 12 }, (_, i) => ` Step ${i}.`);
const CALL = ["<|channel|>", "analysis", "<|message|>", ...STEPS, "<|end|>", "<|start|>", "assistant to=functions.get_weather<|channel|>commentary json<|message|>", '{"location": "Tokyo"}'];

test("chat completions with --tool-call-parser harmony: the call comes back, and the next turn's prompt repeats it and finds its KV", async () => {
  await withServer(await harmonyModel("call", CALL), async (client) => {
    const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: "user", content: "Weather in Tokyo?" }];
    const r = await client.chat.completions.create({ model: "call", messages, tools: [WEATHER], temperature: 0, max_tokens: 32 });
    const msg = r.choices[0].message as OpenAI.ChatCompletionMessage & { reasoning_content?: string };
    assert.equal(r.choices[0].finish_reason, "tool_calls");
    assert.deepEqual([msg.content, msg.reasoning_content], [null, STEPS.join("")]);
    const call = msg.tool_calls![0] as OpenAI.ChatCompletionMessageFunctionToolCall;
    assert.deepEqual([call.function.name, JSON.parse(call.function.arguments)], ["get_weather", { location: "Tokyo" }]);

    // The client sends the message back as it got it; the template writes its analysis and call as the model did.
    const turn2 = [...messages, msg, { role: "tool", tool_call_id: call.id, content: "28 C" }] as OpenAI.ChatCompletionMessageParam[];
    const r2 = await client.chat.completions.create({ model: "call", messages: turn2, tools: [WEATHER], temperature: 0, max_tokens: 32 });
    const answered = r.usage!.prompt_tokens + CALL.length;
    assert.ok(r2.usage!.prompt_tokens > answered);
    assert.ok(r2.usage!.prompt_tokens_details!.cached_tokens! >= Math.floor(answered / 16) * 16, `cached ${r2.usage!.prompt_tokens_details!.cached_tokens} of turn 1's ${answered} prompt and answer tokens`);

    const stream = await client.chat.completions.create({ model: "call", messages, tools: [WEATHER], temperature: 0, max_tokens: 32, stream: true });
    const calls: OpenAI.ChatCompletionChunk.Choice.Delta.ToolCall[] = [];
    let reasoning = "";
    let finish: string | null = null;
    for await (const c of stream) {
      const d = c.choices[0]?.delta as Delta | undefined;
      reasoning += d?.reasoning_content ?? "";
      calls.push(...(d?.tool_calls ?? []));
      finish = c.choices[0]?.finish_reason ?? finish;
    }
    assert.deepEqual([reasoning, calls.length, calls[0].function?.name, calls[0].function?.arguments, finish], [STEPS.join(""), 1, "get_weather", '{"location": "Tokyo"}', "tool_calls"]);

    // Without tools the call is not read: it comes back as written, tags and all.
    const plain = await client.chat.completions.create({ model: "call", messages, temperature: 0, max_tokens: 32 });
    assert.equal(plain.choices[0].message.content, CALL.slice(-3).join(""));
  });
});

test("POST /v1/responses with harmony: reasoning and function_call items, and previous_response_id's turn finds the first turn's KV", async () => {
  await withServer(await harmonyModel("call", CALL), async (client) => {
    const tool: OpenAI.Responses.FunctionTool = { type: "function", name: "get_weather", description: WEATHER.function.description!, parameters: WEATHER.function.parameters!, strict: false };
    const r = await client.responses.create({ model: "call", input: "Weather in Tokyo?", tools: [tool], temperature: 0, max_output_tokens: 32, reasoning: { effort: "low" } });
    assert.deepEqual(r.output.map((o) => o.type), ["reasoning", "function_call"]);
    assert.equal((r.output[0] as OpenAI.Responses.ResponseReasoningItem).content?.[0].text, STEPS.join(""));
    const call = r.output[1] as OpenAI.Responses.ResponseFunctionToolCall;
    assert.deepEqual([call.name, JSON.parse(call.arguments)], ["get_weather", { location: "Tokyo" }]);
    assert.equal(r.usage!.output_tokens_details.reasoning_tokens > 0, true, "the engine counts the analysis tokens");

    // The stored turn is written back as the model wrote it (analysis, then the call), so its KV is found.
    const r2 = await client.responses.create({
      model: "call", previous_response_id: r.id, tools: [tool], temperature: 0, max_output_tokens: 32, reasoning: { effort: "low" },
      input: [{ type: "function_call_output", call_id: call.call_id, output: "28 C" }],
    });
    const answered = r.usage!.input_tokens + CALL.length;
    assert.ok(r2.usage!.input_tokens > answered);
    assert.ok(r2.usage!.input_tokens_details.cached_tokens >= Math.floor(answered / 16) * 16, `cached ${r2.usage!.input_tokens_details.cached_tokens} of turn 1's ${answered} prompt and answer tokens`);
  });
});

test("chat completions with --tool-call-parser harmony write a forced call in harmony (tags as control tokens) and read it back", async () => {
  await withServer(await harmonyModel("forced", CALL), async (client) => {
    const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: "user", content: "Set the unit." }];
    const forced = await client.chat.completions.create({ model: "forced", messages, tools: [WEATHER, SET_UNIT], tool_choice: { type: "function", function: { name: "set_unit" } }, temperature: 0, max_tokens: 200 });
    assert.equal(forced.choices[0].finish_reason, "tool_calls", JSON.stringify(forced.choices[0].message));
    assert.equal((forced.choices[0].message as { reasoning_content?: string }).reasoning_content, STEPS.join(""), "the grammar lets the model reason first");
    const got = forced.choices[0].message.tool_calls![0] as OpenAI.ChatCompletionMessageFunctionToolCall;
    assert.equal(got.function.name, "set_unit");
    const args = JSON.parse(got.function.arguments) as { unit: string; days: number };
    assert.ok(["c", "f"].includes(args.unit) && Number.isInteger(args.days) && args.days <= 9, got.function.arguments);
    const required = await client.chat.completions.create({ model: "forced", messages, tools: [WEATHER, SET_UNIT], tool_choice: "required", temperature: 0, max_tokens: 200 });
    const one = required.choices[0].message.tool_calls as OpenAI.ChatCompletionMessageFunctionToolCall[];
    assert.deepEqual(one.map((c) => [c.function.name, JSON.parse(c.function.arguments)]), [["get_weather", { location: "Tokyo" }]], "the model's own call fits the grammar");
    assert.equal(required.usage!.completion_tokens, CALL.length + 1, "written with the model's own tokens (its <|channel|> and <|message|> control tokens)");
  });
});

/** Thoughts that are no JSON (braces unbalanced), then a final message that is. */
const JSON_THOUGHTS = [" Hot {very", " in Tokyo."];
const JSON_FINAL = ["<|channel|>", "analysis", "<|message|>", ...JSON_THOUGHTS, "<|end|>", "<|start|>", "assistant<|channel|>final<|message|>", '{"temp": 28}'];

test("chat completions with --reasoning-parser harmony constrain response_format to the final message, leaving the analysis free", async () => {
  await withServer(await harmonyModel("json", JSON_FINAL), async (client) => {
    const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: "user", content: "Weather in Tokyo, as JSON?" }];
    const schema = { type: "object", properties: { temp: { type: "integer" } }, required: ["temp"], additionalProperties: false };
    for (const response_format of [{ type: "json_object" as const }, { type: "json_schema" as const, json_schema: { name: "w", schema } }]) {
      const r = await client.chat.completions.create({ model: "json", messages, temperature: 0, max_tokens: 32, response_format });
      const msg = r.choices[0].message as OpenAI.ChatCompletionMessage & { reasoning_content?: string };
      assert.deepEqual([msg.reasoning_content, msg.content, r.choices[0].finish_reason], [JSON_THOUGHTS.join(""), '{"temp": 28}', "stop"], response_format.type);
    }
    // A schema the model's answer does not fit: the analysis stays the model's, the answer follows the schema.
    const other = { type: "object", properties: { city: { enum: ["Tokyo"] } }, required: ["city"], additionalProperties: false };
    const r = await client.chat.completions.create({ model: "json", messages, temperature: 0, max_tokens: 32, response_format: { type: "json_schema", json_schema: { name: "c", schema: other } } });
    const msg = r.choices[0].message as OpenAI.ChatCompletionMessage & { reasoning_content?: string };
    assert.equal(msg.reasoning_content, JSON_THOUGHTS.join(""));
    assert.deepEqual(JSON.parse(msg.content ?? "null"), { city: "Tokyo" }, String(msg.content));
  });
});
