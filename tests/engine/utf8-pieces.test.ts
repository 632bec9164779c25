/**
 * Output grammars over tokens that are pieces of UTF-8 characters: the byte splitting
 * (utf8-pieces.ts), the trie's masks checked against a brute force over every token and code point,
 * and the story model (SentencePiece, byte fallback: every character past ASCII is byte tokens)
 * writing such characters where a grammar asks for them.
 */
import assert from "node:assert/strict";
import { projectRoot, test } from "../harness.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { createEngine } from "../../src/engine/engine-factory.ts";
import type { GenerateRequest } from "../../src/engine/engine-types.ts";
import { grammarStart, grammarStep, type OutputGrammar } from "../../src/engine/grammar.ts";
import { wideCharEdges } from "../../src/engine/grammar-wide-chars.ts";
import { OutputConstraint, TokenTrie } from "../../src/engine/output-constraint.ts";
import { type PieceState } from "../../src/engine/token-trie.ts";
import { charBytes, completionRange, decodeChar, splitPiece } from "../../src/engine/utf8-pieces.ts";
import { loadModel } from "../../src/model/load.ts";

const hex = (s: string) => s.split(" ").map((h) => parseInt(h, 16));

test("splitPiece() splits a token's bytes into the end of a character, whole characters and the start of one", () => {
  assert.deepEqual(splitPiece(hex("e6 97 a5 e6")), { head: [], text: "日", lead: [0xe6] });
  assert.deepEqual(splitPiece(hex("97 a5 61 e6 9c")), { head: [0x97, 0xa5], text: "a", lead: [0xe6, 0x9c] });
  assert.deepEqual(splitPiece(hex("a5")), { head: [0xa5], text: "", lead: [] });
  assert.deepEqual(splitPiece(hex("f0 9f")), { head: [], text: "", lead: [0xf0, 0x9f] });
  assert.deepEqual(splitPiece(charBytes("é")), { head: [], text: "é", lead: [] });
  for (const bad of ["c0 80", "ff", "e0 80", "ed a0", "f4 90", "61 c3 61", "80 80 80 80"]) assert.equal(splitPiece(hex(bad)), null, bad);
});

test("completionRange() and decodeChar() follow UTF-8's limits on the second byte", () => {
  const range = (h: string) => completionRange(hex(h)).map((cp) => cp.toString(16));
  assert.deepEqual(range("c3"), ["c0", "ff"]);
  assert.deepEqual(range("e0"), ["800", "fff"], "no overlong forms");
  assert.deepEqual(range("ed"), ["d000", "d7ff"], "no surrogates");
  assert.deepEqual(range("e6 97"), ["65c0", "65ff"]);
  assert.deepEqual(range("f0"), ["10000", "3ffff"]);
  assert.deepEqual(range("f4"), ["100000", "10ffff"], "nothing past U+10FFFF");
  assert.equal(decodeChar(charBytes("😀")), 0x1f600);
  assert.equal(decodeChar(hex("ed a0 80")), null, "a surrogate");
  assert.equal(decodeChar(hex("e6 97")), null, "cut short");
});

/** A byte-level vocabulary: every single byte, whole ASCII and wide tokens, and multi-byte pieces. */
const BYTE_TOKENS: number[][] = [
  [], // 0: EOS
  ...Array.from({ length: 256 }, (_, b) => [b]),
  ...["{", '"', '{"', "}", '"}', ":", ": ", '": "', " ", "a", "b", "ab", "x", "名", "日本", "é", '"名', "Zü"].map(charBytes),
  hex("e6 97"), // the first two bytes of 日 (e6 97 a5) and 旦, 旧...
  hex("97 a5"), // the end of 日
  hex("a5 e6 9c"), // the end of 日, the start of 本 (e6 9c ac)
  hex("ac 22"), // the end of 本, then a quote
  [0x61, 0xe5], // "a", then the start of 名 (e5 90 8d) and many more
  [0x22, 0xc3], // a quote, then the start of é (c3 a9)
  hex("f0 9f 98"), // the first three bytes of 😀 (f0 9f 98 80)
  hex("80 22 7d"), // the end of 😀, `"}`
];
const TEXTS = BYTE_TOKENS.map((b) => new TextDecoder().decode(Uint8Array.from(b)));
const TRIE = new TokenTrie(TEXTS, (id) => Uint8Array.from(BYTE_TOKENS[id]));

