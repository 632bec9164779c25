/**
 * Image URLs (src/serve/image-fetch.ts): `http(s)://` on hosts the server allows and `file://` under
 * the directory it allows are read once, when the request comes, and answered as their bytes sent
 * inline would be; everything else is a 400 naming the part and why, and nothing is fetched from a
 * host the server was not told of (redirects included). A real HTTP server serves the images.
 */
import assert from "node:assert/strict";
import { createServer, type Server } from "node:http";
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import OpenAI from "openai";
import Anthropic from "@anthropic-ai/sdk";
import { projectRoot, test } from "../harness.ts";
import { startServer } from "../../src/serve/server.ts";
import { encodePng } from "../../src/model/vision/png.ts";
import { writeMmproj } from "../model/vision-files.ts";
import { fetchImageUrls, type ImageFetchOptions } from "../../src/serve/image-fetch.ts";
import { ApiError } from "../../src/serve/errors.ts";
import { mediaFlags } from "../../src/cli/preflight.ts";
import { ArgsError } from "../../src/cli/args.ts";

const dir = mkdtempSync(`${tmpdir()}/vision-urls-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
const mmproj = `${dir}/mmproj.gguf`;
writeMmproj(mmproj, { lmHidden: 64, seed: 41, imageSize: 56, patchSize: 14 });
const modelPath = `${projectRoot}/models/stories260K.gguf`;

/** A PNG of a w × h image whose colours follow `seed`. */
function png(seed: number, w = 20, h = 12): Uint8Array {
  const rgb = Uint8Array.from({ length: w * h * 3 }, (_, i) => Math.floor(127.5 + 127.5 * Math.sin(i * 0.37 + seed)));
  return encodePng({ width: w, height: h, rgb });
}
const dataUrl = (bytes: Uint8Array) => `data:image/png;base64,${btoa(String.fromCharCode(...bytes))}`;

// Files for file:// URLs: one inside the allowed directory, one outside, and a link inside that points out.
const media = `${dir}/media`;
mkdirSync(media);
writeFileSync(`${media}/shot.png`, png(3));
writeFileSync(`${dir}/secret.png`, png(4));
symlinkSync(`${dir}/secret.png`, `${media}/link.png`);

/** An image host: `/N.png` is png(N); `/to/PATH` redirects to PATH (`/to/http://...` anywhere); `/slow` never answers; `/chunked` streams 4 KiB; `/missing` is a 404. */
async function imageHost(): Promise<{ url: string; port: number; hits: string[]; close(): Promise<void> }> {
  const hits: string[] = [];
  const server: Server = createServer((req, res) => {
    const path = req.url ?? "/";
    hits.push(`${req.headers.host}${path}`);
    const n = /^\/(\d+)\.png$/.exec(path);
    if (n) {
      const bytes = png(Number(n[1]));
      return res.writeHead(200, { "content-type": "image/png", "content-length": String(bytes.length) }).end(bytes);
    }
    if (path.startsWith("/to/")) return res.writeHead(302, { location: path.slice(4) }).end();
    if (path === "/loop") return res.writeHead(301, { location: "/loop" }).end();
    if (path === "/text") return res.writeHead(200, { "content-type": "text/plain" }).end("hello, not an image");
    if (path === "/slow") return; // never answered
    if (path === "/chunked") {
      res.writeHead(200, { "content-type": "image/png" });
      for (let i = 0; i < 4; i++) res.write(new Uint8Array(1024));
      return res.end();
    }
    res.writeHead(404, { "content-type": "text/plain" }).end("no such image");
  });
  await new Promise<void>((ok) => server.listen(0, "127.0.0.1", ok));
  const port = (server.address() as { port: number }).port;
  return {
    url: `http://127.0.0.1:${port}`, port, hits,
    close: () => new Promise<void>((ok) => {
      server.closeAllConnections();
      server.close(() => ok());
    }),
  };
}

/** The 400 a fetch pass throws, or a failure if it read everything. */
async function refused(options: ImageFetchOptions, url: string): Promise<ApiError> {
  const body = { messages: [{ role: "user", content: [{ type: "image_url", image_url: { url } }] }] };
  try {
    await fetchImageUrls(options, body, "messages");
  } catch (e) {
    assert.ok(e instanceof ApiError, String(e));
    assert.equal(e.status, 400);
    assert.equal(e.param, "messages[0].content[0].image_url.url");
    return e;
  }
  throw new Error(`${url} was read`);
}

test("fetchImageUrls() reads allowed http and file URLs into data URLs wherever the APIs put images, and refuses the rest naming the part and why", async () => {
  const host = await imageHost();
  try {
    const allowed: ImageFetchOptions = { allowedDomains: ["127.0.0.1"], localPath: media, timeoutMs: 300, maxBytes: 64 << 20 };
    // Chat parts, Responses parts (a function call's output too) and Messages blocks (a tool result's too).
    const body = {
      messages: [{ role: "user", content: [{ type: "text", text: "x" }, { type: "image_url", image_url: { url: `${host.url}/1.png` } }, { type: "image_url", image_url: { url: dataUrl(png(9)) } }] }],
      input: [
        { role: "user", content: [{ type: "input_image", image_url: `${host.url}/to//2.png` }] },
        { type: "function_call_output", call_id: "c", output: [{ type: "input_image", image_url: `file://${media}/shot.png` }] },
      ],
      blocks: [{ role: "user", content: [{ type: "tool_result", tool_use_id: "t", content: [{ type: "image", source: { type: "url", url: `${host.url}/5.png` } }] }] }],
    };
    await fetchImageUrls(allowed, body, "messages");
    await fetchImageUrls(allowed, body, "input");
    await fetchImageUrls(allowed, body, "blocks");
    assert.equal(body.messages[0].content[1].image_url!.url, dataUrl(png(1)));
    assert.equal(body.messages[0].content[2].image_url!.url, dataUrl(png(9)), "a data URL is left as it is");
    assert.equal(body.input[0].content![0].image_url, dataUrl(png(2)), "a redirect on the same host is followed");
    assert.equal(body.input[1].output![0].image_url, dataUrl(png(3)));
    assert.equal(body.blocks[0].content[0].content[0].source.url, dataUrl(png(5)));

    const cases: [ImageFetchOptions, string, RegExp][] = [
      [{ ...allowed, allowedDomains: [] }, `${host.url}/1.png`, /this server fetches no image URLs \(start it with --allowed-media-domains/],
      [allowed, `http://localhost:${host.port}/1.png`, /fetches images only from 127\.0\.0\.1 \(--allowed-media-domains\)/],
      [allowed, `${host.url}/to/http://localhost:${host.port}/1.png`, new RegExp(`it redirects to localhost:${host.port}, and this server fetches images only from 127\\.0\\.0\\.1`)],
      [allowed, `${host.url}/to/file:///etc/passwd`, /it redirects to a file: URL/],
      [allowed, `${host.url}/loop`, /it redirects more than 5 times/],
      [allowed, `${host.url}/missing`, /the server answered 404 Not Found/],
      [allowed, `${host.url}/slow`, /it took longer than 0\.3 s \(--media-fetch-timeout\)/],
      [{ ...allowed, maxBytes: 100 }, `${host.url}/1.png`, /bytes, more than the 100 an image may be/],
      [{ ...allowed, maxBytes: 2000 }, `${host.url}/chunked`, /it is more than the 2000 bytes an image may be/],
      [{ ...allowed, allowedDomains: ["*"] }, "http://127.0.0.1:1/1.png", /the fetch failed \(/],
      [{ ...allowed, localPath: undefined }, `file://${media}/shot.png`, /this server reads no file:\/\/ URLs \(start it with --allowed-local-media-path DIR/],
      [allowed, `file://${dir}/secret.png`, /it is outside .*\(--allowed-local-media-path\)/],
      [allowed, `file://${media}/../secret.png`, /it is outside/],
      [allowed, `file://${media}/link.png`, /it is outside/],
      [allowed, `file://${dir}/nothing-here.png`, /it is outside/],
      [allowed, `file://${media}/nothing-here.png`, /no such file/],
      [allowed, `file://${media}`, /it is outside|it is not a file/],
      [{ ...allowed, maxBytes: 100 }, `file://${media}/shot.png`, /more than the 100 an image may be/],
      [allowed, "http://[::1", /it is not a valid URL/],
    ];
    for (const [options, url, pattern] of cases) {
      const { message } = await refused(options, url);
      assert.match(message, pattern, `${url}: ${message}`);
    }
    assert.ok(!host.hits.some((h) => h.startsWith("localhost")), "the host refused was never asked, nor the one redirected to");
    // A host answered anywhere: "*".
    await fetchImageUrls({ ...allowed, allowedDomains: ["*"] }, { messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: `http://localhost:${host.port}/1.png` } }] }] }, "messages");
    // Too many images: refused before anything is fetched.
    const before = host.hits.length;
    const many = { messages: [{ role: "user", content: Array.from({ length: 33 }, (_, i) => ({ type: "image_url", image_url: { url: `${host.url}/${i}.png` } })) }] };
    await assert.rejects(fetchImageUrls(allowed, many, "messages"), /at most 32 images \(--limit-mm-per-prompt\); got 33/);
    assert.equal(host.hits.length, before, "nothing fetched");
  } finally {
    await host.close();
  }
});

