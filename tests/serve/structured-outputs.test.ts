/**
 * vLLM's structured outputs through the real openai client: `structured_outputs` (json, regex, choice,
 * grammar, structural_tag, json_object, disable_any_whitespace), its older `guided_*` names, `response_format` on completions,
 * compact JSON spacing (`serve --json-whitespace compact`), and the 400s for what cannot be followed.
 */
import assert from "node:assert/strict";
import OpenAI from "openai";
import { projectRoot, test } from "../harness.ts";
import type { JsonWhitespace } from "../../src/engine/grammar.ts";
import { loadModel } from "../../src/model/load.ts";
import { startServer } from "../../src/serve/server.ts";
import { dumps } from "../engine/json-dumps.ts";

const modelPath = `${projectRoot}/models/stories260K.gguf`;
const model = await loadModel(modelPath);
const STORY = "Once upon a time there was a little girl named Lily. She loved to play outside in the park.";
const WHO = {
  type: "object", additionalProperties: false, required: ["name", "age", "friends"],
  properties: { name: { enum: ["Lily", "Ben"] }, age: { type: "integer", minimum: 1, maximum: 9 }, friends: { type: "array", items: { enum: ["Tom", "Sue"] }, maxItems: 2 } },
};

async function withServer(opts: { jsonWhitespace?: JsonWhitespace }, fn: (url: string, client: OpenAI) => Promise<void>) {
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 256, ...opts });
  try {
    await fn(s.url, new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 }));
  } finally {
    await s.shutdown();
  }
}

/** The jump-forward counter on /metrics. */
async function jumpedTokens(url: string): Promise<number> {
  const m = /evolving:jump_forward_tokens_total\{model_name="stories260K"\} (\d+)/.exec(await (await fetch(`${url}/metrics`)).text());
  assert.ok(m, "the counter is exported");
  return Number(m[1]);
}

// The openai client types do not know vLLM's fields; they travel in the body as given.
type Extra = Record<string, unknown>;

test("structured_outputs choice, regex and json constrain completions and chat answers (openai client)", async () => {
  await withServer({}, async (_url, client) => {
    const choices = ["Lily", "Ben", "a big dragon"];
    const seen = new Set<string>();
    for (const seed of [1, 2, 3, 4, 5, 6]) {
      const r = await client.completions.create({ model: "stories260K", prompt: STORY, max_tokens: 20, temperature: 1, seed, structured_outputs: { choice: choices } } as OpenAI.CompletionCreateParamsNonStreaming & Extra);
      assert.ok(choices.includes(r.choices[0].text), r.choices[0].text);
      assert.equal(r.choices[0].finish_reason, "stop");
      seen.add(r.choices[0].text);
    }
    assert.ok(seen.size >= 2, `sampling picks among the choices: ${[...seen]}`);

    const re = "[A-Z][a-z]{1,8} (is|was) [0-9]{1,2}";
    for (const seed of [1, 2, 3]) {
      const r = await client.completions.create({ model: "stories260K", prompt: STORY, max_tokens: 40, temperature: 0.8, seed, structured_outputs: { regex: re } } as OpenAI.CompletionCreateParamsNonStreaming & Extra);
      assert.match(r.choices[0].text, new RegExp(`^(?:${re})$`));
      assert.equal(r.choices[0].finish_reason, "stop", r.choices[0].text);
    }

    // The older top-level name, on chat, streamed: the deltas add up to one choice.
    const stream = await client.chat.completions.create({ model: "stories260K", messages: [{ role: "user", content: STORY }], max_tokens: 20, temperature: 0, stream: true, guided_choice: choices } as OpenAI.ChatCompletionCreateParamsStreaming & Extra);
    let text = "";
    for await (const c of stream) text += c.choices[0]?.delta.content ?? "";
    assert.ok(choices.includes(text), text);

    // A schema given as a string, and response_format on completions (as vLLM takes it).
    for (const extra of [{ structured_outputs: { json: JSON.stringify(WHO) } }, { response_format: { type: "json_schema", json_schema: { name: "who", schema: WHO } } }, { guided_json: WHO }]) {
      const r = await client.completions.create({ model: "stories260K", prompt: STORY, max_tokens: 200, temperature: 0.8, seed: 3, ...extra } as OpenAI.CompletionCreateParamsNonStreaming & Extra);
      assert.equal(r.choices[0].finish_reason, "stop", `${JSON.stringify(extra).slice(0, 30)}: ${r.choices[0].text}`);
      const v = JSON.parse(r.choices[0].text) as { name: string; age: number; friends: string[] };
      assert.ok(["Lily", "Ben"].includes(v.name) && Number.isInteger(v.age) && v.age >= 1 && v.age <= 9 && v.friends.length <= 2, r.choices[0].text);
    }

    const obj = await client.chat.completions.create({ model: "stories260K", messages: [{ role: "user", content: STORY }], max_tokens: 40, temperature: 0, structured_outputs: { json_object: true } } as OpenAI.ChatCompletionCreateParamsNonStreaming & Extra);
    assert.ok(obj.choices[0].message.content!.startsWith("{"), obj.choices[0].message.content!);
  });
});

