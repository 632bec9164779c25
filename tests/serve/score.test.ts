/**
 * vLLM's `/score` and `/rerank` on the served model as an embedding model: cosine similarities of
 * the texts' embeddings (the same vectors `/v1/embeddings` returns), paired one-to-many or
 * pairwise, and documents ranked by them; the 400s and 405s.
 */
import assert from "node:assert/strict";
import { projectRoot, test } from "../harness.ts";
import { loadModel } from "../../src/model/load.ts";
import { startServer } from "../../src/serve/server.ts";

const modelPath = `${projectRoot}/models/stories260K.gguf`;
const model = await loadModel(modelPath);
const QUERY = "Lily went to the park with her dog.";
const DOCS = ["Lily went to the park with her dog.", "Tom had a big red ball.", "The sun was hot and the sky was blue.", "Lily and her dog played in the park."];

type Json = Record<string, unknown>;

test("/score and /rerank give the cosine similarities of the texts' embeddings, paired and ranked", async () => {
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 64 });
  const post = async (path: string, body: Json) => {
    const r = await fetch(`${s.url}${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
    return { status: r.status, json: await r.json() as Json };
  };
  try {
    const emb = await post("/v1/embeddings", { model: "stories260K", input: [QUERY, ...DOCS], encoding_format: "float" });
    const vec = (emb.json.data as { embedding: number[] }[]).map((d) => d.embedding);
    const cos = (a: number[], b: number[]) => a.reduce((x, v, i) => x + v * b[i], 0);
    const want = DOCS.map((_, i) => cos(vec[0], vec[i + 1]));
    // One against many.
    const one = await post("/score", { model: "stories260K", text_1: QUERY, text_2: DOCS });
    assert.equal(one.status, 200, JSON.stringify(one.json));
    const got = (one.json.data as { index: number; score: number }[]);
    got.forEach((d, i) => {
      assert.equal(d.index, i);
      assert.ok(Math.abs(d.score - want[i]) < 1e-5, `pair ${i}: ${d.score} vs ${want[i]}`);
    });
    assert.ok(Math.abs(got[0].score - 1) < 1e-5, "a text against itself scores 1");
    // Pairwise, under the /v1 prefix.
    const pairwise = await post("/v1/score", { text_1: [DOCS[1], DOCS[2]], text_2: [DOCS[1], QUERY] });
    const p = pairwise.json.data as { score: number }[];
    assert.ok(Math.abs(p[0].score - 1) < 1e-5 && Math.abs(p[1].score - cos(vec[3], vec[0])) < 1e-5, JSON.stringify(p));
    // Rerank: best first, the top 2, with the documents' indexes and texts.
    for (const path of ["/rerank", "/v1/rerank", "/v2/rerank"]) {
      const r = await post(path, { model: "stories260K", query: QUERY, documents: DOCS, top_n: 2 });
      const results = r.json.results as { index: number; relevance_score: number; document?: { text: string } }[];
      const order = want.map((score, index) => ({ index, score })).sort((a, b) => b.score - a.score).slice(0, 2);
      assert.deepEqual(results.map((x) => x.index), order.map((x) => x.index), path);
      results.forEach((x, i) => {
        assert.ok(Math.abs(x.relevance_score - order[i].score) < 1e-5);
        assert.equal(x.document?.text, DOCS[x.index]);
      });
    }
    const bare = await post("/rerank", { query: QUERY, documents: DOCS, return_documents: false });
    assert.equal((bare.json.results as Json[]).length, DOCS.length);
    assert.ok((bare.json.results as Json[]).every((x) => !("document" in x)));
    // What it refuses.
    assert.equal((await post("/score", { text_1: ["a", "b"], text_2: ["a", "b", "c"] })).status, 400);
    const empty = await post("/score", { text_1: "a", text_2: ["b", ""] });
    assert.equal(empty.status, 400);
    assert.equal((empty.json.error as { param: string }).param, "text_2[1]", "the empty text is named by its field and index");
    assert.equal((await post("/rerank", { query: QUERY, documents: [] })).status, 400);
    assert.equal((await post("/score", { model: "other", text_1: "a", text_2: "b" })).status, 404);
    assert.equal((await fetch(`${s.url}/rerank`)).status, 405);
  } finally {
    await s.shutdown();
  }
});