/** The status and message of a request the server should refuse. */
async function refusal(p: Promise<unknown>): Promise<{ status: number; message: string }> {
  try {
    await p;
  } catch (e) {
    if (e instanceof OpenAI.APIError || e instanceof Anthropic.APIError) return { status: e.status ?? 0, message: e.message };
    throw e;
  }
  throw new Error("the request was answered");
}

test("startServer({ allowedMediaDomains, allowedLocalMediaPath }) answers image URLs as their bytes inline, in chat, Responses, Messages, conversations and /tokenize; a stored turn keeps what was read", async () => {
  const host = await imageHost();
  const s = await startServer({ modelPath, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 64, mmproj, allowedMediaDomains: ["127.0.0.1"], allowedLocalMediaPath: media, mediaFetchTimeoutMs: 2000 });
  try {
    const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "unused", maxRetries: 0 });
    const ask = (url: string): OpenAI.Chat.Completions.ChatCompletionCreateParamsNonStreaming => ({
      model: "stories260K", max_tokens: 10, temperature: 0,
      messages: [{ role: "user", content: [{ type: "text", text: "Once upon a time" }, { type: "image_url", image_url: { url } }] }],
    });
    const inline = await client.chat.completions.create(ask(dataUrl(png(1))));
    const fetched = await client.chat.completions.create(ask(`${host.url}/1.png`));
    const other = await client.chat.completions.create(ask(`${host.url}/2.png`));
    assert.equal(fetched.choices[0].message.content, inline.choices[0].message.content, "the URL's image is the inline one");
    assert.notEqual(other.choices[0].message.content, inline.choices[0].message.content, "another URL's image, another answer");
    assert.ok((fetched.usage?.prompt_tokens_details?.cached_tokens ?? 0) >= 16, `cached through the image: ${fetched.usage?.prompt_tokens_details?.cached_tokens}`);
    const file = await client.chat.completions.create(ask(`file://${media}/shot.png`));
    assert.equal(file.choices[0].message.content, (await client.chat.completions.create(ask(dataUrl(png(3))))).choices[0].message.content);
    // Refusals name the part; the server goes on.
    const away = await refusal(client.chat.completions.create(ask(`http://localhost:${host.port}/1.png`)));
    assert.equal(away.status, 400);
    assert.match(away.message, /Could not read the image at "http:\/\/localhost:\d+\/1\.png": this server fetches images only from 127\.0\.0\.1/);
    assert.match((await refusal(client.chat.completions.create(ask(`${host.url}/text`)))).message, /The data is not a PNG, JPEG or GIF image \(19 bytes\)/);
    assert.match((await refusal(client.chat.completions.create(ask(`file://${dir}/secret.png`)))).message, /outside/);
    // /tokenize counts a URL's image as its bytes'.
    const count = async (url: string) => (await (await fetch(`${s.url}/tokenize`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "stories260K", messages: ask(url).messages }) })).json()).count;
    assert.equal(await count(`${host.url}/1.png`), await count(dataUrl(png(1))));

    // Responses: input_image by URL, stored; Messages: a url source; a conversation's item by URL.
    const first = await client.responses.create({
      model: "stories260K", max_output_tokens: 10, temperature: 0,
      input: [{ role: "user", content: [{ type: "input_text", text: "Once upon a time" }, { type: "input_image", image_url: `${host.url}/1.png`, detail: "auto" }] }],
    });
    assert.equal(first.output_text, inline.choices[0].message.content);
    const anthropic = new Anthropic({ baseURL: s.url, apiKey: "none", maxRetries: 0 });
    const msg = await anthropic.messages.create({
      model: "stories260K", max_tokens: 10, top_k: 1,
      messages: [{ role: "user", content: [{ type: "text", text: "Once upon a time" }, { type: "image", source: { type: "url", url: `${host.url}/1.png` } }] }],
    } as Anthropic.MessageCreateParamsNonStreaming);
    assert.equal(msg.content[0].type === "text" ? msg.content[0].text : undefined, inline.choices[0].message.content);
    const conversation = await client.conversations.create({ items: [{ type: "message", role: "user", content: [{ type: "input_text", text: "Once upon a time" }, { type: "input_image", image_url: `${host.url}/2.png`, detail: "auto" }] }] });

    // The image host goes away: what was read stays read.
    await host.close();
    const next = await client.responses.create({ model: "stories260K", max_output_tokens: 4, temperature: 0, previous_response_id: first.id, input: "and then" });
    assert.ok((next.usage?.input_tokens_details?.cached_tokens ?? 0) >= 16, `the stored turn's image, cached: ${next.usage?.input_tokens_details?.cached_tokens}`);
    const inConversation = await client.responses.create({ model: "stories260K", max_output_tokens: 10, temperature: 0, conversation: conversation.id, input: "and then" });
    const sameInline = await client.chat.completions.create({ ...ask(dataUrl(png(2))), messages: [...ask(dataUrl(png(2))).messages, { role: "user", content: "and then" }] });
    assert.equal(inConversation.output_text, sameInline.choices[0].message.content, "the conversation's image is the one read when it was added");
    const gone = await refusal(client.chat.completions.create(ask(`${host.url}/1.png`)));
    assert.equal(gone.status, 400);
    assert.match(gone.message, /the fetch failed/);
  } finally {
    await s.shutdown();
    await host.close().catch(() => undefined);
  }
});

