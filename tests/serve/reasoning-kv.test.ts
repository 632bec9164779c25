/**
 * Reasoning KV in the real server (`--reasoning-parser think`, agent retention): blocks holding an
 * answer's `<think>…</think>` are typed "reasoning", and under memory pressure they go before any
 * other block, even those of an idle session that would otherwise pay first. Without the typing, a
 * tool-waiting session's reasoning is priced like its prompt and the idle session loses its blocks.
 */
import assert from "node:assert/strict";
import OpenAI from "openai";
import { startServer } from "../../src/serve/server.ts";
import { test } from "../harness.ts";
import { pressureKv } from "./scripted-server.ts";
import { answerIds, model, modelPath, promptIds, TOOLS } from "./reasoning-model.ts";

const POOL = 48;
const BS = 16;
/** A distinct filler sentence of about `n` tokens (as in agent-kv.test.ts). */
const filler = (tag: string, n: number) => `${tag} ${"qv".repeat(Math.ceil(n / 2))}`.slice(0, n);

test("poolBlockManager() types an answer's <think> blocks \"reasoning\"; AgentAwarePolicy evicts them before an idle session's blocks", async () => {
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: POOL, kvRetention: "agent", reasoningParser: "think" });
  try {
    assert.ok(s.reasoningTokens, "<think> and </think> are single tokens of this vocabulary");
    const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 });
    const ask = (key: string, messages: OpenAI.ChatCompletionMessageParam[]) =>
      client.chat.completions.create({ model: "reasoner", messages, tools: TOOLS, temperature: 0, max_tokens: 64, prompt_cache_key: key });
    // S reasons, then calls tools: its session waits on a tool and is worth keeping.
    const sMsgs: OpenAI.ChatCompletionMessageParam[] = [{ role: "user", content: `${filler("sierra", 24)} weather?` }];
    const s1 = await ask("session-s", sMsgs);
    assert.equal(s1.choices[0].finish_reason, "tool_calls");
    const sTokens = [...promptIds(sMsgs, TOOLS), ...answerIds("?")];
    const sMetas = s.engine.pool.probePrefix(sTokens).metas;
    const firstReasoning = sMetas.findIndex((m) => m?.type === "reasoning");
    const reasoningBlocks = sMetas.filter((m) => m?.type === "reasoning").length;
    assert.ok(firstReasoning >= 2 && reasoningBlocks >= 2, `S's cached blocks: ${JSON.stringify(sMetas.map((m) => m?.type ?? "prompt"))}`);
    assert.ok(sMetas.slice(firstReasoning).every((m) => m?.type === "reasoning" || m?.type === "output"), "only generated blocks after the prompt");
    assert.ok(sMetas.every((m) => m?.sessionId === "session-s"));
    // T, later: a plain answer; its session goes idle, so by its score alone it would be evicted first.
    const tMsgs: OpenAI.ChatCompletionMessageParam[] = [{ role: "user", content: `${filler("tango", 100)} thanks.` }];
    const t1 = await ask("session-t", tMsgs);
    assert.equal(t1.choices[0].message.content, "Sunny.");
    const tTokens = [...promptIds(tMsgs, TOOLS), model.tokenizer.encode("Sunny.")[0]];
    const tBlocks = s.engine.pool.probePrefix(tTokens).metas.length;
    assert.ok(tBlocks > reasoningBlocks, `T caches ${tBlocks} blocks`);
    // A session-less prompt that needs every free block plus as many cached ones as S has reasoning blocks.
    await pressureKv(client, "reasoner", POOL - s.engine.pool.numCachedBlocks(), reasoningBlocks, BS);
    // S lost exactly its reasoning (its cached chain now ends where the reasoning began); T lost nothing.
    assert.equal(s.engine.pool.probePrefix(sTokens).metas.length, firstReasoning, "S's reasoning blocks went first");
    assert.equal(s.engine.pool.probePrefix(tTokens).metas.length, tBlocks, "the idle session kept every block");
  } finally {
    await s.shutdown();
  }
});

test("Engine types the answer's blocks \"reasoning\" from the first token when the prompt opened <think> (DeepSeek-R1 template)", async () => {
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: POOL, reasoningParser: "think" });
  try {
    const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 });
    const msgs: OpenAI.ChatCompletionMessageParam[] = [{ role: "user", content: `${filler("romeo", 30)} weather^` }];
    const r = await client.chat.completions.create({ model: "reasoner", messages: msgs, temperature: 0, max_tokens: 64 });
    assert.equal(r.usage?.completion_tokens_details?.reasoning_tokens, answerIds("^").indexOf(s.reasoningTokens!.end) + 1);
    const prompt = promptIds(msgs);
    const metas = s.engine.pool.probePrefix([...prompt, ...answerIds("^")]).metas;
    // The block where the answer starts holds prompt tokens and thoughts: reasoning, as are the next ones.
    const first = Math.floor(prompt.length / BS);
    assert.equal(metas[first]?.type, "reasoning", JSON.stringify(metas.map((m) => m?.type ?? "prompt")));
    assert.ok(metas.slice(0, first).every((m) => m?.type === undefined));
  } finally {
    await s.shutdown();
  }
});