/**
 * What a token may do from `at`, by brute force: feed its bytes one character at a time (every code
 * point a lead's range holds tried, not the grammar's edges).
 */
function bruteAllowed(at: PieceState): number[] {
  const ok: number[] = [];
  for (let id = 1; id < BYTE_TOKENS.length; id++) {
    const next = TRIE.feed(at, id);
    if (next === null) continue;
    if (next.pending.length === 0) ok.push(id);
    else {
      const [lo, hi] = completionRange(next.pending);
      for (let cp = lo; cp <= hi; cp++) {
        if (grammarStep(next.state, String.fromCodePoint(cp)).length > 0) {
          ok.push(id);
          break;
        }
      }
    }
  }
  return ok;
}

/** The piece states along `tokens` (ids into BYTE_TOKENS) from `g`'s start. */
function statesAlong(g: OutputGrammar, tokens: readonly number[]): PieceState[] {
  let at: PieceState = { state: grammarStart(g), pending: [] };
  const out = [at];
  for (const id of tokens) {
    const next = TRIE.feed(at, id);
    assert.ok(next !== null, `token ${id} (${JSON.stringify(TEXTS[id])}) feeds`);
    out.push((at = next));
  }
  return out;
}

const byteId = (b: number) => 1 + b;
const idOf = (bytes: number[]) => BYTE_TOKENS.findIndex((t) => t.length === bytes.length && t.every((x, i) => x === bytes[i]));

test("TokenTrie.allowed() places pieces of characters exactly where feeding them token by token could go on", () => {
  const cases: [OutputGrammar, number[]][] = [
    // Free string: "日本" from pieces, then 😀 from its first three bytes and its last one.
    [{ kind: "json", schema: { type: "object", properties: { s: { type: "string" } } } }, [idOf(charBytes('{"')), byteId(0x73), idOf(charBytes('": "')), idOf(hex("e6 97")), idOf(hex("a5 e6 9c")), byteId(0xac), idOf(hex("f0 9f 98")), idOf(hex("80 22 7d"))]],
    // An enum of wide words: only the pieces that lead into one of them.
    [{ kind: "json", schema: { enum: ["日本", "日旦", "é", "名前"] } }, [idOf(charBytes('"')), idOf(hex("e6 97")), byteId(0xa5), byteId(0xe6), byteId(0x9c), byteId(0xac), idOf(charBytes('"'))]],
    // A pattern over a class of CJK characters.
    [{ kind: "json", schema: { type: "string", pattern: "^[一-龥]{2}x$" } }, [idOf(charBytes('"')), idOf(hex("e6 97")), byteId(0xa5), idOf(charBytes("名")), idOf(charBytes("x"))]],
    // A regex grammar whose only wide character is one 4-byte emoji.
    [{ kind: "regex", pattern: "a(😀|b)+" }, [idOf(charBytes("a")), idOf(hex("f0 9f 98")), byteId(0x80), idOf(charBytes("b"))]],
    // A choice and a key with wide characters.
    [{ kind: "choice", choices: ["Zürich", "Zug"] }, [idOf(charBytes("Zü")), byteId(0x72)]],
    [{ kind: "json", schema: { type: "object", properties: { 名前: { type: "integer" } }, required: ["名前"] } }, [idOf(charBytes('{"')), idOf(charBytes("名")), byteId(0xe5), byteId(0x89), byteId(0x8d), idOf(charBytes('"'))]],
  ];
  for (const [g, tokens] of cases) {
    const edges = wideCharEdges(g, grammarStart(g));
    for (const [i, at] of statesAlong(g, tokens).entries()) {
      const brute = bruteAllowed(at);
      const got = [...TRIE.allowed(at, () => edges)].sort((a, b) => a - b);
      assert.deepEqual(got, brute, `${JSON.stringify(g)} after ${i} tokens (pending ${at.pending})`);
      if (i < tokens.length) assert.ok(got.includes(tokens[i]), `the path's next token ${tokens[i]} is allowed`);
    }
  }
});

