/** Reading named server-sent events (`event: TYPE` / `data: JSON`) in the serve tests. */
import assert from "node:assert/strict";

type Json = Record<string, unknown>;

/** A stream's events in order: each one's name and data; asserts each is named by its `type`. */
export function namedEvents(text: string): { name: string; data: Json }[] {
  return text.split("\n\n").filter((b) => b.trim() !== "").map((block) => {
    const name = /^event: (.+)$/m.exec(block)![1];
    const data = JSON.parse(/^data: (.+)$/m.exec(block)![1]) as Json;
    assert.equal(data.type, name, "each event is named by its type");
    return { name, data };
  });
}

/** POSTs `body` as JSON to `url` (with `headers`), expects a 200, and reads its named events. */
export async function postNamedEvents(url: string, body: Json, headers: Record<string, string> = {}): Promise<{ name: string; data: Json }[]> {
  const res = await fetch(url, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify(body) });
  const text = await res.text();
  assert.equal(res.status, 200, text.slice(0, 400));
  return namedEvents(text);
}
