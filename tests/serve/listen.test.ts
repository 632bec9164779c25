/** listen(): an address the server cannot have is one ListenError naming it, on both runtimes. */
import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { listen, ListenError } from "../../src/serve/listen.ts";

const ok = () => new Response("ok");

test("listen() rejects a port already in use with a ListenError naming host:port", async () => {
  const first = await listen(ok, "127.0.0.1", 0);
  try {
    await assert.rejects(listen(ok, "127.0.0.1", first.port), (e) => {
      assert.ok(e instanceof ListenError, String(e));
      assert.match(e.message, new RegExp(`^Cannot listen on 127\\.0\\.0\\.1:${first.port}: .*in use`, "i"));
      assert.equal(e.message.split("\n").length, 1);
      return true;
    });
  } finally {
    await first.close();
  }
});
