/**
 * `serve --mmproj` through the real openai client: chat messages with image_url parts (base64 PNG
 * data URLs) are answered from the image (another image, another answer; the same image, the same
 * answer with its prefix cached), streamed too; what cannot be read is a 400 naming it, and a
 * text-only server refuses images by name.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import { startWorker } from "../worker-process.ts";
import OpenAI from "openai";
import Anthropic from "@anthropic-ai/sdk";
import { projectRoot, test } from "../harness.ts";
import { startServer } from "../../src/serve/server.ts";
import { encodePng } from "../../src/model/vision/png.ts";
import { writeMmproj } from "../model/vision-files.ts";
import { encodeJpeg } from "../model/jpeg-encoder.ts";
import { writeTestGguf } from "../model/model-files.ts";
import { loadModel } from "../../src/model/load.ts";
import { encodeWithImages, IMAGE_MARKER } from "../../src/serve/prompt-images.ts";
import { imageTokenIds } from "../../src/model/vision/image-tokens.ts";

const dir = mkdtempSync(`${tmpdir()}/vision-serve-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
const mmproj = `${dir}/mmproj.gguf`;
// 16 positions an image: with the text, more than one 16-token block, so a repeat's prefix is cached.
writeMmproj(mmproj, { lmHidden: 64, seed: 41, imageSize: 56, patchSize: 14 });
const modelPath = `${projectRoot}/models/stories260K.gguf`;

/** A base64 PNG data URL of a w × h image whose colours follow `seed`. */
function pngUrl(seed: number, w = 20, h = 12): string {
  const rgb = Uint8Array.from({ length: w * h * 3 }, (_, i) => Math.floor(127.5 + 127.5 * Math.sin(i * 0.37 + seed)));
  return `data:image/png;base64,${btoa(String.fromCharCode(...encodePng({ width: w, height: h, rgb })))}`;
}

type Part = OpenAI.Chat.Completions.ChatCompletionContentPart;
const ask = (parts: Part[]): OpenAI.Chat.Completions.ChatCompletionCreateParamsNonStreaming => ({
  model: "stories260K", messages: [{ role: "user", content: parts }], max_tokens: 10, temperature: 0,
});
const image = (url: string): Part => ({ type: "image_url", image_url: { url } });

/** Starts a server (with the projector unless told), runs `fn` with a client, and shuts it down. */
async function withServer(fn: (client: OpenAI, url: string) => Promise<void>, vision = true): Promise<void> {
  const s = await startServer({ modelPath, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 64, ...(vision ? { mmproj } : {}) });
  try {
    await fn(new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "unused", maxRetries: 0 }), s.url);
  } finally {
    await s.shutdown();
  }
}

/** The status and message of a request the server should refuse. */
async function refusal(p: Promise<unknown>): Promise<{ status: number; message: string }> {
  try {
    await p;
  } catch (e) {
    if (e instanceof OpenAI.APIError) return { status: e.status ?? 0, message: e.message };
    throw e;
  }
  throw new Error("the request was answered");
}

