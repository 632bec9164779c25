/**
 * `--chat-template` (ServerOptions.chatTemplate): a template given in place of the model's renders
 * chat requests and is what "auto" parsers are told from; the flag takes a file or the template
 * itself, and refuses a value that is neither, or a template that does not parse, by name.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import OpenAI from "openai";
import { projectRoot, test } from "../harness.ts";
import { startServer } from "../../src/serve/server.ts";
import { chatTemplateFlag } from "../../src/cli/preflight.ts";
import { ArgsError } from "../../src/cli/args.ts";

const modelPath = `${projectRoot}/models/stories260K.gguf`;
// Hermes-style tools, so that "auto" tells hermes from it; every message in double angle brackets.
const TEMPLATE = "{% if tools %}<tools>{% for t in tools %}{{ t.function.name }} {% endfor %}</tools> <tool_call>{% endif %}{% for m in messages %}<<{{ m.role }}: {{ m.content }}>>{% endfor %}{% if add_generation_prompt %}[answer]{% endif %}";

test("startServer({ chatTemplate }) renders chat with the given template, and tools the model's own (none) refused", async () => {
  const detokenized = async (url: string, messages: unknown[]): Promise<string> => {
    const post = (path: string, body: unknown) => fetch(`${url}${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) }).then((r) => r.json());
    const { tokens } = await post("/tokenize", { messages });
    return (await post("/detokenize", { tokens })).prompt;
  };
  const tool = { type: "function" as const, function: { name: "lookup", parameters: { type: "object", properties: {} } } };
  const plain = await startServer({ modelPath, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 32 });
  try {
    assert.ok(!(await detokenized(plain.url, [{ role: "user", content: "hi there" }])).includes("<<"));
    const client = new OpenAI({ baseURL: `${plain.url}/v1`, apiKey: "none", maxRetries: 0 });
    await assert.rejects(client.chat.completions.create({ model: "stories260K", messages: [{ role: "user", content: "hi" }], tools: [tool], max_tokens: 2 }), /has no chat template/);
  } finally {
    await plain.shutdown();
  }
  const s = await startServer({ modelPath, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 32, chatTemplate: TEMPLATE, toolCallParser: "auto" });
  try {
    assert.equal(s.toolCallParser, "hermes", "auto reads the given template");
    assert.match(await detokenized(s.url, [{ role: "system", content: "be brief" }, { role: "user", content: "hi there" }]), /<<system: be brief>><<user: hi there>>\[answer\]$/);
    const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 });
    const r = await client.chat.completions.create({ model: "stories260K", messages: [{ role: "user", content: "hi" }], tools: [tool], max_tokens: 2 });
    assert.equal(r.choices.length, 1);
    assert.ok(r.usage!.prompt_tokens > 10, "the tools' list is in the prompt");
  } finally {
    await s.shutdown();
  }
});

test("chatTemplateFlag() reads a file, or takes the value as a template, and refuses the rest naming the flag", () => {
  const dir = mkdtempSync(`${tmpdir()}/chat-template-`);
  try {
    writeFileSync(`${dir}/t.jinja`, TEMPLATE);
    writeFileSync(`${dir}/empty.jinja`, "  \n");
    assert.deepEqual(chatTemplateFlag(`${dir}/t.jinja`), { text: TEMPLATE, from: `the file ${dir}/t.jinja` });
    assert.deepEqual(chatTemplateFlag("{{ messages[0].content }}"), { text: "{{ messages[0].content }}", from: "the flag" });
    const cases: [string, RegExp][] = [
      [`${dir}/missing.jinja`, /Flag --chat-template: ".*missing\.jinja" is neither a file nor a template/],
      [dir, /is neither a file nor a template/],
      [`${dir}/empty.jinja`, /Flag --chat-template: the file .*empty\.jinja is empty/],
      ["{% if x %}never closed", /Flag --chat-template: the template from the flag does not parse: /],
    ];
    for (const [value, pattern] of cases) assert.throws(() => chatTemplateFlag(value), (e: unknown) => e instanceof ArgsError && pattern.test(e.message), value);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

/** SmolVLM-Instruct's chat template (its chat_template.json): it reads a message's content only as a list of parts. */
const SMOLVLM = "<|im_start|>{% for message in messages %}{{message['role'] | capitalize}}{% if message['content'][0]['type'] == 'image' %}{{':'}}{% else %}{{': '}}{% endif %}{% for line in message['content'] %}{% if line['type'] == 'text' %}{{line['text']}}{% elif line['type'] == 'image' %}{{ '<image>' }}{% endif %}{% endfor %}<end_of_utterance>\n{% endfor %}{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}";

test("chatRenderer() gives a template that reads only OpenAI's parts (SmolVLM's) each content as one text part, image markers in it; others still get text", async () => {
  const { chatRenderer } = await import("../../src/serve/chat-template.ts");
  const { IMAGE_MARKER } = await import("../../src/serve/prompt-images.ts");
  const messages = [
    { role: "system" as const, content: "Be brief." },
    { role: "user" as const, content: [{ type: "text" as const, text: "What is this?" }, { type: "image_url" as const, image_url: { url: "data:image/png;base64,AAAA" } }] },
    { role: "assistant" as const, content: "A cat." },
    { role: "user" as const, content: "And now?" },
  ];
  const smol = chatRenderer(SMOLVLM, {}).render(messages);
  assert.equal(smol.text, `<|im_start|>System: Be brief.<end_of_utterance>\nUser: What is this?\n${IMAGE_MARKER}<end_of_utterance>\nAssistant: A cat.<end_of_utterance>\nUser: And now?<end_of_utterance>\nAssistant:`);
  // A template that reads strings gets strings, as before (its loop over a list would write nothing).
  const plain = chatRenderer("{% for m in messages %}[{{ m.content }}]{% endfor %}", {}).render(messages);
  assert.equal(plain.text, `[Be brief.][What is this?\n${IMAGE_MARKER}][A cat.][And now?]`);
  // Continuing the final message finds its text in a typed-content template too.
  const cont = chatRenderer(SMOLVLM, {}).render([...messages.slice(0, 2), { role: "assistant" as const, content: "It is a" }], undefined, undefined, { continueFinal: true });
  assert.ok(cont.text.endsWith("Assistant: It is a"), cont.text);
});
