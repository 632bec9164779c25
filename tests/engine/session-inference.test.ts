/**
 * Session inference in the engine: a request without a session key continues the conversation
 * whose generated tokens its prompt's cached prefix holds, or starts one of its own.
 */
import assert from "node:assert/strict";
import { projectRoot, test } from "../harness.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { loadModel } from "../../src/model/load.ts";
import { createEngine } from "../../src/engine/engine-factory.ts";
import { syntheticSessionId } from "../../src/engine/engine-sessions.ts";
import type { Engine } from "../../src/engine/engine.ts";
import type { GenerateRequest } from "../../src/engine/engine-types.ts";

const model = await loadModel(`${projectRoot}/models/stories260K.gguf`);

/** `n` token ids from a pattern picked by `seed` (all in the vocab). */
const tokens = (n: number, seed: number) => Array.from({ length: n }, (_, i) => 2 + ((i * 7 + seed * 13) % 400));
const SYSTEM = tokens(32, 1); // two blocks of 16

/** Submits and waits; returns the session the engine placed the request in and its generated tokens. */
async function turn(e: Engine, req: Omit<GenerateRequest, "maxTokens">): Promise<{ session: string | undefined; out: number[] }> {
  const h = e.submit({ maxTokens: 24, temperature: 0, ignoreEos: true, ...req });
  return { session: h.sessionId, out: (await h.result).tokenIds };
}

test("Engine.submit() infers a keyless request's session: a continuation gets the earlier answer's session, a shared system prompt does not", async () => {
  const e = createEngine(createReferenceBackend(), model, { numBlocks: 64 });
  // 40 prompt tokens + 23 computed outputs: blocks 0–2 cached, block 2 (positions 32–47) holds output.
  const p1 = [...SYSTEM, ...tokens(8, 2)];
  const t1 = await turn(e, { prompt: p1 });
  assert.equal(t1.session, syntheticSessionId(0), "a first turn starts a conversation");
  e.markToolWait(t1.session!, "grep");
  assert.equal(e.sessions!.status(t1.session!), "waiting-tool");
  const p2 = [...p1, ...t1.out, ...tokens(5, 3)];
  const h2 = e.submit({ prompt: p2, maxTokens: 12, temperature: 0, ignoreEos: true });
  assert.equal(h2.sessionId, t1.session, "the next turn holds the first answer: same conversation");
  assert.equal(e.sessions!.status(t1.session!), "running", "the inferred turn started the session's turn");
  const out2 = (await h2.result).tokenIds;
  assert.equal(e.sessions!.status(t1.session!), "idle", "and ended it");
  // 69 prompt tokens + 11 computed outputs: blocks 0–4 cached; 2 is t1's answer, 3 and 4 the continuation's.
  const metas = e.pool.probePrefix([...p2, ...out2]).metas;
  assert.deepEqual(metas.slice(2).map((m) => [m?.sessionId, m?.type]), [[t1.session, "output"], [t1.session, undefined], [t1.session, "output"]]);
  // Same system prompt, another question: a conversation of its own (request 2), not t1's.
  assert.equal((await turn(e, { prompt: [...SYSTEM, ...tokens(8, 4)] })).session, syntheticSessionId(2));
  // The first prompt again (a retry): its cached prefix holds no answer, so it is new too.
  assert.equal((await turn(e, { prompt: p1 })).session, syntheticSessionId(3));
  // An explicit key is kept, and a keyless continuation of its answer joins it.
  const k = [...tokens(40, 5)];
  const tk = await turn(e, { prompt: k, sessionId: "k" });
  assert.equal(tk.session, "k");
  assert.equal((await turn(e, { prompt: [...k, ...tk.out, 9] })).session, "k");
  // A key always wins over inference, even on another conversation's answer.
  assert.equal((await turn(e, { prompt: [...p1, ...t1.out, 9], sessionId: "x" })).session, "x");
  await e.stop();
});

test("Engine under kvRetention \"lru\" infers no session: a handle carries only the request's own key", async () => {
  const e = createEngine(createReferenceBackend(), model, { numBlocks: 64, kvRetention: "lru" });
  const p1 = [...SYSTEM, ...tokens(8, 2)];
  const t1 = await turn(e, { prompt: p1 });
  assert.equal(t1.session, undefined);
  assert.equal((await turn(e, { prompt: [...p1, ...t1.out, 9] })).session, undefined);
  assert.equal((await turn(e, { prompt: p1, sessionId: "k" })).session, "k");
  assert.equal(e.sessions, undefined);
  await e.stop();
});