test("startServer({ mmproj }) answers chat messages with images from the images, the same image from its cache", async () => {
  await withServer(async (client) => {
    const a = await client.chat.completions.create(ask([{ type: "text", text: "Once upon a time" }, image(pngUrl(1))]));
    const b = await client.chat.completions.create(ask([{ type: "text", text: "Once upon a time" }, image(pngUrl(2))]));
    const again = await client.chat.completions.create(ask([{ type: "text", text: "Once upon a time" }, image(pngUrl(1))]));
    const text = (r: typeof a) => r.choices[0].message.content;
    assert.notEqual(text(a), text(b), "another image, another answer");
    assert.equal(text(again), text(a));
    // The image's 16 positions count as prompt tokens, as vLLM counts them.
    const textOnly = (await client.chat.completions.create(ask([{ type: "text", text: "Once upon a time" }]))).usage!.prompt_tokens;
    assert.ok(a.usage!.prompt_tokens >= textOnly + 16, `${a.usage!.prompt_tokens} prompt tokens with the image, ${textOnly} without`);
    assert.ok((again.usage!.prompt_tokens_details?.cached_tokens ?? 0) > textOnly, `the repeat's prefix is cached through the image (${again.usage!.prompt_tokens_details?.cached_tokens})`);
    // Streamed, the same answer; two images in one message are read too.
    let streamed = "";
    for await (const c of await client.chat.completions.create({ ...ask([{ type: "text", text: "Once upon a time" }, image(pngUrl(1))]), stream: true })) streamed += c.choices[0]?.delta?.content ?? "";
    assert.equal(streamed, text(a));
    // /tokenize counts a chat with an image as the completion's usage does.
    const counted = await fetch(`${client.baseURL.replace(/\/v1$/, "")}/tokenize`, {
      method: "POST", headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "stories260K", messages: [{ role: "user", content: [{ type: "text", text: "Once upon a time" }, image(pngUrl(1))] }] }),
    });
    assert.equal(counted.status, 200);
    assert.equal(((await counted.json()) as { count: number }).count, a.usage!.prompt_tokens);
    const two = await client.chat.completions.create(ask([image(pngUrl(3, 9, 30)), { type: "text", text: "and" }, image(pngUrl(1))]));
    assert.equal(two.choices[0].finish_reason, "length");
    // A JPEG of the same picture (all-ones quantization tables: within a few levels of it) answers as the PNG does.
    const w = 20, h = 12;
    const rgb = Uint8Array.from({ length: w * h * 3 }, (_, i) => Math.floor(127.5 + 127.5 * Math.sin(i * 0.37 + 1)));
    const jpeg = encodeJpeg({ width: w, height: h, rgb }, { quality: "ones" }).bytes;
    const viaJpeg = await client.chat.completions.create(ask([{ type: "text", text: "Once upon a time" }, image(`data:image/jpeg;base64,${btoa(String.fromCharCode(...jpeg))}`)]));
    assert.equal(viaJpeg.usage!.prompt_tokens, a.usage!.prompt_tokens);
  });
});

test("startServer({ mmproj }) answers 400 naming what it cannot read: URLs it may not fetch, JPEG, broken PNG, the marker in text", async () => {
  await withServer(async (client) => {
    const cases: [Part[], RegExp][] = [
      [[image("https://example.com/cat.png")], /this server fetches no image URLs \(start it with --allowed-media-domains HOST,\.\.\. to fetch from those hosts\); or send the image inline as a base64 data URL/],
      [[image("data:image/jpeg;base64,/9j/4AAQSkZJRgABAQ==")], /The image is not a readable JPEG: /],
      [[image("data:image/gif;base64,R0lGODlhAQABAAAAACw=")], /The image is not a readable GIF: The file ends inside an image descriptor/],
      [[image("data:image/webp;base64,UklGRiQAAABXRUJQVlA4IBgAAAAwAQCdASoBAAEAAwA0JaQAA3AA/vuUAAA=")], /WebP images are not read yet; send PNG, JPEG or GIF/],
      [[image("data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAA")], /The image is not a readable PNG: /],
      [[image("data:image/png,rawbytes")], /should be base64-encoded/],
      [[image("not a url")], /should be a base64 data URL/],
      [[image("data:image/png;base64,a")], /payload is not base64 \(its length or padding is wrong\)/],
      [[{ type: "text", text: "see <__media__>" }, image(pngUrl(1))], /2 image markers \("<__media__>"\) for 1 images/],
    ];
    for (const [parts, pattern] of cases) {
      const r = await refusal(client.chat.completions.create(ask(parts)));
      assert.equal(r.status, 400, `${pattern}: ${r.message}`);
      assert.match(r.message, pattern);
    }
    const many = await refusal(client.chat.completions.create(ask(Array.from({ length: 33 }, () => image(pngUrl(1, 2, 2))))));
    assert.equal(many.status, 400);
    assert.match(many.message, /at most 32 images \(--limit-mm-per-prompt\); image 33 is at messages\[0\]\.content\[32\]/);
    const bad = await refusal(client.chat.completions.create({ ...ask([{ type: "text", text: "x" }, image(pngUrl(1))]), truncate_prompt_tokens: 5 } as OpenAI.Chat.Completions.ChatCompletionCreateParamsNonStreaming));
    assert.equal(bad.status, 400);
    assert.match(bad.message, /truncate_prompt_tokens cannot be used with images/);
    // The server still answers.
    assert.equal((await client.chat.completions.create(ask([image(pngUrl(4))]))).choices.length, 1);
  });
});

