/**
 * gpt-oss's harmony format (`--reasoning-parser harmony --tool-call-parser harmony`), streamed and
 * whole, field by field (ids' shapes kept, timestamps left out): chat completions (chunks assembled),
 * the Responses API (`responses.stream(...).finalResponse()`) and Anthropic Messages
 * (`messages.stream(...).finalMessage()`), for an analysis-then-final answer and an analysis-then-call
 * one, whole, cut by the token limit, and with log probabilities. The models are scripted bigram
 * models on gpt-oss's own template, built as tests/serve/harmony-server.test.ts builds them.
 */
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { loadModel } from "../../src/model/load.ts";
import { startServer } from "../../src/serve/server.ts";
import { test } from "../harness.ts";
import { writeScriptedModel } from "../model/scripted-model.ts";
import { assembleChat, both, tidy } from "./stream-parity-chat.ts";
import { scrub, TOOLS } from "./stream-parity-model.ts";

type Json = Record<string, unknown>;
const TEMPLATE = readFileSync(new URL("./fixtures/gpt-oss-chat-template.jinja", import.meta.url), "utf8");
const TAGS = ["<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>", "<|call|>", "<|return|>"];
const ANALYSIS = ["<|channel|>", "analysis", "<|message|>", " Tokyo is in Japan.", " It is summer.", "<|end|>", "<|start|>"];
const ANSWERS = {
  final: [...ANALYSIS, "assistant<|channel|>final<|message|>", "Sunny, ", "28 °C."],
  call: [...ANALYSIS, "assistant to=functions.get_weather<|channel|>commentary json<|message|>", '{"city": ', '"Tokyo"}', "<|call|>"],
};
const dir = mkdtempSync(`${tmpdir()}/stream-parity-harmony-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));

/** Serves a scripted gpt-oss-like model whose greedy answer is `answer`'s pieces; runs `fn` with its URL. */
async function withHarmony(answer: keyof typeof ANSWERS, fn: (url: string) => Promise<void>): Promise<void> {
  const path = `${dir}/${answer}.gguf`;
  const chain = ["assistant", ...ANSWERS[answer], "<eos>"];
  await writeScriptedModel(path, {
    pieces: [...TAGS, "assistant", "analysis", ...ANSWERS[answer].filter((p) => !TAGS.includes(p))],
    literalPieces: true, controlPieces: TAGS, chatTemplate: TEMPLATE, contextLength: 4096,
    next: chain.slice(1).map((to, i): [string, string] => [chain[i], to]),
  });
  const s = await startServer({ modelPath: path, model: await loadModel(path), host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 256, reasoningParser: "harmony", toolCallParser: "harmony" });
  try {
    await fn(s.url);
  } finally {
    await s.shutdown();
  }
}

const CASES: [string, keyof typeof ANSWERS, Json][] = [
  ["analysis then final", "final", {}],
  ["analysis then final, logprobs", "final", { logprobs: true, top_logprobs: 2 }],
  ["cut inside the analysis", "final", { max_tokens: 4 }],
  ["cut inside the final message", "final", { max_tokens: 9 }],
  ["analysis then a call", "call", { tools: TOOLS }],
  ["analysis then a call, logprobs and n = 2", "call", { tools: TOOLS, logprobs: true, n: 2 }],
  ["cut inside the call", "call", { tools: TOOLS, max_tokens: 9 }],
];

test("harmony: each API's streamed answer is its whole answer", async () => {
  const found: string[] = [];
  const check = (name: string, whole: unknown, streamed: unknown) => {
    try {
      assert.deepEqual(scrub(streamed), scrub(whole));
    } catch (e) {
      found.push(`${name}: ${(e as Error).message}`);
    }
  };
  for (const answer of ["final", "call"] as const) {
    await withHarmony(answer, async (url) => {
      for (const [name, , extra] of CASES.filter((c) => c[1] === answer)) {
        const ask = { messages: [{ role: "user", content: "Weather in Tokyo?" }], temperature: 0, max_tokens: 64, ...extra };
        const { whole, chunks } = await both(url, "/v1/chat/completions", { model: answer, ...ask });
        check(`chat, ${name}`, { choices: (whole.choices as Json[]).map(tidy), usage: whole.usage }, assembleChat(chunks));
        if (extra.n !== undefined) continue;
        const openai = new OpenAI({ baseURL: `${url}/v1`, apiKey: "none", maxRetries: 0 });
        const tools = extra.tools ? TOOLS.map((t) => ({ type: "function" as const, name: t.function.name, parameters: t.function.parameters ?? null, strict: false })) : undefined;
        const logprobs = extra.logprobs ? { include: ["message.output_text.logprobs" as const], top_logprobs: 2 } : {};
        const body = { model: answer, input: "Weather in Tokyo?", temperature: 0, max_output_tokens: ask.max_tokens, store: false, ...(tools ? { tools } : {}), ...logprobs };
        const r = await openai.responses.create(body);
        const rs = await openai.responses.stream(body).finalResponse();
        check(`responses, ${name}`, r, unparsed(rs));
        const anthropic = new Anthropic({ baseURL: url, apiKey: "none", maxRetries: 0 });
        const mbody = { model: answer, max_tokens: ask.max_tokens, temperature: 0, messages: [{ role: "user" as const, content: "Weather in Tokyo?" }], ...(tools ? { tools: TOOLS.map((t) => ({ name: t.function.name, input_schema: t.function.parameters as Anthropic.Tool.InputSchema })) } : {}) };
        const m = await anthropic.messages.create(mbody);
        const ms = await anthropic.messages.stream(mbody).finalMessage();
        check(`messages, ${name}`, unparsed(m), unparsed(ms));
      }
    });
  }
  assert.deepEqual(found, []);
});

/** A value without the fields the SDKs' stream helpers add themselves or leave undefined: none are on the wire. */
function unparsed(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(unparsed);
  if (v === null || typeof v !== "object") return v;
  return Object.fromEntries(Object.entries(v).filter(([k, x]) => !["parsed", "output_parsed", "parsed_arguments", "parsed_output"].includes(k) && x !== undefined).map(([k, x]) => [k, unparsed(x)]));
}
