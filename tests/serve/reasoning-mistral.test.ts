/**
 * `--reasoning-parser mistral`: Magistral writes its reasoning between `[THINK]` and `[/THINK]`, which
 * are control tokens in its vocabulary. The real `openai` client against the real server, serving a
 * scripted model with those tags as control tokens: the reasoning comes back as
 * `reasoning_content` (whole and streamed), the engine counts its tokens, and without the parser the
 * tags stay hidden as control tokens do.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import OpenAI from "openai";
import { loadModel } from "../../src/model/load.ts";
import { MISTRAL_THINK_TAGS, type ReasoningParserName, reasoningTokenIds, splitReasoning } from "../../src/serve/reasoning.ts";
import { startServer } from "../../src/serve/server.ts";
import { test } from "../harness.ts";
import { scriptedVocab, writeScriptedModel, type ScriptedModelSpec } from "../model/scripted-model.ts";

const TAGS = ["[THINK]", "[/THINK]"];
const THOUGHTS = [" Let me think.", " It is July."];
const SPEC: ScriptedModelSpec = {
  pieces: [...TAGS, ...THOUGHTS, "Sunny."],
  literalPieces: true,
  controlPieces: TAGS,
  next: [["?", "[THINK]"], ["[THINK]", THOUGHTS[0]], [THOUGHTS[0], THOUGHTS[1]], [THOUGHTS[1], "[/THINK]"], ["[/THINK]", "Sunny."], ["Sunny.", "<eos>"]],
  chatTemplate: "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}{% if add_generation_prompt %}assistant{{ messages[-1].content[-1:] }}{% endif %}",
  contextLength: 2048,
};
const dir = mkdtempSync(`${tmpdir()}/reasoning-mistral-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
const modelPath = `${dir}/magistral-like.gguf`;
await writeScriptedModel(modelPath, SPEC);
const model = await loadModel(modelPath);
const body = { model: "magistral-like", messages: [{ role: "user" as const, content: "Weather?" }], temperature: 0, max_tokens: 32 };

async function withServer(reasoningParser: ReasoningParserName, fn: (client: OpenAI) => Promise<void>) {
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 64, reasoningParser });
  try {
    await fn(new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 }));
  } finally {
    await s.shutdown();
  }
}

test("reasoningTokenIds() finds Magistral's [THINK] and [/THINK] control tokens; splitReasoning() reads them", () => {
  const vocab = scriptedVocab(SPEC);
  assert.deepEqual(reasoningTokenIds(model.tokenizer, MISTRAL_THINK_TAGS), { start: vocab.idOf("[THINK]"), end: vocab.idOf("[/THINK]") });
  assert.deepEqual(splitReasoning("[THINK]a<think>b[/THINK]\nc", false, MISTRAL_THINK_TAGS), { reasoning: "a<think>b", content: "c" });
});

test("submitChat() with --reasoning-parser mistral returns [THINK] text as reasoning_content, whole and streamed, and counts its tokens", async () => {
  await withServer("mistral", async (client) => {
    const r = await client.chat.completions.create(body);
    assert.deepEqual(r.choices[0].message, { role: "assistant", content: "Sunny.", reasoning_content: THOUGHTS.join("") });
    assert.equal(r.usage?.completion_tokens_details?.reasoning_tokens, THOUGHTS.length + 2, "the tags and the thoughts, counted by the engine");
    let reasoning = "";
    let content = "";
    for await (const c of await client.chat.completions.create({ ...body, stream: true })) {
      const d = c.choices[0]?.delta as { content?: string | null; reasoning_content?: string } | undefined;
      reasoning += d?.reasoning_content ?? "";
      content += d?.content ?? "";
    }
    assert.equal(reasoning, THOUGHTS.join(""));
    assert.equal(content, "Sunny.");
  });
});

test("submitChat() without a reasoning parser hides Magistral's control-token tags and keeps the thoughts as content", async () => {
  await withServer("none", async (client) => {
    const r = await client.chat.completions.create(body);
    assert.deepEqual(r.choices[0].message, { role: "assistant", content: `${THOUGHTS.join("")}Sunny.` });
  });
});