test("startServer({ maxImagesPerRequest }) refuses a request of more images naming the limit, and 0 any image", async () => {
  for (const [limit, pattern] of [[1, /A request may hold at most 1 image \(--limit-mm-per-prompt\); image 2 is at messages\[0\]\.content\[2\]/], [0, /This server takes no images \(--limit-mm-per-prompt\); image 1 is at messages\[0\]\.content\[1\]/]] as const) {
    const s = await startServer({ modelPath, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 64, mmproj, maxImagesPerRequest: limit });
    try {
      const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "unused", maxRetries: 0 });
      const r = await refusal(client.chat.completions.create(ask([{ type: "text", text: "Once" }, image(pngUrl(1)), image(pngUrl(2))])));
      assert.equal(r.status, 400);
      assert.match(r.message, pattern);
      const text = await client.chat.completions.create(ask([{ type: "text", text: "Once" }]));
      assert.equal(text.choices.length, 1, "text still answered");
      if (limit === 1) assert.equal((await client.chat.completions.create(ask([{ type: "text", text: "Once" }, image(pngUrl(1))]))).choices.length, 1);
    } finally {
      await s.shutdown();
    }
  }
});

test("startServer() without a projector refuses images by name", async () => {
  await withServer(async (client) => {
    const r = await refusal(client.chat.completions.create(ask([{ type: "text", text: "Once" }, image(pngUrl(1))])));
    assert.equal(r.status, 400);
    assert.match(r.message, /This model reads text only: image parts need a vision projector, loaded with --mmproj/);
  }, false);
});

test("startServer({ mmproj }) takes request bodies past 2 MiB (images come inline) up to 64 MiB by default; a text-only server's stay at 2 MiB, 413 naming the flag", async () => {
  // Noise barely compresses: ~3.2 MB of PNG, ~4.3 MB as base64.
  const w = 1100, h = 1000;
  let x = 7;
  const rgb = Uint8Array.from({ length: w * h * 3 }, () => (x = (Math.imul(x, 1103515245) + 12345) >>> 0) >>> 24);
  const png = encodePng({ width: w, height: h, rgb });
  let text = "";
  for (let i = 0; i < png.length; i += 0x8000) text += String.fromCharCode(...png.subarray(i, i + 0x8000));
  const big = `data:image/png;base64,${btoa(text)}`;
  assert.ok(big.length > 4 * 1024 * 1024, `${big.length} bytes`);
  await withServer(async (client) => {
    const r = await client.chat.completions.create(ask([{ type: "text", text: "Once upon a time" }, image(big)]));
    assert.ok(r.usage!.prompt_tokens >= 16);
  });
  await withServer(async (client) => {
    const r = await refusal(client.chat.completions.create(ask([{ type: "text", text: big }])));
    assert.equal(r.status, 413);
    assert.match(r.message, /The request body is larger than 2097152 bytes \(the server's --max-body-bytes\)/);
  }, false);
});

test("startServer({ mmproj }) reads a GIF as the PNG of its pixels: the same answer, cached through the image", async () => {
  const { readFileSync } = await import("node:fs");
  const { decodeGif } = await import("../../src/model/vision/gif.ts");
  const fixture = JSON.parse(readFileSync(`${projectRoot}/tests/model/fixtures/pil-gif.json`, "utf8")) as { cases: { gif: string }[] };
  const gifBase64 = fixture.cases[1].gif;
  const pixels = decodeGif(Uint8Array.from(atob(gifBase64), (c) => c.charCodeAt(0)));
  const png = `data:image/png;base64,${btoa(String.fromCharCode(...encodePng(pixels)))}`;
  await withServer(async (client) => {
    const fromPng = await client.chat.completions.create(ask([{ type: "text", text: "Once upon a time" }, image(png)]));
    const fromGif = await client.chat.completions.create(ask([{ type: "text", text: "Once upon a time" }, image(`data:image/gif;base64,${gifBase64}`)]));
    assert.equal(fromGif.choices[0].message.content, fromPng.choices[0].message.content);
    assert.ok((fromGif.usage?.prompt_tokens_details?.cached_tokens ?? 0) >= 16, "the same pixels, the same image tokens: cached through it");
  });
});

/** Greedy answers to image prompts (one repeated) from a server started with `o` and the projector. */
async function clusterAnswers(o: Partial<Parameters<typeof startServer>[0]>): Promise<string[]> {
  const s = await startServer({ modelPath, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 64, mmproj, ...o });
  try {
    const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "unused", maxRetries: 0 });
    const out: string[] = [];
    for (const seed of [1, 2, 1]) out.push((await client.chat.completions.create(ask([{ type: "text", text: "Once upon a time" }, image(pngUrl(seed))]))).choices[0].message.content ?? "");
    return out;
  } finally {
    await s.shutdown();
  }
}

