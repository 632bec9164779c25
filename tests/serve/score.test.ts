/**
 * vLLM's `/score` and `/rerank` on the served model as an embedding model: cosine similarities of
 * the texts' embeddings (the same vectors `/v1/embeddings` returns), paired one-to-many or
 * pairwise, and documents ranked by them; the 400s and 405s.
 */
import assert from "node:assert/strict";
import { projectRoot, test } from "../harness.ts";
import { loadModel } from "../../src/model/load.ts";
import { MAX_SCORE_TEXTS } from "../../src/serve/score.ts";
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

test("/rerank names the query and each document by their own field, takes top_n 0 or less as all (vLLM) and {text} documents (Cohere's); scores stay within [-1, 1]", async () => {
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 64 });
  const post = async (path: string, body: Json) => {
    const r = await fetch(`${s.url}${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
    return { status: r.status, json: await r.json() as Json };
  };
  const refusal = async (path: string, body: Json) => {
    const r = await post(path, body);
    assert.equal(r.status, 400, JSON.stringify(r.json));
    return r.json.error as { param: string | null; message: string };
  };
  try {
    // The query is not documents[0], and documents keep their own indexes.
    assert.equal((await refusal("/rerank", { query: "", documents: DOCS })).param, "query");
    assert.equal((await refusal("/rerank", { query: QUERY, documents: [DOCS[0], ""] })).param, "documents[1]");
    assert.equal((await refusal("/v1/rerank", { query: QUERY, documents: ["x".repeat(30000), DOCS[0]] })).param, "documents[0]");
    // vLLM's default top_n is 0: every document; so is a negative one.
    const all = await post("/v2/rerank", { query: QUERY, documents: DOCS });
    const ranked = (all.json.results as { index: number }[]).map((x) => x.index);
    assert.equal(ranked.length, DOCS.length);
    for (const top_n of [0, -1]) {
      const r = await post("/v2/rerank", { query: QUERY, documents: DOCS, top_n });
      assert.equal(r.status, 200, JSON.stringify(r.json));
      assert.deepEqual((r.json.results as { index: number }[]).map((x) => x.index), ranked, `top_n ${top_n}`);
    }
    // Documents as {text} objects rank as their texts do, and come back as {text}.
    const objects = await post("/rerank", { query: QUERY, documents: DOCS.map((text, i) => (i % 2 ? { text } : text)), top_n: 2 });
    assert.equal(objects.status, 200, JSON.stringify(objects.json));
    const results = objects.json.results as { index: number; relevance_score: number; document: { text: string } }[];
    assert.deepEqual(results.map((x) => x.index), ranked.slice(0, 2));
    for (const x of results) assert.equal(x.document.text, DOCS[x.index]);
    // A cosine similarity is at most 1, a text against itself too (float32 rounding left it over).
    const self = await post("/score", { text_1: "a cat", text_2: ["a cat", "a dog", QUERY] });
    for (const d of self.json.data as { score: number }[]) assert.ok(d.score <= 1 && d.score >= -1, String(d.score));
    assert.ok(1 - (self.json.data as { score: number }[])[0].score < 1e-6);
    // Limits and empty lists say so, naming the field.
    const many = await refusal("/rerank", { query: QUERY, documents: Array(MAX_SCORE_TEXTS + 1).fill("a") });
    assert.equal(many.param, "documents");
    assert.match(many.message, new RegExp(`holds ${MAX_SCORE_TEXTS + 1} inputs; this server takes at most ${MAX_SCORE_TEXTS}`));
    const manyScores = await refusal("/score", { text_1: "a", text_2: Array(MAX_SCORE_TEXTS + 1).fill("a") });
    assert.equal(manyScores.param, "text_2");
    assert.match(manyScores.message, new RegExp(`at most ${MAX_SCORE_TEXTS}`));
    const none = await refusal("/score", { text_1: [], text_2: "a" });
    assert.equal(none.param, "text_1");
    assert.match(none.message, /The text_1 list is empty/);
    assert.match((await refusal("/score", { text_1: 5, text_2: "a" })).message, /must be a text or a list of texts \(got 5\)/);
  } finally {
    await s.shutdown();
  }
});

test("/score takes its two sides as queries and documents or data_1 and data_2 (newer vLLM) as well as text_1 and text_2", async () => {
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 64 });
  const post = async (path: string, body: Json) => {
    const r = await fetch(`${s.url}${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
    return { status: r.status, json: await r.json() as Json };
  };
  try {
    const scoresOf = (r: { json: Json }) => (r.json.data as { score: number }[]).map((d) => d.score);
    const want = scoresOf(await post("/score", { text_1: QUERY, text_2: DOCS }));
    for (const [a, b] of [["queries", "documents"], ["data_1", "data_2"]]) {
      const r = await post("/v1/score", { [a]: QUERY, [b]: DOCS });
      assert.equal(r.status, 200, JSON.stringify(r.json));
      assert.deepEqual(scoresOf(r), want, a);
      // Refusals name the fields the body used.
      const empty = await post("/score", { [a]: QUERY, [b]: [DOCS[0], ""] });
      assert.equal((empty.json.error as { param: string }).param, `${b}[1]`);
      const missing = await post("/score", { [a]: QUERY });
      assert.equal(missing.status, 400);
      assert.deepEqual([(missing.json.error as { param: string }).param, (missing.json.error as { code: string }).code], [b, "missing_required_parameter"]);
    }
    const none = await post("/score", {});
    assert.equal(none.status, 400);
    assert.match((none.json.error as { message: string }).message, /queries and documents, data_1 and data_2, or text_1 and text_2/);
  } finally {
    await s.shutdown();
  }
});
