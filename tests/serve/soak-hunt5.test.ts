/**
 * Soak: what a long-running server keeps per request must stay bounded (a week of agent traffic),
 * by count and by size.
 */
import assert from "node:assert/strict";
import { eventually } from "../eventually.ts";
import { projectRoot, test } from "../harness.ts";
import { loadModel } from "../../src/model/load.ts";
import { parseSpeculativeConfig } from "../../src/engine/ngram-draft.ts";
import { startServer } from "../../src/serve/server.ts";
import type { GenerateResult, RequestHandle, StreamDelta } from "../../src/engine/engine-types.ts";
import type { ChatOutputOptions } from "../../src/serve/chat-output.ts";
import { ConversationStore } from "../../src/serve/conversation-store.ts";
import type { ServeContext } from "../../src/serve/openai.ts";
import { ResponseStore } from "../../src/serve/response-store.ts";
import type { ResponsesState, ResponseTurn } from "../../src/serve/responses.ts";
import { BackgroundRuns } from "../../src/serve/responses-background.ts";

/** A background turn whose generation streams `deltas` deltas of `chars` characters, then fails. */
function bigTurn(id: string, deltas: number, chars: number): ResponseTurn {
  const handle: RequestHandle = {
    id: 1,
    stream: (async function* () {
      for (let i = 0; i < deltas; i++) yield { text: "x".repeat(chars), tokenIds: [1] } satisfies StreamDelta;
      throw new Error("the engine stopped");
    })(),
    result: new Promise<GenerateResult>(() => {}),
    cancel: () => {},
  };
  const output: ChatOutputOptions = { reasoning: false, startsInReasoning: false, toolCalls: false, parallelToolCalls: true };
  return {
    id, submitted: { kind: "chat", handles: [handle], perPrompt: 1, n: 1, output }, shell: { id, background: true },
    store: true, inputItems: [], input: [], previousId: null, conversation: null, sessionId: undefined, maxToolCalls: Infinity,
    namespaceOf: new Map(), logprobs: false,
  };
}

test("finished background runs' event logs stay within their size bound, and the newest can still be replayed", async () => {
  const keptChars = 200_000;
  const runs = new BackgroundRuns(64, keptChars);
  const state: ResponsesState = { responses: new ResponseStore(1000), conversations: new ConversationStore(8), background: runs };
  let largest = 0;
  for (let i = 0; i < 60; i++) {
    const id = `resp_${i}`;
    runs.start({} as ServeContext, state, bigTurn(id, 20, 1000), () => {});
    await runs.cancel(id);
    largest = Math.max(largest, runs.keptLogSize.chars);
  }
  assert.ok(largest <= keptChars, `event logs held ${largest} characters, over the bound of ${keptChars}`);
  assert.ok(runs.keptLogSize.logs >= 1 && runs.keptLogSize.logs < 60, `${runs.keptLogSize.logs} logs kept`);
  const replay = runs.follow("resp_59", -1);
  assert.ok(replay !== undefined, "the newest run's events are kept");
  assert.equal(runs.follow("resp_0", -1), undefined, "the oldest run's events were dropped");
});

test("a background run's log larger than the bound by itself is not kept, and nothing else is dropped for it", async () => {
  const runs = new BackgroundRuns(64, 50_000);
  const state: ResponsesState = { responses: new ResponseStore(1000), conversations: new ConversationStore(8), background: runs };
  runs.start({} as ServeContext, state, bigTurn("resp_small", 2, 100), () => {});
  await runs.cancel("resp_small");
  runs.start({} as ServeContext, state, bigTurn("resp_big", 100, 1000), () => {});
  await runs.cancel("resp_big");
  assert.equal(runs.follow("resp_big", -1), undefined);
  assert.ok(runs.follow("resp_small", -1) !== undefined, "the small log was kept");
  assert.ok(runs.keptLogSize.chars <= 50_000);
});

const modelPath = `${projectRoot}/models/stories260K.gguf`;
const model = await loadModel(modelPath);

test("a server keeps no per-request state after many sessions, streams cancelled mid-way, refusals and several choices", async () => {
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 64, speculative: parseSpeculativeConfig('{"method":"suffix","num_speculative_tokens":3,"suffix_decoding_max_cached_requests":20}') });
  try {
    const post = (body: Record<string, unknown>, signal?: AbortSignal) =>
      fetch(`${s.url}/v1/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "stories260K", max_tokens: 6, temperature: 0, ...body }), signal });
    for (let k = 0; k < 240; k++) {
      const prompt = `Once upon a time ${k} there was`;
      if (k % 4 === 0) {
        // Streamed, hung up on after the first chunk.
        const ctl = new AbortController();
        const r = await post({ prompt, stream: true, prompt_cache_key: `s-${k}` }, ctl.signal);
        await r.body!.getReader().read();
        ctl.abort();
      } else if (k % 4 === 1) {
        const r = await post({ prompt, n: 2, prompt_cache_key: `s-${k}` });
        assert.equal(r.status, 200);
        await r.json();
      } else if (k % 4 === 2) {
        const r = await post({ prompt, max_tokens: -1, prompt_cache_key: `s-${k}` });
        assert.equal(r.status, 400);
        await r.body?.cancel();
      } else {
        const r = await post({ prompt, stream: true });
        await r.text();
      }
    }
    // Hung-up streams end once the engine sees the cancel.
    // (Poll; the deadline only turns a hang into a failure, generous for a loaded CI machine.)
    await eventually(() => s.inFlight > 0 || s.engine.stats().running + s.engine.stats().waiting > 0, (busy) => !busy);
    assert.equal(s.inFlight, 0, "responses still counted in flight");
    const inner = s.engine as unknown as { active: Map<number, unknown>; wantDrafts: Set<number>; turns: { inFlight: Map<string, number> } };
    assert.equal(inner.active.size, 0, "finished requests left in the engine's active map");
    assert.equal(inner.wantDrafts.size, 0);
    assert.equal(inner.turns.inFlight.size, 0, "sessions still counted in flight");
    assert.equal(s.engine.sessionStatusCounts()?.running ?? 0, 0, "sessions left running are never pruned");
    assert.equal(s.engine.pool.numUsedBlocks(), 0);
  } finally {
    await s.shutdown();
  }
});