test("startServer({ mmproj }) with workers (in-process, threads, a prefill/decode hand-off, a worker process over TCP) answers images as one engine does", async () => {
  const want = await clusterAnswers({});
  assert.notEqual(want[0], want[1]);
  const cases: [string, Partial<Parameters<typeof startServer>[0]>][] = [
    ["in-process", { workers: 2, transport: "in-process", planner: "none" }],
    ["threads", { workers: 2, transport: "threads", planner: "none" }],
    ["prefill/decode", { workers: 2, transport: "threads", roles: ["prefill", "decode"], planner: "none", router: "kv-aware", localPrefillTokens: 0 }],
  ];
  for (const [what, o] of cases) assert.deepEqual(await clusterAnswers(o), want, what);
  const worker = await startWorker();
  try {
    assert.deepEqual(await clusterAnswers({ workerAddrs: [worker.addr], transport: "tcp" }), want, "a worker process over TCP");
  } finally {
    worker.child.kill();
  }
});

test("startServer({ mmproj }) reads images in the Responses API (input_image, a function call's output) and in Messages (image blocks, a tool_result's)", async () => {
  await withServer(async (client, url) => {
    const chat = async (parts: Part[]) => (await client.chat.completions.create(ask(parts))).choices[0].message.content;
    const want = await chat([{ type: "text", text: "Once upon a time" }, image(pngUrl(5))]);
    const response = await client.responses.create({
      model: "stories260K", max_output_tokens: 10, temperature: 0, store: false,
      input: [{ role: "user", content: [{ type: "input_text", text: "Once upon a time" }, { type: "input_image", image_url: pngUrl(5), detail: "auto" }] }],
    });
    assert.equal(response.output_text, want, "the same parts, the same prompt, the same answer as chat");
    // A tool's screenshot: the function call's output holds the image (no tools offered: this model has no chat template to show them).
    const screenshot = (seed: number) => client.responses.create({
      model: "stories260K", max_output_tokens: 10, temperature: 0, store: false,
      input: [
        { role: "user", content: "Take a screenshot" },
        { type: "function_call", call_id: "call_1", name: "screenshot", arguments: "{}" },
        { type: "function_call_output", call_id: "call_1", output: [{ type: "input_image", image_url: pngUrl(seed) }] },
      ],
    });
    const [shotA, shotB] = [await screenshot(6), await screenshot(7)];
    assert.notEqual(shotA.output_text, shotB.output_text, "the screenshot decides the answer");
    assert.ok((shotA.usage?.input_tokens ?? 0) >= 16);
    const bad = await refusal(client.responses.create({ model: "stories260K", input: [{ role: "user", content: [{ type: "input_image", file_id: "file-1" } as never] }] }));
    assert.equal(bad.status, 400);
    assert.match(bad.message, /images by file_id are not supported/);

    const anthropic = new Anthropic({ baseURL: url, apiKey: "none", maxRetries: 0 });
    const base64 = (seed: number) => pngUrl(seed).slice("data:image/png;base64,".length);
    // Greedy: top_k 1 (this SDK's types no longer list the sampling fields; the API still takes them).
    const greedy = (p: Anthropic.MessageCreateParamsNonStreaming) => anthropic.messages.create({ ...p, top_k: 1 } as Anthropic.MessageCreateParamsNonStreaming);
    const msg = await greedy({
      model: "stories260K", max_tokens: 10,
      messages: [{ role: "user", content: [{ type: "text", text: "Once upon a time" }, { type: "image", source: { type: "base64", media_type: "image/png", data: base64(5) } }] }],
    });
    assert.equal(msg.content[0].type === "text" ? msg.content[0].text : undefined, want);
    const toolShot = (seed: number) => greedy({
      model: "stories260K", max_tokens: 10,
      messages: [
        { role: "user", content: "Take a screenshot" },
        { role: "assistant", content: [{ type: "tool_use", id: "toolu_1", name: "screenshot", input: {} }] },
        { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1", content: [{ type: "image", source: { type: "base64", media_type: "image/png", data: base64(seed) } }] }] },
      ],
    });
    const text = (m: Anthropic.Message) => m.content.map((b) => (b.type === "text" ? b.text : "")).join("");
    assert.notEqual(text(await toolShot(6)), text(await toolShot(7)), "the tool result's image decides the answer");
    const remote = await anthropic.messages.create({
      model: "stories260K", max_tokens: 4,
      messages: [{ role: "user", content: [{ type: "image", source: { type: "url", url: "https://example.com/a.png" } }] }],
    }).then(() => undefined, (e: unknown) => e);
    assert.ok(remote instanceof Anthropic.APIError && remote.status === 400 && /fetches no image URLs/.test(remote.message), String(remote));
  });
});

test("encodeWithImages() places each image's positions at its marker, Gemma 3's between its start and end text, SmolVLM's between its fake tokens; startServer serves Gemma 3's tower", async () => {
  const gemmaPath = await writeTestGguf(dir, "gemma3", { architecture: "gemma3", hidden: 32, layers: 2, heads: 4, kvHeads: 2, headDim: 8, ffn: 64, vocab: 300, tied: true, dtype: "f32", seed: 44 });
  const gemmaProj = `${dir}/mmproj-gemma3.gguf`;
  writeMmproj(gemmaProj, { lmHidden: 32, seed: 45, projectorType: "gemma3", clip: false, postNorm: true, gelu: true, imageSize: 56, patchSize: 7, pooling: 2 });
  const model = await loadModel(gemmaPath, { mmproj: gemmaProj });
  const enc = (t: string) => model.tokenizer.encode(t, { addBos: false });
  const picture = { width: 3, height: 2, rgb: Uint8Array.from({ length: 18 }, (_, i) => i * 13) };
  const { prompt, images } = encodeWithImages(model, `look${IMAGE_MARKER}then`, [picture], false, "messages");
  const before = [...enc("look"), ...enc("\n\n<start_of_image>")];
  assert.equal(images.length, 1);
  assert.equal(images[0].start, before.length);
  assert.equal(images[0].length, 16);
  assert.deepEqual(prompt.slice(0, before.length), before);
  assert.deepEqual(prompt.slice(before.length + 16), enc("<end_of_image>\n\nthen"));
  assert.deepEqual(prompt.slice(before.length, before.length + 16), imageTokenIds(images[0].key, 16, 300));
  // SmolVLM's global image between its fake tokens, as llama.cpp writes it.
  const smolProj = `${dir}/mmproj-idefics3.gguf`;
  writeMmproj(smolProj, { lmHidden: 64, seed: 46, projectorType: "idefics3", clip: false, postNorm: true, gelu: true, imageSize: 48, patchSize: 8 });
  const smol = await loadModel(modelPath, { mmproj: smolProj });
  const smolPlaced = encodeWithImages(smol, `a${IMAGE_MARKER}b`, [picture], false, "messages");
  const smolEnc = (t: string) => smol.tokenizer.encode(t, { addBos: false });
  const smolBefore = [...smolEnc("a"), ...smolEnc("<fake_token_around_image><global-img>")];
  assert.equal(smolPlaced.images[0].start, smolBefore.length);
  assert.deepEqual(smolPlaced.prompt.slice(smolBefore.length + 4), smolEnc("<fake_token_around_image>b"));
  const s = await startServer({ modelPath: gemmaPath, mmproj: gemmaProj, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 64 });
  try {
    const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "unused", maxRetries: 0 });
    const answer = async (seed: number) => (await client.chat.completions.create({ ...ask([{ type: "text", text: "look" }, image(pngUrl(seed))]), model: "gemma3" })).choices[0].message.content;
    const [a, again] = [await answer(1), await answer(1)];
    assert.equal(again, a);
  } finally {
    await s.shutdown();
  }
});

