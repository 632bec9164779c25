/**
 * Agent-aware KV retention for clients that send no session key (no prompt_cache_key, no user):
 * agent-kv.test.ts's scenario, with the sessions inferred from the prompts' cached prefixes. The
 * template sends the model's answers back token for token (scripted-server.ts `verbatimModel`),
 * so A's second turn holds A's first answer; B's prompt shares only its first block with A's.
 * Without inference every request here is session-less: A's blocks, released first, go first to
 * make room (as under LRU), and the test fails (checked by hand with inference switched off).
 */
import assert from "node:assert/strict";
import OpenAI from "openai";
import { chatRenderer } from "../../src/serve/chat-template.ts";
import { startServer } from "../../src/serve/server.ts";
import { test } from "../harness.ts";
import { pressureKv, TOOLS, VERBATIM_TEMPLATE, verbatimModel } from "./scripted-server.ts";

const POOL = 64;
const BS = 16;

/** A distinct filler sentence of about `n` tokens (byte-level BPE: about one token per character here). */
const filler = (tag: string, n: number) => `${tag} ${"qv".repeat(Math.ceil(n / 2))}`.slice(0, n);

/**
 * A's first message, about `n` tokens, sized so that its prompt ends 3 tokens before a block
 * boundary: the 3 tokens of the call it gets back (<tool_call>, the call, </tool_call>) then fill
 * that block, which is cached as an output block, what marks A's next turn as A's.
 */
async function alphaMessage(n: number): Promise<string> {
  const { model } = await verbatimModel();
  const render = chatRenderer(VERBATIM_TEMPLATE, {});
  const tools = [{ type: "function" as const, function: { name: "get_weather" } }]; // TOOLS as the template sees them
  for (let k = n; k < n + 4 * BS; k++) {
    const content = `${filler("alpha", k)} weather in Paris!`;
    if (model.tokenizer.encode(render.render([{ role: "user", content }], tools).text).length % BS === BS - 3) return content;
  }
  throw new Error(`No filler length from ${n} puts A's prompt 3 tokens before a block boundary`);
}

/** Runs the scenario; returns cached prompt tokens of A's and B's second turns, and each request's session. */
async function scenario(kvRetention: "agent" | "lru") {
  const { modelPath, model } = await verbatimModel();
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: POOL, kvRetention });
  // The session the engine placed each request in, in submit order (A1, B1, C, B2, A2).
  const sessions: (string | undefined)[] = [];
  const submit = s.engine.submit.bind(s.engine);
  s.engine.submit = (req) => {
    const h = submit(req);
    sessions.push(h.sessionId);
    return h;
  };
  try {
    const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 });
    const ask = (messages: OpenAI.ChatCompletionMessageParam[]) =>
      client.chat.completions.create({ model: s.modelName, messages, tools: TOOLS, temperature: 0, max_tokens: 8 });
    // A: an agent turn that ends in a tool call (it will come back in seconds).
    const aMsgs: OpenAI.ChatCompletionMessageParam[] = [{ role: "user", content: await alphaMessage(120) }];
    const a1 = await ask(aMsgs);
    assert.equal(a1.choices[0].finish_reason, "tool_calls");
    const aBlocks = s.engine.pool.numCachedBlocks();
    // B, later: a longer turn that ends with a final answer (the conversation goes idle).
    const bMsgs: OpenAI.ChatCompletionMessageParam[] = [{ role: "user", content: `${filler("bravo", 320)} thanks.` }];
    const b1 = await ask(bMsgs);
    assert.equal(b1.choices[0].message.content, "Sunny.");
    const bBlocks = s.engine.pool.numCachedBlocks() - aBlocks;
    assert.ok(bBlocks > aBlocks + 4 && aBlocks >= 4, `A caches ${aBlocks} blocks, B ${bBlocks}`);
    // C: a prompt that needs every free block plus A's worth of cached ones and two more.
    await pressureKv(client, s.modelName, POOL - aBlocks - bBlocks, aBlocks + 2, BS);
    // B's user comes back, then A with its tool's result (B first: A's recompute under LRU would evict B).
    const b2 = await ask([...bMsgs, { role: "assistant", content: "Sunny." }, { role: "user", content: "and tomorrow." }]);
    const call = a1.choices[0].message.tool_calls![0];
    const a2 = await ask([...aMsgs, a1.choices[0].message as OpenAI.ChatCompletionMessageParam, { role: "tool", tool_call_id: call.id, content: "18 degrees." }]);
    const a = a2.usage!.prompt_tokens_details!.cached_tokens!;
    const b = b2.usage!.prompt_tokens_details!.cached_tokens!;
    return { a, b, aBlocks, bBlocks, sessions, aStatus: sessions[0] === undefined ? undefined : s.engine.sessions?.status(sessions[0]) };
  } finally {
    await s.shutdown();
  }
}

test("Engine infers sessions without prompt_cache_key: under \"agent\" a tool-waiting conversation keeps its prefix where LRU evicts it", async () => {
  const agent = await scenario("agent");
  // Agent-aware: B (idle) paid for C; A's prompt and answer are still cached.
  assert.ok(agent.a >= (agent.aBlocks - 2) * BS, `agent: A's second turn found ${agent.a} cached tokens of ${agent.aBlocks * BS}`);
  assert.ok(agent.b <= (agent.bBlocks - agent.aBlocks) * BS, `agent: B lost A's worth of blocks (found ${agent.b} cached tokens)`);
  const [a1, b1, c, , a2] = agent.sessions;
  assert.ok(a1 !== undefined && b1 !== undefined && c !== undefined, `every request got a session: ${agent.sessions.join(", ")}`);
  assert.equal(new Set([a1, b1, c]).size, 3, "A, B and C start conversations of their own (B shares A's first block only)");
  assert.equal(a2, a1, "A's second turn, holding A's first answer, continues A's session");
  assert.equal(agent.aStatus, "idle", "A's second turn ended A's tool wait (the server reported the call for the inferred session)");
  // LRU: no sessions at all; A, released first, paid for C (but for the first block, which B's prompt shares).
  const lru = await scenario("lru");
  assert.deepEqual(lru.sessions, [undefined, undefined, undefined, undefined, undefined]);
  assert.ok(lru.a <= BS, `lru: A's second turn found ${lru.a} cached tokens`);
  assert.ok(lru.b >= (lru.bBlocks - 4) * BS, `lru: B kept its blocks (found ${lru.b} cached tokens)`);
});
