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
