/**
 * A keyless agent's next turn is placed in its session even when the answer before it (a short tool
 * call) filled no KV block of its own, so no cached block names the session, or when the template sent
 * the answer back otherwise (its reasoning dropped): the engine remembers each turn's prompt end by its
 * last full block, the tokens after it and the answer's first (EngineSessions.rememberEnd / infer).
 * Before, each such turn started a new session and the old one stayed "waiting-tool" until its
 * time-to-live.
 */
import assert from "node:assert/strict";
import { projectRoot, test } from "../harness.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { createEngine } from "../../src/engine/engine-factory.ts";
import { EngineSessions } from "../../src/engine/engine-sessions.ts";
import { loadModel } from "../../src/model/load.ts";

const model = await loadModel(`${projectRoot}/models/stories260K.gguf`);
const BS = 16;

test("Engine.submit() places a keyless turn that continues a short answer in that answer's session", async () => {
  const e = createEngine(createReferenceBackend(), model, { numBlocks: 64, blockSize: BS, kvRetention: "agent" });
  try {
    // 20 prompt tokens and a 3-token answer: the answer ends inside the second block, which is never cached.
    const prompt = model.tokenizer.encode("Once upon a time there was a little girl named Lily who lived in a small house with her mom and dad", { addBos: true }).slice(0, 20);
    assert.equal(prompt.length, 20);
    const first = e.submit({ prompt, maxTokens: 3, temperature: 0, ignoreEos: true });
    const r1 = await first.result;
    assert.equal(r1.tokenIds.length, 3);
    assert.match(first.sessionId ?? "", /^~/);
    e.markToolWait(first.sessionId!, "get_weather");
    // The next turn: the whole conversation so far, then the tool's answer.
    const next = [...prompt, ...r1.tokenIds, ...model.tokenizer.encode(" and the sun", { addBos: false })];
    const second = e.submit({ prompt: next, maxTokens: 2, temperature: 0, ignoreEos: true });
    assert.equal(second.sessionId, first.sessionId, "the same conversation");
    await second.result;
    assert.deepEqual(e.sessionStatusCounts(), { running: 0, "waiting-tool": 0, idle: 1 }, "one session, its wait over");
    // A retry of the first prompt (no answer in it) and another conversation sharing the first block start sessions of their own.
    const retry = e.submit({ prompt, maxTokens: 1, temperature: 0, ignoreEos: true });
    const other = e.submit({ prompt: [...prompt.slice(0, BS), ...prompt.slice(BS).reverse(), 5], maxTokens: 1, temperature: 0, ignoreEos: true });
    assert.notEqual(retry.sessionId, first.sessionId);
    assert.notEqual(other.sessionId, first.sessionId);
    await Promise.all([retry.result, other.result]);
  } finally {
    await e.stop();
  }
});

test("EngineSessions.infer() matches a remembered end only in its cache namespace, past the prompt's end, the answer's first token first", () => {
  const s = new EngineSessions(3600);
  const turn = [...Array.from({ length: 16 }, (_, i) => 100 + i), 1, 2, 3, 4, /* answer */ 7, 8];
  s.rememberEnd("a", turn, 20, 16);
  s.rememberEnd("ns", turn, 20, 16, 99);
  const cont = [...turn, 9, 9];
  assert.equal(s.infer(cont, [{}], 16, 1, 16), "a");
  assert.equal(s.infer(cont, [{}], 16, 2, 16, 99), "ns", "the namespace's own");
  assert.equal(s.infer(cont, [{}], 16, 3, 16, 42), "~3", "another namespace: a new conversation");
  assert.equal(s.infer([...turn.slice(0, 20), 5, 9], [{}], 16, 4, 16), "a", "the answer rendered back otherwise: the whole prompt is still repeated");
  assert.equal(s.infer(turn.slice(0, 20), [{}], 16, 5, 16), "~5", "a retry of the prompt goes no further: a new conversation");
  assert.equal(s.infer([...turn.slice(0, 19), 6, 9], [{}], 16, 6, 16), "~6", "an edited prompt");
  assert.equal(s.infer(cont, [], 0, 7, 16), "~7", "the anchor block not cached: nothing to go by");
  // The same prompt answered again (another branch): a next turn follows the answer it sends back, else the latest.
  s.rememberEnd("b", [...turn.slice(0, 20), 6, 6], 20, 16);
  assert.equal(s.infer(cont, [{}], 16, 8, 16), "a", "it sends back a's answer");
  assert.equal(s.infer([...turn.slice(0, 20), 6, 9], [{}], 16, 9, 16), "b");
  assert.equal(s.infer([...turn.slice(0, 20), 5, 9], [{}], 16, 10, 16), "b", "neither answer: the latest turn");
});

test("Engine.submit() places a keyless turn whose template dropped the answer's reasoning in that answer's session", async () => {
  const e = createEngine(createReferenceBackend(), model, { numBlocks: 64, blockSize: BS, kvRetention: "agent" });
  try {
    const prompt = model.tokenizer.encode("Once upon a time there was a little girl named Lily who lived in a small house with her mom and dad", { addBos: true }).slice(0, 20);
    // A 24-token answer fills a block of its own: cached, typed "output", but never sent back.
    const first = e.submit({ prompt, maxTokens: 24, temperature: 0, ignoreEos: true });
    const r1 = await first.result;
    e.markToolWait(first.sessionId!, "shell");
    // The next turn renders only the call (say, the answer's last tokens), then the tool's result.
    const next = [...prompt, ...r1.tokenIds.slice(20), ...model.tokenizer.encode(" and the sun", { addBos: false })];
    const second = e.submit({ prompt: next, maxTokens: 2, temperature: 0, ignoreEos: true });
    assert.equal(second.sessionId, first.sessionId, "the same conversation");
    await second.result;
    assert.deepEqual(e.sessionStatusCounts(), { running: 0, "waiting-tool": 0, idle: 1 }, "one session, its wait over");
  } finally {
    await e.stop();
  }
});
