/**
 * The Responses API's function tools whose `strict` is omitted are strict where the schema can be held
 * (responses-input.ts `strictIfPossible`). What the response echoes in `tools` carries the `strict`
 * applied to each, true or false, as OpenAI's does (it echoed the request's tools as sent, `strict`
 * omitted, before).
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import OpenAI from "openai";
import { test } from "../harness.ts";
import { loadModel } from "../../src/model/load.ts";
import { startServer } from "../../src/serve/server.ts";
import { writeScriptedModel } from "../model/scripted-model.ts";

const WEATHER = { type: "object", additionalProperties: false, required: ["city"], properties: { city: { enum: ["Paris", "Tokyo"] } } };
/** A schema no grammar here can follow (patternProperties): omitted strict is then not applied. */
const UNFOLLOWABLE = { type: "object", patternProperties: { "^c": { type: "string" } } };

const dir = mkdtempSync(`${tmpdir()}/responses-strict-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
const modelPath = `${dir}/scripted.gguf`;
// The template prints the tools as JSON, as Qwen's and Hermes' do; the answer to "…." is "Sunny.".
await writeScriptedModel(modelPath, {
  pieces: ["Sunny."],
  next: [[".", "Sunny."], ["Sunny.", "<eos>"]],
  chatTemplate: "{% if tools %}{{ tools | tojson }}\n{% endif %}{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}" +
    "{% if add_generation_prompt %}assistant{{ messages[-1].content[-1:] }}{% endif %}",
  contextLength: 2048,
});
const model = await loadModel(modelPath);

async function withClient(fn: (client: OpenAI) => Promise<void>): Promise<void> {
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 64 });
  try {
    await fn(new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 }));
  } finally {
    await s.shutdown();
  }
}

const tool = (name: string, parameters: Record<string, unknown>, strict?: boolean | null) =>
  ({ type: "function", name, parameters, ...(strict === undefined ? {} : { strict }) }) as OpenAI.Responses.FunctionTool;

test("Responses API: the response echoes each function tool with the strict it applied (true or false, never omitted), created, streamed and retrieved", async () => {
  await withClient(async (client) => {
    const tools = [tool("a", WEATHER), tool("b", WEATHER, false), tool("c", WEATHER, true), tool("d", UNFOLLOWABLE), tool("e", WEATHER, null)];
    const body = { model: "scripted", input: "Weather.", tools, temperature: 0, max_output_tokens: 8 };
    const applied = (r: OpenAI.Responses.Response) => r.tools.map((t) => [(t as OpenAI.Responses.FunctionTool).name, (t as OpenAI.Responses.FunctionTool).strict]);
    const want = [["a", true], ["b", false], ["c", true], ["d", false], ["e", true]];
    const created = await client.responses.create(body);
    assert.equal(created.output_text, "Sunny.");
    assert.deepEqual(applied(created), want);
    // The rest of each tool is echoed as sent.
    assert.deepEqual((created.tools[0] as OpenAI.Responses.FunctionTool).parameters, WEATHER);
    assert.deepEqual(applied(await client.responses.retrieve(created.id)), want);
    assert.deepEqual(applied(await client.responses.stream(body).finalResponse()), want);
  });
});
