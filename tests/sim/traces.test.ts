import assert from "node:assert/strict";
import { test, sharedRoot } from "../harness.ts";
import { readTextFile } from "../../src/runtime/fs.ts";
import { parseAzure, parseMooncake, TraceFormatError } from "../../src/sim/traces.ts";

test("parseMooncake() maps shared hash_ids to shared prefixes and times to seconds", async () => {
  const text = await readTextFile(`${sharedRoot}/traces/mooncake_synthetic_trace.jsonl`);
  const w = parseMooncake(text, 1, 200);
  assert.equal(w.sessions.length, 200);
  assert.equal(w.blockTokens, 512);
  const t = w.sessions[2].turns[0];
  assert.equal(w.sessions[2].start, 0.04);
  assert.equal(t.fixedPromptTokens, 23769);
  assert.equal(t.fixedChunks!.length, Math.floor(23769 / 512));
  const firsts = new Map<number, number>();
  for (const s of w.sessions) { const c = s.turns[0].fixedChunks![0]; if (c !== undefined) firsts.set(c, (firsts.get(c) ?? 0) + 1); }
  assert.ok([...firsts.values()].some((n) => n > 1), "some requests share a first block");
  assert.throws(() => parseMooncake('{"timestamp": 1}'), TraceFormatError);
});

test("parseAzure() reads the code trace with unique blocks per request", async () => {
  const text = await readTextFile(`${sharedRoot}/traces/azure2023_code.csv`);
  const w = parseAzure(text, 1, 100);
  assert.equal(w.sessions.length, 100);
  assert.equal(w.sessions[0].turns[0].fixedPromptTokens, 4808);
  assert.equal(w.sessions[0].turns[0].outputTokens, 10);
  assert.ok(Math.abs(w.sessions[1].start - 0.052) < 1e-6);
  const a = new Set(w.sessions[0].turns[0].fixedChunks);
  assert.ok(w.sessions[1].turns[0].fixedChunks!.every((c) => !a.has(c)));
  assert.throws(() => parseAzure("time,x\n1,2"), /TIMESTAMP/);
});
