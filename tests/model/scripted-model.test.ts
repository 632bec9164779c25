/** scriptedModelBytes()/writeScriptedModel(): a real GGUF whose greedy output follows a scripted next map. */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { generate } from "../../src/engine/generate.ts";
import type { LoadedModel } from "../../src/model/config.ts";
import { uploadModel } from "../../src/model/device-weights.ts";
import { loadModel } from "../../src/model/load.ts";
import { test } from "../harness.ts";
import { type ScriptedModelSpec, scriptedModelBytes, scriptedVocab, writeScriptedModel } from "./scripted-model.ts";

const dir = mkdtempSync(`${tmpdir()}/scripted-model-test-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
const be = createReferenceBackend();

const CALL = '\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n';
const TEMPLATE = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}" +
  "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
const SPEC: ScriptedModelSpec = {
  pieces: ["<tool_call>", CALL, "</tool_call>", "Sunny."],
  next: [["!", "<tool_call>"], ["<tool_call>", CALL], [CALL, "</tool_call>"], ["</tool_call>", "<eos>"], [".", "Sunny."], ["Sunny.", "<eos>"]],
  chatTemplate: TEMPLATE,
};

let count = 0;
async function load(spec: ScriptedModelSpec): Promise<LoadedModel> {
  const path = `${dir}/scripted-${count++}.gguf`;
  await writeScriptedModel(path, spec);
  return loadModel(path);
}

/** Greedy continuation of `prompts` (text), decoded, with each finish reason. */
async function complete(model: LoadedModel, prompts: string[], options: { temperature?: number; seed?: number } = {}) {
  const ids = prompts.map((p) => model.tokenizer.encode(p, { addBos: model.config.addBos }));
  const results = await generate(uploadModel(be, model), be, ids, { maxTokens: 16, ...options });
  return results.map((r) => ({ text: model.tokenizer.decode(r.ids), finish: r.finishReason, ids: r.ids }));
}

const model = await load(SPEC);

test("scriptedModelBytes() loads as a 1-layer qwen2 whose hidden size is the vocab size, a multiple of 64", () => {
  const c = model.config;
  assert.equal(c.architecture, "qwen2");
  assert.equal(c.numLayers, 1);
  assert.equal(c.vocabSize % 64, 0);
  assert.equal(c.hiddenSize, c.vocabSize);
  assert.equal(c.numHeads * c.headDim, c.vocabSize);
  assert.equal(c.contextLength, 512);
  assert.equal(c.tiedEmbeddings, false);
  assert.equal(c.addBos, false);
  const v = scriptedVocab(SPEC);
  assert.deepEqual(c.eosTokenIds, [v.idOf("<eos>")]);
  assert.equal(model.tokenizer.decode([v.idOf(CALL)]), CALL, "a piece decodes to its raw text");
  assert.equal(model.tokenizer.tokenText!(v.idOf("<tool_call>")), "<tool_call>");
});

test("scriptedModelBytes(): greedy output follows the next map from the prompt's last token", async () => {
  const v = scriptedVocab(SPEC);
  const ask = "What is the weather in Paris!";
  assert.equal(model.tokenizer.encode(ask).at(-1), v.idOf("!"), "no merge absorbs the trigger");
  const [call, answer, none] = await complete(model, [ask, "The tool said: sunny.", "hello world"]);
  assert.deepEqual(call, { text: `<tool_call>${CALL}</tool_call>`, finish: "stop", ids: ["<tool_call>", CALL, "</tool_call>"].map(v.idOf) });
  assert.deepEqual(answer, { text: "Sunny.", finish: "stop", ids: [v.idOf("Sunny.")] });
  assert.deepEqual(none, { text: "", finish: "stop", ids: [] }, "a token without a successor goes to EOS");
});

test("scriptedModelBytes(): a different next map gives a different output (the check can fail)", async () => {
  const other = await load({ ...SPEC, next: [["!", "Sunny."], ["Sunny.", "!"], [".", "<tool_call>"]] });
  const [a, b] = await complete(other, ["Weather!", "Thanks."]);
  assert.equal(a.text, "Sunny.!Sunny.!Sunny.!Sunny.!Sunny.!Sunny.!Sunny.!Sunny.!");
  assert.equal(a.finish, "length");
  assert.deepEqual(b, { text: "<tool_call>", finish: "stop", ids: [scriptedVocab(SPEC).idOf("<tool_call>")] });
});

test("scriptedModelBytes(): a few-hundred-token prompt, and sampling at temperature 1, still follow the script", async () => {
  const prompt = "once upon a time there was a little girl named lily, she loved to play outside. ".repeat(12) + "weather in Paris!";
  const n = model.tokenizer.encode(prompt).length;
  assert.ok(n > 200 && n < 512, `prompt of ${n} tokens`);
  const [greedy] = await complete(model, [prompt]);
  assert.equal(greedy.text, `<tool_call>${CALL}</tool_call>`);
  const [sampled] = await complete(model, [prompt], { temperature: 1, seed: 7 });
  assert.equal(sampled.text, greedy.text);
});

test("scriptedModelBytes() stores the chat template as tokenizer.chat_template (LoadedModel.chatTemplate)", async () => {
  assert.equal(model.chatTemplate, TEMPLATE);
  const bare = await load({ pieces: [], next: [] });
  assert.equal(bare.chatTemplate, undefined);
  assert.equal(bare.config.vocabSize, 320);
  // The bytes are deterministic: the same spec gives the same file.
  assert.deepEqual(scriptedModelBytes(SPEC), scriptedModelBytes(SPEC));
});

test("scriptedVocab() reuses pieces already in the vocab and rejects unknown or repeated next entries", () => {
  const v = scriptedVocab({ pieces: ["!", " the", "Sunny.", "Sunny."] });
  assert.equal(v.tokens.length, 320);
  assert.equal(v.tokens.filter((t) => t === "Sunny.").length, 1);
  assert.equal(v.idOf(" the"), v.tokens.indexOf("Ġthe"), "pieces are stored in GPT-2 byte-to-unicode form");
  assert.throws(() => scriptedModelBytes({ pieces: [], next: [["!", "<tool_call>"]] }), /"<tool_call>" is neither a piece nor one token/);
  assert.throws(() => scriptedModelBytes({ pieces: [], next: [["!", "."], ["!", "<eos>"]] }), /names "!" twice/);
  assert.throws(() => scriptedVocab({ pieces: [""] }), /must not be empty/);
});