test("OutputConstraint ends a pieced answer only once its last character is whole", () => {
  const g: OutputGrammar = { kind: "choice", choices: ["日"] };
  const c = new OutputConstraint(g, TRIE, [0]);
  const out: number[] = [];
  const allowedIds = () => {
    const m = c.next(out, 0);
    return TEXTS.flatMap((_, id) => (m.allows(id) ? [id] : []));
  };
  assert.deepEqual(allowedIds(), [byteId(0xe6), idOf(hex("e6 97"))], "the lead byte, or the first two bytes");
  out.push(idOf(hex("e6 97")));
  assert.deepEqual(allowedIds(), [byteId(0xa5)], "only a5 finishes 日 after e6 97 (97 a5 is a byte too many)");
  out.push(byteId(0xa5));
  assert.deepEqual(allowedIds(), [0], "then only EOS");
  assert.equal(c.forced(out, 0, 8).length, 0);
});

test("TokenTrie.cover() never spells a forced character with pieces, nor cuts off a token that begins it", () => {
  const spell = (text: string) => TRIE.cover(text).map((id) => TEXTS[id]);
  assert.deepEqual(spell("ab日本"), ["ab", "日本"]);
  assert.deepEqual(spell("ab前"), ["ab"], "前 exists only as pieces: the model picks them");
  assert.deepEqual(spell("b a名"), ["b", " "], "`a` then e5 is a token that begins 名: not cut to `a`");
});

test("wideCharEdges() finds the grammar's wide literals and class edges", () => {
  const g: OutputGrammar = { kind: "json", schema: { type: "object", properties: { 名: { type: "string", pattern: "[α-ω]" } } } };
  const edges = wideCharEdges(g, grammarStart(g));
  for (const cp of [0x540d, 0x540e, 0x3b1, 0x3ca]) assert.ok(edges.includes(cp), cp.toString(16));
});

const model = await loadModel(`${projectRoot}/models/stories260K.gguf`);
const prompt = model.tokenizer.encode("Once upon a time", { addBos: true });

async function generate(extra: Partial<GenerateRequest>, jumpForward = true) {
  const e = createEngine(createReferenceBackend(), model, { numBlocks: 64, jumpForward });
  try {
    const h = e.submit({ prompt, maxTokens: 40, temperature: 1, seed: 3, ...extra });
    let text = "";
    for await (const d of h.stream) text += d.text;
    return { text, result: await h.result };
  } finally {
    await e.stop();
  }
}

test("Engine writes characters its vocabulary has only as byte tokens where a grammar asks for them", async () => {
  // The story model's 512 tokens hold no character past ASCII: é, 日 and 😀 are 2, 3 and 4 byte tokens.
  for (const pattern of ["caf(é|e) au lait", "日本|中国", "ok 😀"]) {
    for (const jumpForward of [true, false]) {
      const { text, result } = await generate({ grammar: { kind: "regex", pattern } }, jumpForward);
      assert.match(text, new RegExp(`^(${pattern})$`, "u"), `${pattern} (jump ${jumpForward})`);
      assert.equal(result.finishReason, "stop");
    }
  }
  const { text } = await generate({ grammar: { kind: "json", schema: { type: "object", properties: { city: { enum: ["Zürich", "東京"] } }, required: ["city"] } } });
  assert.ok(["Zürich", "東京"].includes((JSON.parse(text) as { city: string }).city), text);
});

test("grammarStep() takes a \\u escape's hex digit under a pattern only where some ending of the escape fits", () => {
  const g: OutputGrammar = { kind: "json", schema: { type: "string", pattern: "^([一-龥]|[αβ]|x)+$" } };
  const open = grammarStep(grammarStart(g), '"');
  const fed = (text: string) => [...text].reduce((s, c) => grammarStep(s, c), open);
  const fits = (cp: number) => fed(`\\u${cp.toString(16).padStart(4, "0")}`).length > 0;
  // Brute force: a prefix of hex digits is taken exactly when some four-digit escape it begins is.
  for (const prefix of ["", "0", "00", "03", "03b", "03b3", "4", "9f", "9fa", "9fb", "e", "d8", "007", "0078"]) {
    const rest = 4 - prefix.length;
    const lo = prefix === "" ? 0 : parseInt(prefix, 16) * 16 ** rest;
    let some = false;
    for (let cp = lo; cp < lo + 16 ** rest && !some; cp++) some = fits(cp);
    assert.equal(fed(`\\u${prefix}`).length > 0, some, `\\u${prefix}`);
  }
});
