/**
 * The Node server keeps V8's ArrayBufferDetaching protector intact while it serves: one detached
 * ArrayBuffer anywhere in the isolate slows every typed-array kernel compiled after it by 20–33 % on
 * Node 20 for the rest of the process (docs/results/bench-detach.md), and the single-engine server runs
 * its CPU kernels on its main thread. V8's `--trace-protector-invalidation` prints the invalidation,
 * once per isolate: tsx's loader thread prints one of its own while the server loads (it posts its
 * lexer's buffer to the main thread; its isolate runs no kernel), counted here on a module that does
 * nothing, so any more at start are the server's own.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import process from "node:process";
import OpenAI from "openai";
import { projectRoot, test } from "../harness.ts";
import { SERVE_COMMANDS, spawnServe } from "../serve-process.ts";

const INVALIDATED = "Invalidating protector cell ArrayBufferDetaching";
const invalidations = (out: string) => out.split(INVALIDATED).length - 1;

test("serve on Node detaches no ArrayBuffer while it starts and serves chat, streamed chat and completions", async () => {
  const s = await spawnServe("node", ["--port", "0", "--backend", "reference", "--kv-blocks", "32"], {}, ["--trace-protector-invalidation"]);
  try {
    // The loader's own, on a module that only exports functions.
    const [node, [importFlag, loader]] = SERVE_COMMANDS.node;
    const bare = spawnSync(node, ["--trace-protector-invalidation", importFlag, loader, `${projectRoot}/src/runtime/env.ts`], { encoding: "utf8", env: { ...process.env, NODE_OPTIONS: "" } });
    assert.equal(bare.status, 0, bare.stderr);
    const atStart = invalidations(s.stdout());
    assert.equal(atStart, invalidations(bare.stdout), `serve's own isolate detached a buffer while starting: ${s.stdout()}`);
    const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 });
    const chat = await client.chat.completions.create({ model: "stories260K", messages: [{ role: "user", content: "Once upon a time" }], max_tokens: 6 });
    assert.equal(chat.choices.length, 1);
    const stream = await client.chat.completions.create({ model: "stories260K", messages: [{ role: "user", content: "Once" }], max_tokens: 6, stream: true });
    let chunks = 0;
    for await (const _ of stream) chunks++;
    assert.ok(chunks > 1, `a streamed chat came in ${chunks} chunk(s)`);
    const completion = await client.completions.create({ model: "stories260K", prompt: "Once", max_tokens: 4 });
    assert.equal(completion.choices.length, 1);
    // A bad body takes the error path too.
    await assert.rejects(client.chat.completions.create({ model: "stories260K", messages: [], max_tokens: 4 }), (e: unknown) => e instanceof OpenAI.BadRequestError);
    assert.equal(invalidations(s.stdout()), atStart, `serve detached a buffer while serving: ${s.stdout()}`);
  } finally {
    s.child.kill("SIGTERM");
    await s.exited;
  }
});