test("structured_outputs grammar (GBNF) and guided_grammar constrain completions and chat answers to a recursive grammar (openai client)", async () => {
  // Nested lists of small numbers: recursive, so no regular expression says it.
  const grammar = String.raw`
root ::= list
list ::= "[" (item ("," item){0,3})? "]"   # up to four items
item ::= list | num
num  ::= [1-9] [0-9]?
`;
  // The same language checked independently: JSON arrays of arrays and numbers 1-99.
  const valid = (v: unknown): boolean => Array.isArray(v) && v.length <= 4 && v.every((x) => (Array.isArray(x) ? valid(x) : Number.isInteger(x) && x >= 1 && x <= 99));
  await withServer({}, async (_url, client) => {
    const texts = new Set<string>();
    for (const seed of [1, 2, 3, 4]) {
      const r = await client.completions.create({ model: "stories260K", prompt: STORY, max_tokens: 60, temperature: 1, seed, structured_outputs: { grammar } } as OpenAI.CompletionCreateParamsNonStreaming & Extra);
      const text = r.choices[0].text;
      if (r.choices[0].finish_reason === "stop") assert.ok(/^[[\]0-9,]+$/.test(text) && valid(JSON.parse(text)), text);
      else assert.ok(/^[[\]0-9,]*$/.test(text), `cut at max_tokens, still inside the grammar: ${text}`);
      texts.add(text);
    }
    assert.ok(texts.size >= 2, `sampling varies inside the grammar: ${[...texts]}`);
    const chat = await client.chat.completions.create({ model: "stories260K", messages: [{ role: "user", content: STORY }], max_tokens: 30, temperature: 0, guided_grammar: 'root ::= ("yes" | "no") ", " [a-z]+ "."' } as OpenAI.ChatCompletionCreateParamsNonStreaming & Extra);
    const answer = chat.choices[0].message.content!;
    assert.match(answer, chat.choices[0].finish_reason === "stop" ? /^(yes|no), [a-z]+\.$/ : /^(yes|no), [a-z]*$/);
  });
});

test("response_format and structured_outputs structural_tag let the answer run free but make each trigger open a whole structure (openai client)", async () => {
  const tag = { triggers: ["."], structures: [{ begin: ". ", schema: { type: "integer", minimum: 1, maximum: 9 }, end: ": " }] };
  await withServer({}, async (_url, client) => {
    for (const extra of [{ response_format: { type: "structural_tag", ...tag } }, { structured_outputs: { structural_tag: JSON.stringify({ type: "structural_tag", ...tag }) } }]) {
      const r = await client.completions.create({ model: "stories260K", prompt: STORY, max_tokens: 60, temperature: 0.8, seed: 2, ...extra } as OpenAI.CompletionCreateParamsNonStreaming & Extra);
      const text = r.choices[0].text;
      const parts = text.split(".");
      assert.ok(parts.length >= 2, `the story wrote a trigger: ${text}`);
      for (const after of parts.slice(1, -1)) assert.match(after, /^ [1-9]: /, text);
      // After the last ".": a whole structure, or the start of one where max_tokens cut it.
      const last = parts[parts.length - 1];
      assert.ok(/^ [1-9]: /.test(last) || " 9: ".startsWith(last.replace(/^ [1-9]/, " 9")), text);
    }
  });
});

