/**
 * Images made ready for the engine (decoded, resized, normalized, keyed), off the server's thread and
 * once: an agent's every turn resends its earlier screenshots, and decoding a 1920 × 1080 PNG takes
 * ~75 ms of the thread that streams every other answer. `ImagePrep` keeps prepared images by a digest
 * of their data URL (least recently used dropped past a byte budget: vLLM's `--mm-processor-cache-gb`)
 * and prepares a request's new ones in a thread of its own before the request is read
 * (`prepare`); what it has not prepared (a stored turn's image it has dropped, a thread that failed,
 * a file that does not decode: its 400 comes from there) is prepared on the server's thread when the
 * prompt is rendered (`prepared`), as before.
 */
import { createHash } from "node:crypto";
import type { PreprocessSpec } from "../model/vision/image-preprocess.ts";
import { preprocessImage } from "../model/vision/image-preprocess.ts";
import { imageKey } from "../model/vision/image-tokens.ts";
import { spawnThread, type ThreadPort } from "../runtime/threads.ts";
import { imageFromUrl } from "./prompt-images.ts";

/** An image as the engine takes it: its preprocessed pixels and their key (model/vision/image-tokens.ts). */
export interface PreparedImage {
  pixels: Float32Array;
  key: string;
}

/** A request's images prepared before its prompt is rendered, by data URL (the body's own strings: no digest taken again). */
export type PreparedImages = ReadonlyMap<string, PreparedImage>;

/** What the thread is asked: one data URL to prepare with `spec`. */
export interface PrepRequest {
  id: number;
  url: string;
  spec: PreprocessSpec;
}

/** What the thread answers: the image, or why not (the server's thread then finds the same error and answers it). */
export type PrepReply = { id: number; pixels: Float32Array; key: string } | { id: number; error: string };

/** The cache's default budget: 1 GiB (vLLM's default is 4 GiB, for servers; this one runs on laptops too). */
export const DEFAULT_IMAGE_CACHE_BYTES = 1024 ** 3;

/** A data URL's digest, what the cache is keyed by (not the URL: it would keep megabytes of text alive). */
function urlDigest(url: string): string {
  return createHash("sha256").update(url).digest("base64");
}

/** Prepares images for one model's tower: in a thread, kept by data URL. */
export class ImagePrep {
  private readonly cache = new Map<string, PreparedImage>();
  private cachedBytes = 0;
  private thread: Promise<ThreadPort> | undefined;
  private readonly waiting = new Map<number, (reply: PrepReply | undefined) => void>();
  private nextId = 0;
  private closed = false;

  /**
   * `cacheBytes` 0 keeps nothing between requests; `threaded` false prepares everything on the calling
   * thread (`prepare` then does nothing).
   */
  constructor(readonly spec: PreprocessSpec, readonly cacheBytes: number = DEFAULT_IMAGE_CACHE_BYTES, private readonly threaded = true) {}

  /**
   * Prepares the data URLs among `urls` that are not kept, in the thread, and returns every one it
   * has (kept or made now) by URL. A URL the thread cannot read is left out.
   */
  async prepare(urls: readonly string[]): Promise<Map<string, PreparedImage>> {
    const out = new Map<string, PreparedImage>();
    const missing: [string, string][] = [];
    for (const url of new Set(urls)) {
      if (!url.startsWith("data:")) continue;
      const digest = urlDigest(url);
      const kept = this.kept(digest);
      if (kept) out.set(url, kept);
      else missing.push([digest, url]);
    }
    if (!this.threaded || this.closed || missing.length === 0) return out;
    const made = await Promise.all(missing.map(([, url]) => this.inThread(url)));
    made.forEach((image, i) => {
      if (!image) return;
      out.set(missing[i][1], image);
      this.keep(missing[i][0], image);
    });
    return out;
  }

  /** The prepared image of `url`: from `given` (this request's), kept, or made here; a 400 naming `param` where it cannot be read. */
  prepared(url: string, param: string, given?: PreparedImages): PreparedImage {
    const mine = given?.get(url);
    if (mine) return mine;
    const digest = url.startsWith("data:") ? urlDigest(url) : undefined;
    const found = digest === undefined ? undefined : this.kept(digest);
    if (found) return found;
    const pixels = preprocessImage(imageFromUrl(url, param), this.spec);
    const image = { pixels, key: imageKey(pixels) };
    if (digest !== undefined) this.keep(digest, image);
    return image;
  }

  /**
   * Starts the thread and waits until it answers (a server calls it before listening: the thread's
   * start, ~0.4 s under Node's tsx and ~0.16 s under Deno, is then not the first image's wait).
   */
  async start(): Promise<void> {
    // An empty URL is no image: the thread answers it with an error, which is the round trip wanted.
    if (this.threaded && !this.closed) await this.inThread("");
  }

  /** Whether the thread is started (or starting). */
  get running(): boolean {
    return this.thread !== undefined;
  }

  /** Ends the thread (a server's shutdown); later images are prepared on the calling thread. */
  async close(): Promise<void> {
    this.closed = true;
    const thread = this.thread;
    this.thread = undefined;
    for (const done of this.waiting.values()) done(undefined);
    this.waiting.clear();
    if (thread) await (await thread.catch(() => undefined))?.close();
  }

  /** How many images and bytes are kept. */
  get size(): { images: number; bytes: number } {
    return { images: this.cache.size, bytes: this.cachedBytes };
  }

  private kept(digest: string): PreparedImage | undefined {
    const found = this.cache.get(digest);
    if (found) {
      this.cache.delete(digest);
      this.cache.set(digest, found);
    }
    return found;
  }

  private keep(digest: string, image: PreparedImage): void {
    const bytes = image.pixels.byteLength;
    if (bytes > this.cacheBytes || this.cache.has(digest)) return;
    this.cache.set(digest, image);
    this.cachedBytes += bytes;
    for (const [old, kept] of this.cache) {
      if (this.cachedBytes <= this.cacheBytes) break;
      this.cache.delete(old);
      this.cachedBytes -= kept.pixels.byteLength;
    }
  }

  /** The thread's answer for one URL (undefined: it could not read it, or the thread failed). */
  private async inThread(url: string): Promise<PreparedImage | undefined> {
    let port: ThreadPort;
    try {
      port = await this.port();
    } catch {
      return undefined;
    }
    const id = this.nextId++;
    const reply = await new Promise<PrepReply | undefined>((resolve) => {
      this.waiting.set(id, resolve);
      port.post({ id, url, spec: this.spec } satisfies PrepRequest);
    });
    return reply && "key" in reply ? { pixels: reply.pixels, key: reply.key } : undefined;
  }

  private port(): Promise<ThreadPort> {
    if (this.thread) return this.thread;
    const thread = spawnThread(new URL("./image-prep-thread.ts", import.meta.url)).then((port) => {
      port.onMessage((m) => {
        const reply = m as PrepReply;
        this.waiting.get(reply.id)?.(reply);
        this.waiting.delete(reply.id);
      });
      // A thread that fails leaves its images to the server's thread; the next request starts another.
      port.onError(() => {
        if (this.thread === thread) this.thread = undefined;
        for (const done of this.waiting.values()) done(undefined);
        this.waiting.clear();
        void port.close();
      });
      return port;
    });
    this.thread = thread;
    thread.catch(() => {
      if (this.thread === thread) this.thread = undefined;
    });
    return thread;
  }
}
