/**
 * Loading Gemma 3 (gemma3) GGUFs: scaled embeddings, sandwich norms, GeGLU, five sliding layers of
 * six with their own RoPE base, linear RoPE scaling of the global layers, the 27B's score scale,
 * <end_of_turn> as a stop, Hugging Face directories read as their GGUFs (norms given 1 + w), and
 * clear refusals. The forward is checked against llama.cpp in
 * tests/oracle/llama-cpp.test.ts; GELU itself here against its definition.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { layerWindow, ModelLoadError } from "../../src/model/config.ts";
import { gguf as g } from "../../src/model/gguf-writer.ts";
import { loadModel } from "../../src/model/load.ts";
import { writeFile } from "../../src/runtime/fs.ts";
import { test } from "../harness.ts";
import { chatRenderer } from "../../src/serve/chat-template.ts";
import { type GgufExtras, ggufBytes, type ModelFileSpec, randomHfWeights, vocabFor, writeHfDirectory } from "./model-files.ts";
import { hfConfig } from "../../src/model/hf-loader.ts";

const dir = mkdtempSync(`${tmpdir()}/gemma3-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));

const SPEC: ModelFileSpec = {
  hidden: 32, layers: 7, heads: 4, kvHeads: 2, headDim: 8, ffn: 64, vocab: 300, tied: true, dtype: "f32", architecture: "gemma3",
  seed: 81, slidingWindow: 5, ropeLinearFactor: 8,
};

async function write(name: string, spec: ModelFileSpec, extras?: GgufExtras): Promise<string> {
  await writeFile(`${dir}/${name}.gguf`, ggufBytes(spec, randomHfWeights(spec), undefined, extras));
  return `${dir}/${name}.gguf`;
}

test("loadModel() reads a gemma3 GGUF: scaled embeddings, sandwich norms, GeGLU, sliding layers with their own RoPE base", async () => {
  const m = await loadModel(await write("base", SPEC));
  const c = m.config;
  assert.equal(c.architecture, "gemma3");
  assert.equal(c.embeddingScale, Math.sqrt(32));
  assert.deepEqual([c.postNorms, c.ffnActivation, c.qkNorm, c.tiedEmbeddings, c.ropeLayout], [true, "gelu", true, true, "neox"]);
  // llama.cpp's period for Gemma 3: every sixth layer is global.
  assert.deepEqual(c.slidingWindow, { size: 5, layers: [true, true, true, true, true, false, true], ropeTheta: 10000 });
  assert.deepEqual([5, 6].map((i) => layerWindow(c, i)), [undefined, 5]);
  assert.equal(c.ropeTheta, 1e6);
  assert.deepEqual(c.ropeFreqFactors, [8, 8, 8, 8], "linear scaling by 8 divides every pair's frequency by 8");
  assert.equal(c.attentionScale, 1 / Math.sqrt(8));
  const l = m.weights.layers[0];
  assert.deepEqual([l.attnPostNorm?.shape, l.ffnPostNorm?.shape, l.qNorm?.shape], [[32], [32], [8]]);
  assert.ok([l.attnPostNorm, l.ffnPostNorm].every((t) => t?.dtype === "f32"));
});

test("loadModel() takes gemma3's sliding pattern and sliding RoPE base from the file when it gives them", async () => {
  const m = await loadModel(await write("pattern", { ...SPEC, ropeLinearFactor: undefined }, {
    metadata: [["gemma3.attention.sliding_window_pattern", g.u32(3)], ["gemma3.rope.freq_base_swa", g.f32(500)]],
  }));
  assert.deepEqual(m.config.slidingWindow, { size: 5, layers: [true, true, false, true, true, false, true], ropeTheta: 500 });
  assert.equal(m.config.ropeFreqFactors, undefined, "no scaling: the global layers turn unscaled");
});

test("loadModel() scales gemma3-27B's scores by hidden / heads, not its head width", async () => {
  // 62 layers is how llama.cpp tells the 27B (its query_pre_attn_scalar is 5376 / 32 = 168, head_dim 128).
  const m = await loadModel(await write("27b", { ...SPEC, layers: 62, hidden: 48, heads: 4, headDim: 8, vocab: 260 }));
  assert.equal(m.config.attentionScale, 1 / Math.sqrt(48 / 4));
});

test("loadModel() stops gemma3 at <end_of_turn> though the file names no EOT", async () => {
  const vocab = vocabFor(SPEC);
  const tokens = [...vocab.tokens];
  tokens[106] = "<end_of_turn>";
  const path = `${dir}/eot.gguf`;
  await writeFile(path, ggufBytes(SPEC, randomHfWeights(SPEC), { ...vocab, tokens }));
  const m = await loadModel(path);
  assert.ok(m.config.eosTokenIds.includes(106), `${m.config.eosTokenIds}`);
  assert.ok(m.config.eosTokenIds.includes(vocab.eosId));
});

test("loadModel() refuses gemma3 files it would run wrongly, naming the problem", async () => {
  const capped = await write("capped", SPEC, { metadata: [["gemma3.final_logit_softcapping", g.f32(30)]] });
  await assert.rejects(loadModel(capped), (e: Error) => e instanceof ModelLoadError && /soft-caps its logits \("gemma3.final_logit_softcapping" 30\)/.test(e.message));
  const yarn = await write("yarn", SPEC, { metadata: [["gemma3.rope.scaling.type", g.str("yarn")]] });
  await assert.rejects(loadModel(yarn), /RoPE scaling type "yarn"; Gemma 3 files use "linear"/);
});

test("Backend.geluMul() on the reference backend is GELU's tanh approximation times up", () => {
  const b = createReferenceBackend();
  const xs = [-8, -3, -1, -0.25, 0, 0.5, 1, 2.5, 9];
  const gate = b.upload(Float32Array.from(xs), [3, 3]);
  const up = b.upload(Float32Array.from(xs.map((_, i) => 1 + i / 4)), [3, 3]);
  return b.download(b.geluMul(gate, up)).then((out) => {
    xs.forEach((x, i) => {
      const want = 0.5 * x * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (x + 0.044715 * x ** 3))) * (1 + i / 4);
      assert.ok(Math.abs(out[i] - want) <= 1e-6 * Math.max(1, Math.abs(want)), `gelu(${x}): ${out[i]} vs ${want}`);
    });
    // GELU ≈ x for large x, ≈ 0 for very negative x; at -1 about -0.159.
    assert.ok(Math.abs(out[6] - 1 * (1 + 6 / 4) * 0.8412) < 1e-3);
  });
});

/** Gemma 3's chat template (its tokenizer_config.json's, which its GGUFs carry), images left out. */
const GEMMA3_TEMPLATE = `{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '\\n\\n' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\\n\\n' -%}
    {%- endif -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- elif message['content'] is iterable -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'text' -%}
                {{ item['text'] | trim }}
            {%- endif -%}
        {%- endfor -%}
    {%- else -%}
        {{ raise_exception("Invalid content type") }}
    {%- endif -%}
    {{ '<end_of_turn>\\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\\n'}}
{%- endif -%}
`;