test("startServer({ mmproj }) answers broken images with 400s, never 5xx (200 random data URLs: PNG and JPEG signatures before random bytes, cut valid files, bad base64)", async () => {
  let seed = 7;
  const rand = () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31);
  const valid = Uint8Array.from(atob(pngUrl(9).slice("data:image/png;base64,".length)), (c) => c.charCodeAt(0));
  const b64 = (bytes: Uint8Array) => btoa(String.fromCharCode(...bytes));
  const urls: string[] = [];
  for (let i = 0; i < 200; i++) {
    const kind = i % 4;
    const noise = Uint8Array.from({ length: Math.floor(rand() * 200) }, () => Math.floor(rand() * 256));
    if (kind === 0) urls.push(`data:image/png;base64,${b64(Uint8Array.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, ...noise]))}`);
    else if (kind === 1) urls.push(`data:image/jpeg;base64,${b64(Uint8Array.from([0xff, 0xd8, 0xff, ...noise]))}`);
    else if (kind === 2) {
      // A valid PNG cut short or with one byte changed.
      const cut = valid.slice(0, Math.floor(rand() * valid.length));
      if (cut.length > 0 && rand() < 0.5) cut[Math.floor(rand() * cut.length)] ^= 1 + Math.floor(rand() * 255);
      urls.push(`data:image/png;base64,${b64(cut)}`);
    } else {
      // Any printable text, or the base64 alphabet at any length (a length of 4k + 1 is no base64).
      const alphabet = rand() < 0.5 ? "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/" : undefined;
      urls.push(`data:image/png;base64,${String.fromCharCode(...noise.map((n) => (alphabet ? alphabet.charCodeAt(n % 64) : 33 + (n % 90))))}`);
    }
  }
  await withServer(async (_client, url) => {
    const statuses = new Map<number, number>();
    for (const u of urls) {
      const res = await fetch(`${url}/v1/chat/completions`, {
        method: "POST", headers: { "content-type": "application/json" },
        body: JSON.stringify({ model: "stories260K", max_tokens: 1, messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: u } }] }] }),
      });
      await res.body?.cancel();
      statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
      assert.ok(res.status < 500, `${res.status} for ${u.slice(0, 60)}…`);
    }
    assert.ok((statuses.get(400) ?? 0) > 150, JSON.stringify([...statuses]));
  });
});

