// Runs GGUF models through llama.cpp (node-llama-cpp 3.21.1, CPU prebuilt, offline) and prints,
// as JSON, the next-token probabilities and greedy token of each of `steps` steps after a prompt
// of token ids, plus llama.cpp's own tokenization of some texts. Plain JavaScript run by Node, so
// the oracle tests call it the same way from Deno and from Node (node-llama-cpp is a Node addon).
//
// Usage: node tests/oracle/llama-cpp-runner.mjs job.json
//   job.json: {"models": [{"path": "...gguf", "prompt": [ids], "steps": 32, "texts": ["..."], "kvType": "F32"|"F16", "contextSize": 256,
//                          "lora": [{"path": "...gguf", "scale": 1}]}]}
//   `lora` (optional): LoRA adapter files applied to the context, each at its scale (default 1).
import { readFileSync } from "node:fs";
import { getLlama, LlamaLogLevel } from "node-llama-cpp";

const job = JSON.parse(readFileSync(process.argv[2], "utf8"));
const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error, progressLogs: false });
const results = [];
for (const m of job.models) {
  const model = await llama.loadModel({ modelPath: m.path });
  // F32 KV cache (unless the job asks for F16, llama.cpp's default) and no flash attention: the
  // comparison should see only weight/activation rounding.
  // One thread: ggml's spinning thread barrier is ~1000x slower on a busy 2-core machine.
  const context = await model.createContext({
    contextSize: m.contextSize ?? 256,
    sequences: 1,
    threads: 1,
    flashAttention: false,
    experimentalKvCacheKeyType: m.kvType ?? "F32",
    experimentalKvCacheValueType: m.kvType ?? "F32",
    ...(m.lora?.length ? { lora: { adapters: m.lora.map((a) => ({ filePath: a.path, scale: a.scale ?? 1 })) } } : {}),
  });
  const sequence = context.getSequence();
  const steps = [];
  const generator = sequence.evaluateWithMetadata(m.prompt, { probabilities: true }, { temperature: 0, yieldEogToken: true });
  for await (const out of generator) {
    const probs = [];
    for (const [token, p] of out.probabilities) probs[token] = p;
    steps.push({ token: out.token, probs });
    if (steps.length >= m.steps) break;
  }
  const tokenized = (m.texts ?? []).map((text) => Array.from(model.tokenize(text, false)));
  results.push({ path: m.path, steps, tokenized });
  await context.dispose();
  await model.dispose();
}
await llama.dispose();
process.stdout.write(JSON.stringify({ results }));