test("structured_outputs places characters the vocabulary has only as byte tokens: é, 東京, 😀 (openai client)", async () => {
  // The story model's 512 tokens hold no character past ASCII: each is 2 to 4 byte-fallback tokens.
  await withServer({}, async (_url, client) => {
    const choices = ["Zürich", "東京", "ok 😀"];
    for (const seed of [1, 2, 3]) {
      const r = await client.completions.create({ model: "stories260K", prompt: STORY, max_tokens: 20, temperature: 1, seed, structured_outputs: { choice: choices } } as OpenAI.CompletionCreateParamsNonStreaming & Extra);
      assert.ok(choices.includes(r.choices[0].text), r.choices[0].text);
      assert.equal(r.choices[0].finish_reason, "stop");
    }
    const schema = { type: "object", additionalProperties: false, required: ["city", "note"], properties: { city: { enum: ["Zürich", "東京"] }, note: { type: "string", pattern: "^[一-龥]{2}$" } } };
    const stream = await client.chat.completions.create({
      model: "stories260K", messages: [{ role: "user", content: STORY }], max_tokens: 60, temperature: 1, seed: 4, stream: true,
      response_format: { type: "json_schema", json_schema: { name: "place", schema } },
    });
    let text = "";
    for await (const c of stream) text += c.choices[0]?.delta.content ?? "";
    assert.ok(!text.includes("\uFFFD"), `no character streamed in halves: ${text}`);
    const v = JSON.parse(text) as { city: string; note: string };
    assert.ok(["Zürich", "東京"].includes(v.city) && /^[一-龥]{2}$/u.test(v.note), text);
  });
});

test("structured_outputs disable_any_whitespace and serve --json-whitespace compact space JSON as json.dumps does, and more of it is jumped", async () => {
  const jumped: Record<string, number> = {};
  for (const jsonWhitespace of ["any", "compact"] as const) {
    await withServer({ jsonWhitespace }, async (url, client) => {
      const r = await client.chat.completions.create({
        model: "stories260K", messages: [{ role: "user", content: STORY }], max_tokens: 80, temperature: 0,
        response_format: { type: "json_schema", json_schema: { name: "who", schema: WHO } },
      });
      const text = r.choices[0].message.content!;
      assert.equal(r.choices[0].finish_reason, "stop", text);
      if (jsonWhitespace === "compact") assert.equal(text, dumps(JSON.parse(text)), "the server's default spacing");
      jumped[jsonWhitespace] = await jumpedTokens(url);
      // The request's own setting wins over the server's.
      const own = await client.completions.create({ model: "stories260K", prompt: STORY, max_tokens: 80, temperature: 0.8, seed: 5, structured_outputs: { json: WHO, disable_any_whitespace: true } } as OpenAI.CompletionCreateParamsNonStreaming & Extra);
      assert.equal(own.choices[0].text, dumps(JSON.parse(own.choices[0].text)), own.choices[0].text);
    });
  }
  assert.ok(jumped.compact > jumped.any, `compact spacing makes the separators forced: ${jumped.compact} jumped tokens vs ${jumped.any}`);
});