test("chatRenderer() renders Gemma 3's template: the system prompt in the first user turn, the model's turn opened", () => {
  const r = chatRenderer(GEMMA3_TEMPLATE, { bos: "<bos>", eos: "<eos>" });
  const out = r.render([
    { role: "system", content: "Be brief." },
    { role: "user", content: [{ type: "text", text: "Hi" }, { type: "text", text: "there" }] },
    { role: "assistant", content: "Hello." },
    { role: "user", content: "Bye" },
  ]);
  // Text parts joined by a newline, as vLLM joins them.
  assert.equal(out.text, "<bos><start_of_turn>user\nBe brief.\n\nHi\nthere<end_of_turn>\n<start_of_turn>model\nHello.<end_of_turn>\n<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n");
  assert.equal(out.startsWithBos, true, "the prompt is not given a second BOS");
  assert.throws(() => r.render([{ role: "assistant", content: "x" }]), /roles must alternate/);
});

test("loadModel() reads a Gemma3ForCausalLM directory as its GGUF: the same config, and norms given 1 + w", async () => {
  const weights = randomHfWeights(SPEC);
  await writeFile(`${dir}/same.gguf`, ggufBytes(SPEC, weights));
  await writeHfDirectory(`${dir}/same-hf`, SPEC, weights);
  const [g, h] = await Promise.all([loadModel(`${dir}/same.gguf`), loadModel(`${dir}/same-hf`)]);
  const { eosTokenIds: _e1, bosTokenId: _b1, addBos: _a1, ...gc } = g.config;
  const { eosTokenIds: _e2, bosTokenId: _b2, addBos: _a2, samplingDefaults: _s, ...hc } = h.config;
  assert.deepEqual(hc, gc);
  const f32 = (t: { data: Uint8Array }) => Array.from(new Float32Array(t.data.slice().buffer));
  for (const role of ["attnNorm", "ffnNorm", "attnPostNorm", "ffnPostNorm", "qNorm", "kNorm"] as const) {
    const [a, b] = [f32(g.weights.layers[2][role]!), f32(h.weights.layers[2][role]!)];
    assert.ok(a.every((x, i) => Math.abs(x - b[i]) < 1e-6), role);
  }
  assert.ok(f32(g.weights.outputNorm).every((x, i) => Math.abs(x - f32(h.weights.outputNorm)[i]) < 1e-6));
});

test("hfConfig() reads Gemma 3's layer_types and refuses what it would run wrongly, naming the key", () => {
  const cfg = {
    architectures: ["Gemma3ForCausalLM"], hidden_size: 32, num_hidden_layers: 3, num_attention_heads: 4, num_key_value_heads: 2, head_dim: 8,
    intermediate_size: 64, sliding_window: 4, layer_types: ["full_attention", "sliding_attention", "sliding_attention"], rope_theta: 1e6,
    query_pre_attn_scalar: 16,
  };
  const c = hfConfig(cfg, {}, 300, "g");
  assert.deepEqual(c.slidingWindow, { size: 4, layers: [false, true, true], ropeTheta: 10000 });
  assert.equal(c.attentionScale, 1 / 4, "query_pre_attn_scalar 16");
  assert.equal(c.tiedEmbeddings, true, "Gemma3TextConfig's default");
  assert.throws(() => hfConfig({ ...cfg, final_logit_softcapping: 30 }, {}, 300, "g"), /"final_logit_softcapping" in "g" is 30/);
  assert.throws(() => hfConfig({ ...cfg, hidden_activation: "silu" }, {}, 300, "g"), /"hidden_activation" in "g" is "silu"/);
  assert.throws(() => hfConfig({ ...cfg, rope_scaling: { rope_type: "yarn", factor: 4 } }, {}, 300, "g"), /scales its global layers' RoPE linearly/);
  assert.throws(() => hfConfig({ ...cfg, architectures: ["Gemma3ForConditionalGeneration"] }, {}, 300, "g"), /vision tower \(Gemma3ForConditionalGeneration\)/);
});
