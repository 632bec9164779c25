/**
 * Image URLs fetched before a request is read: an image part whose URL is `http(s)://` on a host the
 * server allows (`--allowed-media-domains`), or `file://` under the directory it allows
 * (`--allowed-local-media-path`), is read once, when the request comes, and put back in the body as
 * a base64 data URL. Everything after (prompt rendering, stored responses, a conversation's items)
 * then holds the bytes that were read: a replayed turn reads the same image, hits the same cache.
 *
 * Nothing is fetched unless the server names where from: a server that fetches any URL a client
 * sends reaches whatever its own network reaches (vLLM's media fetching was such a hole,
 * CVE-2025-6242, before its `--allowed-media-domains`). Redirects are followed only to allowed hosts.
 */
import { Buffer } from "node:buffer";
import { promises as fsp } from "node:fs";
import { resolve, sep } from "node:path";
import { fileURLToPath } from "node:url";
import { ApiError } from "./errors.ts";
import { MAX_IMAGES, tooManyImages } from "./prompt-images.ts";

/** Where image URLs may be read from, and how long and large a read may be. */
export interface ImageFetchOptions {
  /** Hosts whose `http(s)://` image URLs are fetched (`--allowed-media-domains`), lower case; `*` any. Empty: none. */
  allowedDomains: readonly string[];
  /** The directory whose files `file://` image URLs may name (`--allowed-local-media-path`); undefined: none. */
  localPath?: string;
  /** The longest a fetch may take, redirects and body included, in ms (`--media-fetch-timeout`). */
  timeoutMs: number;
  /** The largest image file read, in bytes. */
  maxBytes: number;
}

/** vLLM's VLLM_IMAGE_FETCH_TIMEOUT: 5 s. */
export const DEFAULT_MEDIA_FETCH_TIMEOUT_MS = 5000;
/** The largest image file read: a PNG of the largest image accepted (prompt-images.ts MAX_IMAGE_PIXELS) compresses below it. */
export const MAX_IMAGE_FILE_BYTES = 64 * 1024 * 1024;
/** Redirects followed at most per image. */
const MAX_REDIRECTS = 5;

/** The options of a server that reads no URLs. */
export const NO_IMAGE_FETCH: ImageFetchOptions = { allowedDomains: [], timeoutMs: DEFAULT_MEDIA_FETCH_TIMEOUT_MS, maxBytes: MAX_IMAGE_FILE_BYTES };

/** One image URL in a request body: where it is (a `param` for errors) and how to put the bytes back. */
interface ImageRef {
  url: string;
  param: string;
  set(url: string): void;
}

/**
 * The image URLs under `body[field]` (chat parts `{type: "image_url", image_url: {url}}`, Responses
 * parts `{type: "input_image", image_url}`, Messages blocks `{type: "image", source: {type: "url", url}}`),
 * anywhere in its messages, items, tool results and function outputs.
 */
function imageRefs(value: unknown, param: string, out: ImageRef[]): void {
  if (Array.isArray(value)) {
    value.forEach((v, i) => imageRefs(v, `${param}[${i}]`, out));
    return;
  }
  if (value === null || typeof value !== "object") return;
  const o = value as Record<string, unknown>;
  const part = o.image_url as Record<string, unknown> | undefined;
  const source = o.source as Record<string, unknown> | undefined;
  if (o.type === "image_url" && part !== null && typeof part === "object" && typeof part.url === "string") {
    out.push({ url: part.url, param: `${param}.image_url.url`, set: (url) => (part.url = url) });
  } else if (o.type === "input_image" && typeof o.image_url === "string") {
    out.push({ url: o.image_url, param: `${param}.image_url`, set: (url) => (o.image_url = url) });
  } else if (o.type === "image" && source !== null && typeof source === "object" && source.type === "url" && typeof source.url === "string") {
    out.push({ url: source.url, param: `${param}.source.url`, set: (url) => (source.url = url) });
  }
  for (const [k, v] of Object.entries(o)) if (typeof v === "object" && v !== null) imageRefs(v, `${param}.${k}`, out);
}

/**
 * Reads every `http(s)://` and `file://` image URL under `body[field]` and writes it back as a base64
 * data URL, in place, and returns every image URL there is then. Throws a 400 naming the part for a
 * URL it may not or could not read (one failure stops the others). Other URLs (data URLs, anything
 * else) are left for the prompt to read or refuse.
 */
export async function fetchImageUrls(options: ImageFetchOptions, body: Record<string, unknown>, field: string, maxImages = MAX_IMAGES): Promise<string[]> {
  const refs: ImageRef[] = [];
  imageRefs(body[field], field, refs);
  const remote = refs.filter((r) => /^(https?|file):/i.test(r.url));
  if (remote.length === 0) return refs.map((r) => r.url);
  // Counted before anything is fetched: a request of a thousand URLs reads none.
  if (refs.length > maxImages) throw new ApiError(400, tooManyImages(maxImages, `got ${refs.length}`), field, "invalid_value");
  const abort = new AbortController();
  try {
    await Promise.all(remote.map(async (ref) => {
      const bytes = await readImageUrl(options, ref, abort.signal);
      ref.set(`data:${mediaType(bytes)};base64,${Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("base64")}`);
    }));
  } finally {
    abort.abort();
  }
  return refs.map((r) => r.url);
}

/** The media type a data URL names for these bytes (what decodes them is told by their signature anyway). */
function mediaType(b: Uint8Array): string {
  if (b[0] === 0x89 && b[1] === 0x50 && b[2] === 0x4e && b[3] === 0x47) return "image/png";
  if (b[0] === 0xff && b[1] === 0xd8) return "image/jpeg";
  if (b[0] === 0x47 && b[1] === 0x49 && b[2] === 0x46) return "image/gif";
  return "application/octet-stream";
}

