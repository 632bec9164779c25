import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { SessionHomes } from "../../src/sim/session-homes.ts";

test("SessionHomes counts each live session on the worker that served its last turn", () => {
  const h = new SessionHomes();
  h.set("a", "w0");
  h.set("b", "w0");
  h.set("c", "w1");
  assert.deepEqual([h.count("w0"), h.count("w1"), h.count("w2")], [2, 1, 0]);
  h.set("a", "w0");
  assert.equal(h.count("w0"), 2, "another turn on its home counts once");
  h.set("a", "w2");
  assert.deepEqual([h.count("w0"), h.count("w2"), h.get("a")], [1, 1, "w2"], "a moved session leaves its old home");
  h.delete("a");
  h.delete("a");
  h.delete("never");
  assert.deepEqual([h.count("w2"), h.get("a")], [0, undefined], "an ended session counts nowhere, once");
});
