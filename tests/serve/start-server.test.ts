/** startServer()'s refusals before it serves: a port in use (ListenError), a --max-model-len past the model's context. */
import assert from "node:assert/strict";
import { projectRoot, test } from "../harness.ts";
import { listen, ListenError } from "../../src/serve/listen.ts";
import { loadModel } from "../../src/model/load.ts";
import { startServer } from "../../src/serve/server.ts";

const modelPath = `${projectRoot}/models/stories260K.gguf`;
const model = await loadModel(modelPath);

test("startServer() on a port in use rejects with a ListenError", async () => {
  const first = await listen(() => new Response("ok"), "127.0.0.1", 0);
  try {
    await assert.rejects(startServer({ modelPath, model, host: "127.0.0.1", port: first.port, backend: "reference", kvBlocks: 16 }), ListenError);
  } finally {
    await first.close();
  }
});

test("startServer() refuses a maxModelLen past the model's context instead of lowering it", async () => {
  const ctx = model.config.contextLength;
  await assert.rejects(
    startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 16, maxModelLen: ctx + 1 }),
    (e) => e instanceof RangeError && e.message === `--max-model-len ${ctx + 1} is more than the model's context length ${ctx}`,
  );
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 256, maxModelLen: ctx });
  try {
    assert.equal(s.serving.maxModelLen, ctx);
  } finally {
    await s.shutdown();
  }
});