test("structured_outputs refuses with a 400 naming the parameter what it cannot follow or what clashes", async () => {
  await withServer({}, async (url) => {
    const post = async (path: string, body: Extra) => {
      const res = await fetch(`${url}/v1/${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "stories260K", max_tokens: 4, ...body }) });
      const json = await res.json() as { error: { message: string; param: string | null } };
      return { status: res.status, ...json.error };
    };
    const chat = (extra: Extra) => post("chat/completions", { messages: [{ role: "user", content: "Hi" }], ...extra });
    const comp = (extra: Extra) => post("completions", { prompt: "Hi", ...extra });
    const cases: [Promise<{ status: number; message: string; param: string | null }>, string, RegExp][] = [
      [comp({ structured_outputs: { choice: ["a"], regex: "a+" } }), "structured_outputs.choice", /one kind of structured output/],
      [comp({ structured_outputs: { regex: "(a" } }), "structured_outputs.regex", /cannot be followed.*\(a/],
      [comp({ structured_outputs: { regex: "(?=a)a" } }), "structured_outputs.regex", /cannot be followed/],
      [comp({ structured_outputs: { choice: ["a", ""] } }), "structured_outputs.choice", /structured_outputs\.choice\[1\] is the empty string/],
      [comp({ structured_outputs: { choice: [] } }), "structured_outputs.choice", /at least one choice/],
      [comp({ structured_outputs: { json: "{not json" } }), "structured_outputs.json", /must hold a JSON schema/],
      [comp({ structured_outputs: { json: false } }), "structured_outputs.json", /no value can match it/],
      [comp({ structured_outputs: { json: { type: "object", patternProperties: {} } } }), "structured_outputs.json", /patternProperties/],
      [comp({ structured_outputs: { grammar: 'start: "a"' } }), "structured_outputs.grammar", /cannot be followed.*expected "::=".*GBNF/],
      [comp({ structured_outputs: { grammar: 'root ::= root "a" | "b"' } }), "structured_outputs.grammar", /left-recursive/],
      [comp({ guided_grammar: 'root ::= item\nitem ::= "x" missing' }), "guided_grammar", /line 2, column 14: the rule "missing" is not defined/],
      [comp({ structured_outputs: { structural_tag: { type: "structural_tag" } } }), "structured_outputs.structural_tag", /needs "triggers"/],
      [comp({ structured_outputs: { structural_tag: '{"type": "structural_tag", "format": {"type": "triggered_tags"}}' } }), "structured_outputs.structural_tag", /"format" form is not supported/],
      [comp({ response_format: { type: "structural_tag", triggers: ["<f"], structures: [{ begin: "<g>", schema: {}, end: "</g>" }] } }), "response_format", /begin "<g>" starts with none of the triggers/],
      [comp({ response_format: { type: "structural_tag", triggers: ["<f"], structures: [{ begin: "<f>", schema: { type: "object", patternProperties: {} }, end: "</f>" }] } }), "response_format", /schema of structure 0.*patternProperties/],
      [comp({ structured_outputs: { whitespace_pattern: " ?" } }), "structured_outputs.whitespace_pattern", /not supported/],
      [comp({ structured_outputs: { choice: ["a"] }, guided_regex: "a" }), "guided_regex", /not both/],
      [comp({ structured_outputs: { choice: ["a"] }, response_format: { type: "json_object" } }), "structured_outputs.choice", /response_format or structured_outputs.choice, not both/],
      [chat({ tools: [{ type: "function", function: { name: "f" } }], tool_choice: "required", structured_outputs: { regex: "a" } }), "structured_outputs.regex", /forced tool call/],
      [chat({ guided_choice: "yes" }), "guided_choice", /array of strings/],
    ];
    for (const [p, param, message] of cases) {
      const e = await p;
      assert.equal(e.status, 400, e.message);
      assert.match(e.message, message);
      assert.equal(e.param, param, e.message);
    }
    // The server still answers.
    assert.equal((await comp({ structured_outputs: { choice: ["yes", "no"] } })).status, 200);
  });
});

test("POST /v1/completions and /v1/chat/completions refuse a schema or grammar nested thousands of levels deep with a 400 naming the parameter, not a 500", async () => {
  await withServer({}, async (url) => {
    // The deep schema goes into the body as text where "@DEEP@" stands: JSON.parse and JSON.stringify
    // recurse too, and on Node's stack they overflow first.
    const post = async (path: string, body: Extra, deep = "") => {
      const text = JSON.stringify({ model: "stories260K", max_tokens: 4, ...body }).replace('"@DEEP@"', deep);
      const res = await fetch(`${url}/v1/${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: text });
      const json = await res.json() as { error?: { message: string; param: string | null } };
      return { status: res.status, message: json.error?.message ?? "", param: json.error?.param ?? null };
    };
    const nested = (depth: number) => '{"type": "array", "items": '.repeat(depth) + '{"type": "integer"}' + "}".repeat(depth);
    const parens = (depth: number) => "root ::= " + "(".repeat(depth) + '"a"' + ")".repeat(depth);
    const cases: [string, Extra, string, string][] = [
      ["chat/completions", { messages: [{ role: "user", content: "Hi" }], response_format: { type: "json_schema", json_schema: { name: "deep", schema: "@DEEP@" } } }, "response_format", nested(5000)],
      ["completions", { prompt: "Hi", structured_outputs: { json: "@DEEP@" } }, "structured_outputs.json", nested(5000)],
      ["completions", { prompt: "Hi", structured_outputs: { grammar: parens(20000) } }, "structured_outputs.grammar", ""],
    ];
    for (const [path, body, param, deep] of cases) {
      const e = await post(path, body, deep);
      assert.equal(e.status, 400, `${param}: ${e.message}`);
      assert.equal(e.param, param);
      assert.match(e.message, /nests too deeply/);
    }
    // A deep but compilable schema is still followed, and the server still answers.
    assert.equal((await post("completions", { prompt: "Hi", structured_outputs: { json: "@DEEP@" } }, nested(50))).status, 200);
  });
});
