import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { WorkerDirectory } from "../../src/cluster/worker-directory.ts";
import { controlSubjects, ControlPlaneError, parseAnnouncement } from "../../src/cluster/nats-membership.ts";

const ready = (id: string, addr = "10.0.0.1:9001") => ({ id, addr, state: "ready" as const });
const leaving = (id: string, addr = "10.0.0.1:9001") => ({ id, addr, state: "leaving" as const });

test("WorkerDirectory.observe() joins a new worker once, however often it beats", () => {
  const d = new WorkerDirectory();
  assert.deepEqual(d.observe(ready("a"), 0), { kind: "join", id: "a", addr: "10.0.0.1:9001" });
  assert.equal(d.observe(ready("a"), 1000), null, "still joining: no second join");
  assert.equal(d.joined("a"), true);
  assert.equal(d.observe(ready("a"), 2000), null);
  assert.equal(d.status("a"), "member");
});

test("WorkerDirectory.observe() drains a leaving member, and one leaving while it joins is taken out after", () => {
  const d = new WorkerDirectory();
  d.observe(ready("a"), 0);
  d.joined("a");
  assert.deepEqual(d.observe(leaving("a"), 10), { kind: "leave", id: "a" });
  assert.equal(d.observe(leaving("a"), 20), null, "one drain per leave");
  d.gone("a");
  assert.equal(d.observe(leaving("a"), 30), null, "an unknown worker leaving changes nothing");
  d.observe(ready("b"), 0);
  assert.deepEqual(d.observe(leaving("b"), 5), { kind: "leave", id: "b" });
  assert.equal(d.joined("b"), false, "the join finished after the leave: the caller takes it out");
});

test("WorkerDirectory.failed() holds a worker's heartbeats off until the retry time, and a restart at a new address replaces it", () => {
  const d = new WorkerDirectory({ retryMs: 5000 });
  d.observe(ready("a"), 0);
  d.failed("a", 100);
  assert.equal(d.observe(ready("a"), 1000), null);
  assert.deepEqual(d.observe(ready("a"), 5200), { kind: "join", id: "a", addr: "10.0.0.1:9001" });
  assert.deepEqual(d.observe(ready("c", "10.0.0.9:1"), 0)?.kind, "join");
  d.failed("c", 0);
  assert.deepEqual(d.observe(ready("c", "10.0.0.9:2"), 1)?.kind, "join", "a new address is tried at once");
  d.joined("a");
  assert.deepEqual(d.observe(ready("a", "10.0.0.1:9002"), 6000), { kind: "replace", id: "a", addr: "10.0.0.1:9002" });
  assert.equal(d.joined("a"), true);
});

test("parseAnnouncement() takes worker announcements only, and controlSubjects() refuses names NATS cannot carry", () => {
  assert.deepEqual(parseAnnouncement(JSON.stringify({ id: "w", addr: "[::1]:9001", state: "ready", extra: 1 })), { id: "w", addr: "[::1]:9001", state: "ready" });
  for (const bad of ["", "nope", "null", "[]", '{"id":"w","addr":"h","state":"ready"}', '{"id":"","addr":"h:1","state":"ready"}', '{"id":"w","addr":"h:1","state":"gone"}', '{"id":7,"addr":"h:1","state":"ready"}']) {
    assert.equal(parseAnnouncement(bad), null, bad);
  }
  assert.deepEqual(controlSubjects("prod-1"), { workers: "evolving.prod-1.workers", discover: "evolving.prod-1.discover" });
  assert.throws(() => controlSubjects("a.b"), (e: unknown) => e instanceof ControlPlaneError && /got "a\.b"/.test(e.message));
  assert.throws(() => controlSubjects("*"), ControlPlaneError);
});

test("splitCredentials() takes a token or a user and password out of a NATS URL", async () => {
  const { splitCredentials } = await import("../../src/cluster/nats-membership.ts");
  assert.deepEqual(splitCredentials("nats://10.0.0.5:4222"), { server: "nats://10.0.0.5:4222", auth: {} });
  assert.deepEqual(splitCredentials("nats://s3cret@10.0.0.5:4222"), { server: "nats://10.0.0.5:4222", auth: { token: "s3cret" } });
  assert.deepEqual(splitCredentials("nats://ann:p%40ss:w@h:1"), { server: "nats://h:1", auth: { user: "ann", pass: "p@ss:w" } });
  assert.deepEqual(splitCredentials("tok@h:1"), { server: "h:1", auth: { token: "tok" } });
});
