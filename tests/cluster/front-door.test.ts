import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { type DoorState, passFrontDoor } from "../../src/cluster/front-door.ts";
import { EngineOverloadedError, type GenerateRequest, SessionRefusedError } from "../../src/engine/engine-types.ts";

/** A door with room in the queues, `budget` new sessions left, and session "seen" already served. */
const door = (budget: number, waiting = 0): DoorState => ({ waiting, maxWaiting: 8, newSessionBudget: budget, isNewSession: (k) => k !== "seen" });
const req = (o: Partial<GenerateRequest>): GenerateRequest => ({ prompt: [1, 2, 3], ...o });

test("passFrontDoor() counts unseen keys and keyless opening turns as new sessions, and nothing else", () => {
  assert.equal(passFrontDoor(req({ sessionId: "fresh" }), door(1)), true);
  assert.equal(passFrontDoor(req({ sessionId: "seen" }), door(1)), false);
  assert.equal(passFrontDoor(req({ openingTurn: true }), door(1)), true, "a keyless chat with no answer yet opens a conversation");
  assert.equal(passFrontDoor(req({ openingTurn: false }), door(1)), false, "a keyless turn holding an answer returns");
  assert.equal(passFrontDoor(req({}), door(1)), false, "a raw prompt without a key says neither");
  assert.equal(passFrontDoor(req({ sessionId: "fresh", openingTurn: false }), door(1)), false, "an unseen key with an answer returns (a restarted cluster's agent)");
});

test("passFrontDoor() refuses only new sessions once the budget is spent, naming what it refused", () => {
  assert.throws(() => passFrontDoor(req({ sessionId: "fresh" }), door(0)), (e: unknown) => e instanceof SessionRefusedError && /No room for new session "fresh"/.test(e.message));
  assert.throws(() => passFrontDoor(req({ openingTurn: true }), door(0)), (e: unknown) => e instanceof SessionRefusedError && /No room for a new conversation/.test(e.message));
  for (const r of [req({ sessionId: "seen" }), req({ openingTurn: false }), req({}), req({ sessionId: "fresh", openingTurn: false })]) {
    assert.equal(passFrontDoor(r, door(0)), false, JSON.stringify(r));
  }
  assert.equal(passFrontDoor(req({ sessionId: "fresh" }), door(Infinity)), true, "no budget set: everyone enters");
});

test("passFrontDoor() refuses every request once the queues hold maxWaiting, quoting the bound", () => {
  assert.throws(() => passFrontDoor(req({ sessionId: "seen" }), door(5, 8)), (e: unknown) => e instanceof EngineOverloadedError && /8 requests are already waiting/.test(e.message));
  assert.equal(passFrontDoor(req({ sessionId: "seen" }), door(5, 7)), false);
});
