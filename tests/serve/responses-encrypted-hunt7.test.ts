/**
 * `include: ["reasoning.encrypted_content"]` on the Responses API: what a stateless client (Codex with
 * `store: false`) keeps of a turn's reasoning. Each reasoning item then carries its text in
 * `encrypted_content` too (a plain record, as the Messages API's signatures: this server keeps no
 * keys), and an item sent back with that alone gives the next prompt its reasoning again, so the turn's
 * prompt matches what the model generated and the prefix cache can hold.
 */
import assert from "node:assert/strict";
import OpenAI from "openai";
import { startServer } from "../../src/serve/server.ts";
import { itemsToMessages } from "../../src/serve/responses-input.ts";
import type { InputItem } from "../../src/serve/responses-schema.ts";
import { test } from "../harness.ts";
import * as reasoner from "./reasoning-model.ts";

const TOOLS: OpenAI.Responses.FunctionTool[] = ["get_weather", "get_time"].map((name) => ({ type: "function", name, parameters: { type: "object", properties: {} }, strict: false }));

test("Responses API: include reasoning.encrypted_content gives each reasoning item its text there, created and streamed, and an item sent back with it alone gives the prompt its reasoning", async () => {
  const s = await startServer({ modelPath: reasoner.modelPath, model: reasoner.model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 128, reasoningParser: "think" });
  try {
    const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 });
    const ask = { model: "reasoner", input: "What is the weather?", tools: TOOLS, temperature: 0, max_output_tokens: 64, store: false };
    const reasoningOf = (r: OpenAI.Responses.Response) => r.output.find((o): o is OpenAI.Responses.ResponseReasoningItem => o.type === "reasoning")!;
    const plain = await client.responses.create(ask);
    assert.equal(reasoningOf(plain).encrypted_content, undefined, "not asked for, not given");
    const sealed = await client.responses.create({ ...ask, include: ["reasoning.encrypted_content"] });
    const item = reasoningOf(sealed);
    assert.equal(typeof item.encrypted_content, "string");
    assert.equal(item.content?.[0].text, reasoner.THOUGHTS.join(""));
    // The stream's done item carries it as well.
    const stream = client.responses.stream({ ...ask, include: ["reasoning.encrypted_content"] });
    const doneItems: OpenAI.Responses.ResponseOutputItem[] = [];
    for await (const e of stream) if (e.type === "response.output_item.done") doneItems.push(e.item);
    const streamedItem = doneItems.find((o) => o.type === "reasoning") as OpenAI.Responses.ResponseReasoningItem;
    assert.equal(streamedItem.encrypted_content, item.encrypted_content);

    // Sent back as Codex does (no content, an empty summary): the prompt's assistant turn has the reasoning.
    const back = { type: "reasoning", id: item.id, summary: [], encrypted_content: item.encrypted_content } as InputItem;
    const messages = itemsToMessages([{ role: "user", content: "What is the weather?" } as InputItem, back]);
    assert.equal((messages[1] as { reasoning_content?: string }).reasoning_content, reasoner.THOUGHTS.join(""));
    // Another server's content (not this server's record) is ignored, never a 400.
    const foreign = itemsToMessages([{ type: "reasoning", summary: [], encrypted_content: "gAAAAABo-opaque" } as InputItem]);
    assert.equal((foreign[0] as { reasoning_content?: string }).reasoning_content, "");
    // The server takes the item back in a turn's input, and refuses content that is no string, naming it.
    const next = await client.responses.create({
      model: "reasoner", temperature: 0, max_output_tokens: 4, store: false,
      input: [{ role: "user", content: "What is the weather?" }, back as OpenAI.Responses.ResponseInputItem, { role: "user", content: "Sunny." }],
    });
    assert.equal(next.status, "completed");
    const bad = await fetch(`${s.url}/v1/responses`, {
      method: "POST", headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "reasoner", input: [{ type: "reasoning", summary: [], encrypted_content: 7 }, { role: "user", content: "Hi." }] }),
    });
    assert.equal(bad.status, 400);
    assert.match(JSON.stringify(await bad.json()), /encrypted_content must be a string/);
  } finally {
    await s.shutdown();
  }
});
