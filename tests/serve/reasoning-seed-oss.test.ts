/**
 * `--reasoning-parser seed_oss` (vLLM's name): Seed-OSS writes its reasoning between `<seed:think>`
 * and `</seed:think>`, added tokens of its vocabulary. The real `openai` client against the real
 * server, serving a scripted model with those tags as control tokens and a template that names them:
 * `auto` takes the parser from the template, the reasoning comes back as `reasoning_content` (whole
 * and streamed), and the engine counts its tokens.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import OpenAI from "openai";
import { loadModel } from "../../src/model/load.ts";
import { detectReasoningParser, reasoningTokenIds, SEED_THINK_TAGS, splitReasoning } from "../../src/serve/reasoning.ts";
import { startServer } from "../../src/serve/server.ts";
import { test } from "../harness.ts";
import { scriptedVocab, type ScriptedModelSpec, writeScriptedModel } from "../model/scripted-model.ts";

const TAGS = ["<seed:think>", "</seed:think>"];
const THOUGHTS = [" Let me think.", " It is July."];
const SPEC: ScriptedModelSpec = {
  pieces: [...TAGS, ...THOUGHTS, "Sunny."],
  literalPieces: true,
  controlPieces: TAGS,
  next: [["?", "<seed:think>"], ["<seed:think>", THOUGHTS[0]], [THOUGHTS[0], THOUGHTS[1]], [THOUGHTS[1], "</seed:think>"], ["</seed:think>", "Sunny."], ["Sunny.", "<eos>"]],
  // As Seed-OSS's template names its reasoning tags (for the turns it writes back).
  chatTemplate: "{# <seed:think> #}{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}{% if add_generation_prompt %}assistant{{ messages[-1].content[-1:] }}{% endif %}",
  contextLength: 2048,
};
const dir = mkdtempSync(`${tmpdir()}/reasoning-seed-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
const modelPath = `${dir}/seed-like.gguf`;
await writeScriptedModel(modelPath, SPEC);
const model = await loadModel(modelPath);
const body = { model: "seed-like", messages: [{ role: "user" as const, content: "Weather?" }], temperature: 0, max_tokens: 32 };

test("detectReasoningParser() takes seed_oss from a template naming <seed:think>; reasoningTokenIds() finds its tags; splitReasoning() reads them", () => {
  assert.equal(detectReasoningParser(model.chatTemplate, model.config.architecture), "seed_oss");
  assert.equal(detectReasoningParser("{{ '<think>' }}", model.config.architecture), "think");
  const vocab = scriptedVocab(SPEC);
  assert.deepEqual(reasoningTokenIds(model.tokenizer, SEED_THINK_TAGS), { start: vocab.idOf("<seed:think>"), end: vocab.idOf("</seed:think>") });
  assert.deepEqual(splitReasoning("<seed:think>a<think>b</seed:think>\nc", false, SEED_THINK_TAGS), { reasoning: "a<think>b", content: "c" });
});

test("submitChat() with --reasoning-parser auto on a Seed-OSS template returns <seed:think> text as reasoning_content, whole and streamed", async () => {
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 64, reasoningParser: "auto" });
  try {
    const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 });
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
    assert.deepEqual([reasoning, content], [THOUGHTS.join(""), "Sunny."]);
  } finally {
    await s.shutdown();
  }
});