test("mediaFlags() checks serve's image-URL flags: host names or *, a directory, with --mmproj", () => {
  assert.deepEqual(mediaFlags({ mmproj: "m.gguf", "allowed-media-domains": "Images.Example.com, 127.0.0.1,[::1]", "allowed-local-media-path": media, "media-fetch-timeout": 2.5, "mm-processor-cache-gb": 0.5, "limit-mm-per-prompt": '{"image": 4, "video": 0}' }), {
    allowedMediaDomains: ["images.example.com", "127.0.0.1", "::1"], allowedLocalMediaPath: media, mediaFetchTimeoutMs: 2500, imageCacheBytes: 512 * 1024 ** 2, maxImagesPerRequest: 4,
  });
  assert.deepEqual(mediaFlags({ mmproj: "m.gguf" }), {});
  const cases: [Parameters<typeof mediaFlags>[0], RegExp][] = [
    [{ "allowed-media-domains": "*" }, /Flag --allowed-media-domains says where image URLs are read from; it needs --mmproj/],
    [{ "media-fetch-timeout": 3 }, /Flag --media-fetch-timeout .* needs --mmproj/],
    [{ "mm-processor-cache-gb": 0 }, /Flag --mm-processor-cache-gb sizes the cache of prepared images; it needs --mmproj/],
    [{ "limit-mm-per-prompt": '{"image": 1}' }, /Flag --limit-mm-per-prompt limits a request's images; it needs --mmproj/],
    [{ mmproj: "m", "limit-mm-per-prompt": "image=4" }, /--limit-mm-per-prompt: expected a JSON object of counts by modality, got "image=4"/],
    [{ mmproj: "m", "limit-mm-per-prompt": '{"image": -1}' }, /the count for "image" must be a whole number from 0/],
    [{ mmproj: "m", "limit-mm-per-prompt": '{"image": 2, "video": 1}' }, /only images are read here \("video" can only be 0\)/],
    [{ mmproj: "m", "limit-mm-per-prompt": '{"audio": 0}' }, /no "image" count/],
    [{ mmproj: "m", "allowed-media-domains": "https://images.example.com" }, /"https:\/\/images\.example\.com" is not a host name/],
    [{ mmproj: "m", "allowed-media-domains": "a.com,b.com:8080" }, /"b\.com:8080" is not a host name/],
    [{ mmproj: "m", "allowed-local-media-path": `${media}/shot.png` }, /--allowed-local-media-path: ".*shot\.png" is not a directory/],
    [{ mmproj: "m", "allowed-local-media-path": `${dir}/nowhere` }, /is not a directory/],
  ];
  for (const [flags, pattern] of cases) assert.throws(() => mediaFlags(flags), (e: unknown) => e instanceof ArgsError && pattern.test(e.message));
});