/** The bytes an image URL names, or a 400 saying why not. */
function readImageUrl(options: ImageFetchOptions, ref: ImageRef, signal: AbortSignal): Promise<Uint8Array> {
  const shown = JSON.stringify(ref.url.length > 120 ? `${ref.url.slice(0, 120)}...` : ref.url);
  const bad = (why: string) => new ApiError(400, `Could not read the image at ${shown}: ${why}`, ref.param, "invalid_value");
  let url: URL;
  try {
    url = new URL(ref.url);
  } catch {
    return Promise.reject(bad("it is not a valid URL"));
  }
  return url.protocol === "file:" ? readLocal(options, url, bad) : fetchRemote(options, url, signal, bad);
}

/** Whether `options` lets images be fetched from `url`'s host. */
function hostAllowed(options: ImageFetchOptions, url: URL): boolean {
  const host = url.hostname.toLowerCase().replace(/^\[(.*)\]$/, "$1");
  return options.allowedDomains.includes("*") || options.allowedDomains.includes(host);
}

async function fetchRemote(options: ImageFetchOptions, first: URL, signal: AbortSignal, bad: (why: string) => ApiError): Promise<Uint8Array> {
  const seconds = `${options.timeoutMs / 1000} s`;
  const deadline = AbortSignal.timeout(options.timeoutMs);
  const both = AbortSignal.any([signal, deadline]);
  let url = first;
  try {
    for (let hop = 0; ; hop++) {
      if (!hostAllowed(options, url)) {
        const how = options.allowedDomains.length === 0 ? "this server fetches no image URLs (start it with --allowed-media-domains HOST,... to fetch from those hosts)" : `this server fetches images only from ${options.allowedDomains.join(", ")} (--allowed-media-domains)`;
        throw bad(`${hop === 0 ? "" : `it redirects to ${url.host}, and `}${how}; or send the image inline as a base64 data URL`);
      }
      const res = await fetch(url, { redirect: "manual", signal: both });
      const location = res.headers.get("location");
      if (res.status >= 300 && res.status < 400 && location !== null) {
        await res.body?.cancel();
        if (hop === MAX_REDIRECTS) throw bad(`it redirects more than ${MAX_REDIRECTS} times`);
        url = new URL(location, url);
        if (url.protocol !== "http:" && url.protocol !== "https:") throw bad(`it redirects to a ${url.protocol} URL`);
        continue;
      }
      if (!res.ok) {
        await res.body?.cancel();
        throw bad(`the server answered ${res.status}${res.statusText ? ` ${res.statusText}` : ""}`);
      }
      const length = Number(res.headers.get("content-length") ?? NaN);
      if (length > options.maxBytes) {
        await res.body?.cancel();
        throw bad(`it is ${length} bytes, more than the ${options.maxBytes} an image may be`);
      }
      return await readCapped(res.body, options.maxBytes, bad);
    }
  } catch (e) {
    if (e instanceof ApiError) throw e;
    if (deadline.aborted) throw bad(`it took longer than ${seconds} (--media-fetch-timeout)`);
    if (signal.aborted) throw bad("another image of the request could not be read");
    throw bad(`the fetch failed (${e instanceof Error ? (e.cause instanceof Error ? e.cause.message : e.message) : String(e)})`);
  }
}

/** A body's bytes, refused once they pass `max`. */
async function readCapped(body: ReadableStream<Uint8Array> | null, max: number, bad: (why: string) => ApiError): Promise<Uint8Array> {
  if (body === null) return new Uint8Array(0);
  const chunks: Uint8Array[] = [];
  let size = 0;
  const reader = body.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.length;
    if (size > max) {
      await reader.cancel();
      throw bad(`it is more than the ${max} bytes an image may be`);
    }
    chunks.push(value);
  }
  return Buffer.concat(chunks, size);
}

async function readLocal(options: ImageFetchOptions, url: URL, bad: (why: string) => ApiError): Promise<Uint8Array> {
  if (options.localPath === undefined) throw bad("this server reads no file:// URLs (start it with --allowed-local-media-path DIR to read images under DIR); or send the image inline as a base64 data URL");
  let path: string;
  try {
    path = fileURLToPath(url);
  } catch (e) {
    throw bad(e instanceof Error ? e.message : String(e));
  }
  // Inside the directory as written, then as links resolve (a link in it that points out is refused):
  // a path outside is refused before anything says whether it exists.
  const root = await fsp.realpath(options.localPath).catch(() => null);
  if (root === null) throw bad(`the directory ${options.localPath} (--allowed-local-media-path) cannot be read`);
  const within = (p: string, dir: string) => p.startsWith(dir.endsWith(sep) ? dir : dir + sep);
  const outside = bad(`it is outside ${options.localPath} (--allowed-local-media-path)`);
  if (!within(resolve(path), resolve(options.localPath)) && !within(resolve(path), root)) throw outside;
  const real = await fsp.realpath(path).catch(() => null);
  if (real === null) throw bad("no such file");
  if (!within(real, root)) throw outside;
  // A file the server may not read (permissions) is the client's URL's problem too: a 400, not a 500.
  const cannot = (e: unknown) => bad(`it cannot be read (${(e as { code?: string }).code ?? String(e)})`);
  const stat = await fsp.stat(real).catch((e) => Promise.reject(cannot(e)));
  if (!stat.isFile()) throw bad("it is not a file");
  if (stat.size > options.maxBytes) throw bad(`it is ${stat.size} bytes, more than the ${options.maxBytes} an image may be`);
  return new Uint8Array(await fsp.readFile(real).catch((e) => Promise.reject(cannot(e))));
}
