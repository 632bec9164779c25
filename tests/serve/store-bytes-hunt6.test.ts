/**
 * Bug hunt: `--max-stored-mib` bounds the stored-response and conversation stores in MiB, so what they
 * hold is counted in UTF-8 bytes of JSON, not in JSON characters (UTF-16 code units): a text of
 * multi-byte characters (CJK: 3 bytes each, emoji: 4 for a 2-unit pair) held 3x or 2x the bound.
 */
import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { ConversationStore } from "../../src/serve/conversation-store.ts";
import { itemsSize, jsonSize, ResponseStore, type StoredResponse } from "../../src/serve/response-store.ts";

const bytes = (v: unknown) => new TextEncoder().encode(JSON.stringify(v)).length;

test("jsonSize() counts the UTF-8 bytes of a value's JSON: 1 per ASCII, 2 per é, 3 per CJK character, 4 per emoji", () => {
  assert.equal(jsonSize("abc"), 5);
  assert.equal(jsonSize("é".repeat(10)), 2 + 20);
  assert.equal(jsonSize("漢".repeat(10)), 2 + 30);
  assert.equal(jsonSize("😀".repeat(10)), 2 + 40);
  // A lone surrogate is written as a \uXXXX escape by JSON.stringify: 6 ASCII bytes.
  assert.equal(jsonSize("\ud800"), 2 + 6);
  const mixed = { text: "a é 漢 😀 \n \u0000 \"q\"", n: [1, 2.5, null, true], nested: { k: "ß".repeat(3) } };
  assert.equal(jsonSize(mixed), bytes(mixed));
  assert.equal(jsonSize(undefined), 0);
  assert.equal(itemsSize(["漢", "😀"]), bytes("漢") + bytes("😀"));
});

test("ResponseStore keeps no more UTF-8 bytes than its bound: a turn of CJK text counts 3 bytes a character", () => {
  const turn = (id: string, text: string): StoredResponse => ({
    id, previousId: null, sessionId: id, response: { id }, inputItems: [], input: [{ role: "user", content: text }], output: [],
  });
  const t = turn("a", "漢".repeat(1000));
  const store = new ResponseStore(100, 2000);
  store.put(t);
  assert.equal(store.get("a"), undefined, "3000+ bytes of JSON do not fit a 2000-byte bound");
  assert.equal(store.heldSize, 0);
  const big = new ResponseStore(100, 7000);
  big.put(t);
  assert.equal(big.heldSize, bytes(t));
  big.put(turn("b", "漢".repeat(1000)));
  big.put(turn("c", "漢".repeat(1000)));
  assert.ok(big.heldSize <= 7000, `held ${big.heldSize} bytes over a 7000-byte bound`);
  assert.equal(big.get("a"), undefined, "the oldest went to make room");
});

test("ConversationStore counts its items in UTF-8 bytes: emoji text fills the bound at 4 bytes a character", () => {
  const item = (text: string) => ({ type: "message", role: "user", content: [{ type: "input_text", text }] });
  const store = new ConversationStore(10, 3000);
  assert.ok(!store.fits(null, [item("😀".repeat(730))]), "2920 bytes of emoji and the item's JSON pass 3000 bytes");
  assert.ok(store.fits(null, [item("x".repeat(730))]));
  const c = store.create([item("😀".repeat(300))], {}, 0);
  assert.equal(c.size, bytes(c.items[0]));
  assert.equal(store.heldSize, c.size);
  store.append(c, [item("😀".repeat(600))]);
  assert.equal(store.get(c.id), undefined, "over the byte bound by itself, it is forgotten");
  assert.equal(store.heldSize, 0);
});
