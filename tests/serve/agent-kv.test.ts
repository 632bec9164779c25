/**
 * Agent-aware KV retention in the real server: a session whose turn ended in a tool call keeps its
 * cached prefix over a more recent, longer session that gave its final answer, when another prompt
 * needs the memory; LRU retention (vLLM's) drops the older, tool-waiting session instead. (With the
 * tool wait unknown, the agent-aware policy would drop the shorter, older session too: the test
 * fails if the server stops reporting tool calls to the engine.)
 */
import assert from "node:assert/strict";
import OpenAI from "openai";
import { startServer } from "../../src/serve/server.ts";
import { test } from "../harness.ts";
import { model, modelPath, pressureKv, TOOLS } from "./scripted-server.ts";

const POOL = 64;
const BS = 16;

/** A distinct filler sentence of about `n` tokens (byte-level BPE: about one token per character here). */
const filler = (tag: string, n: number) => `${tag} ${"qv".repeat(Math.ceil(n / 2))}`.slice(0, n);

/** Runs the scenario; returns the cached prompt tokens of session A's second turn and of B's. */
async function scenario(kvRetention: "agent" | "lru"): Promise<{ a: number; b: number; aBlocks: number; bBlocks: number }> {
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: POOL, kvRetention });
  try {
    const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 });
    const ask = (key: string, messages: OpenAI.ChatCompletionMessageParam[]) =>
      client.chat.completions.create({ model: "scripted", messages, tools: TOOLS, temperature: 0, max_tokens: 8, prompt_cache_key: key });
    // A: an agent turn that ends in a tool call (it will come back in seconds).
    const aMsgs: OpenAI.ChatCompletionMessageParam[] = [{ role: "user", content: `${filler("alpha", 120)} weather in Paris!` }];
    const a1 = await ask("session-a", aMsgs);
    assert.equal(a1.choices[0].finish_reason, "tool_calls");
    if (kvRetention === "agent") {
      const metrics = await (await fetch(`${s.url}/metrics`)).text();
      assert.match(metrics, /evolving:kv_sessions\{model_name="scripted",status="waiting-tool"\} 1/);
    }
    const aBlocks = s.engine.pool.numCachedBlocks();
    // B, later: a longer turn that ends with a final answer (the session goes idle).
    const bMsgs: OpenAI.ChatCompletionMessageParam[] = [{ role: "user", content: `${filler("bravo", 320)} thanks.` }];
    const b1 = await ask("session-b", bMsgs);
    assert.equal(b1.choices[0].message.content, "Sunny.");
    const bBlocks = s.engine.pool.numCachedBlocks() - aBlocks;
    assert.ok(bBlocks > aBlocks + 4 && aBlocks >= 4, `A caches ${aBlocks} blocks, B ${bBlocks}`);
    // C: a session-less prompt that needs every free block plus A's worth of cached ones and two more.
    await pressureKv(client, "scripted", POOL - aBlocks - bBlocks, aBlocks + 2, BS);
    // B's user comes back, then A with its tool's result (B first: A's recompute under LRU would evict B).
    const b2 = await ask("session-b", [...bMsgs, { role: "assistant", content: "Sunny." }, { role: "user", content: "and tomorrow." }]);
    const call = a1.choices[0].message.tool_calls![0];
    const a2 = await ask("session-a", [...aMsgs, a1.choices[0].message as OpenAI.ChatCompletionMessageParam, { role: "tool", tool_call_id: call.id, content: "18 degrees." }]);
    return { a: a2.usage!.prompt_tokens_details!.cached_tokens!, b: b2.usage!.prompt_tokens_details!.cached_tokens!, aBlocks, bBlocks };
  } finally {
    await s.shutdown();
  }
}

test("Engine kvRetention \"agent\" keeps a tool-waiting session's prefix where LRU evicts it", async () => {
  const agent = await scenario("agent");
  const lru = await scenario("lru");
  // Agent-aware: B (idle) paid for C; A's prompt prefix (all but the block where the turn's answer starts) is still there.
  assert.ok(agent.a >= (agent.aBlocks - 2) * BS, `agent: A's second turn found ${agent.a} cached tokens of ${agent.aBlocks * BS}`);
  assert.ok(agent.b <= (agent.bBlocks - agent.aBlocks) * BS, `agent: B lost A's worth of blocks (found ${agent.b} cached tokens)`);
  // LRU: A, released first, paid for C entirely (but for the first block, which B's prompt shares), and B lost only two blocks.
  assert.ok(lru.a <= BS, `lru: A's second turn found ${lru.a} cached tokens`);
  assert.ok(lru.b >= (lru.bBlocks - 4) * BS, `lru: B kept its blocks (found ${lru.b} cached tokens)`);
});