test("startServer({ mmproj }) keeps a stored response's image for the next turn: previous_response_id answers from it, its prefix cached through the image", async () => {
  await withServer(async (client) => {
    const first = await client.responses.create({
      model: "stories260K", max_output_tokens: 4, temperature: 0,
      input: [{ role: "user", content: [{ type: "input_text", text: "Once upon a time" }, { type: "input_image", image_url: pngUrl(11), detail: "auto" }] }],
    });
    const next = (image: number) => client.responses.create({ model: "stories260K", max_output_tokens: 4, temperature: 0, previous_response_id: first.id, input: `and then ${image}` });
    const second = await next(1);
    // The stored turn's image is in the second prompt, cached through it (16 positions and the text before).
    assert.ok((second.usage?.input_tokens ?? 0) > (first.usage?.input_tokens ?? 0));
    assert.ok((second.usage?.input_tokens_details?.cached_tokens ?? 0) >= 16, `cached ${second.usage?.input_tokens_details?.cached_tokens}`);
    // A turn sent whole with another image there misses from that image on.
    const other = await client.responses.create({
      model: "stories260K", max_output_tokens: 4, temperature: 0,
      input: [
        { role: "user", content: [{ type: "input_text", text: "Once upon a time" }, { type: "input_image", image_url: pngUrl(12), detail: "auto" }] },
        { role: "assistant", content: first.output_text },
        { role: "user", content: "and then 1" },
      ],
    });
    assert.ok((other.usage?.input_tokens_details?.cached_tokens ?? 0) < (second.usage?.input_tokens_details?.cached_tokens ?? 0));
  });
});
