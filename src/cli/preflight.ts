/**
 * What `serve` and `generate` can check before the model loads: a typo in `--host`, a port another
 * process holds or a misspelled adapter path should not cost the user a model load (minutes for a
 * large one) to learn of.
 */
import net from "node:net";
import { readFileSync, statSync } from "node:fs";
import { ModelLoadError } from "../model/config.ts";
import { pathExists } from "../runtime/fs.ts";
import { ListenError } from "../serve/listen.ts";
import { ArgsError } from "./args.ts";
import { Template } from "@huggingface/jinja";

/**
 * The host to listen on from `--host`: a host name or an IP address, `[::1]` read as `::1`. A port,
 * a scheme or a path in it (`127.0.0.1:8000`, `http://localhost`) is an {@link ArgsError} naming the flag.
 */
export function hostFlag(raw: string): string {
  const bracketed = /^\[(.*)\]$/.exec(raw);
  if (bracketed) {
    if (net.isIPv6(bracketed[1])) return bracketed[1];
    throw new ArgsError(`Flag --host takes a host name or IP address, got "${raw}"`);
  }
  if (net.isIP(raw) !== 0) return raw;
  if (raw.includes(":")) throw new ArgsError(`Flag --host takes a host name or IP address without a port, got "${raw}"; give the port with --port`);
  // Letters, digits, "-", "_" and dots: what a host name or an IPv4 address is made of.
  if (!/^[a-z0-9_.-]+$/i.test(raw)) throw new ArgsError(`Flag --host takes a host name or IP address, got "${raw}"`);
  return raw;
}

/**
 * Binds `host:port` for a moment and lets it go, so that an address in use, not this machine's, not
 * permitted or not resolving is a {@link ListenError} now rather than after the model has loaded.
 * The server binds it again for real (and reports a failure there the same way).
 */
export async function probeListen(host: string, port: number): Promise<void> {
  const probe = net.createServer();
  try {
    await new Promise<void>((resolve, reject) => {
      probe.once("error", reject);
      probe.listen({ host, port, exclusive: true }, () => resolve());
    });
  } catch (e) {
    throw new ListenError(host, port, e);
  }
  await new Promise<void>((resolve) => probe.close(() => resolve()));
}

/** The files a server or a generation reads besides the model: LoRA adapters and a draft model. */
export interface SideFiles {
  /** `--lora-modules` (serve) or `--lora` (generate, named ""). */
  lora?: readonly { name: string; path: string }[];
  /** A `--speculative-config` draft model's path. */
  draftModel?: string;
  /** A `--speculative-config` EAGLE head's directory. */
  eagleHead?: string;
  /** `--mmproj`: the vision projector file. */
  mmproj?: string;
}

/**
 * Refuses a LoRA adapter or draft model that does not exist, with the words the load itself would
 * use (a {@link ModelLoadError}), before the model it goes with loads.
 */
export async function checkSideFiles(files: SideFiles): Promise<void> {
  for (const { name, path } of files.lora ?? []) {
    if (!(await pathExists(path))) throw new ModelLoadError(`${name === "" ? "" : `--lora-modules "${name}": `}LoRA adapter not found: "${path}"`);
  }
  if (files.draftModel !== undefined && !(await pathExists(files.draftModel))) {
    throw new ModelLoadError(`The speculative draft model cannot be loaded: Model file not found: "${files.draftModel}"`);
  }
  if (files.eagleHead !== undefined && !(await pathExists(files.eagleHead))) throw new ModelLoadError(`EAGLE head not found: "${files.eagleHead}"`);
  if (files.mmproj !== undefined && !(await pathExists(files.mmproj))) throw new ModelLoadError(`Projector file not found: "${files.mmproj}"`);
}

/** What `--allowed-media-domains`, `--allowed-local-media-path` and `--media-fetch-timeout` give the server (src/serve/image-fetch.ts). */
export interface MediaFlags {
  allowedMediaDomains?: string[];
  allowedLocalMediaPath?: string;
  mediaFetchTimeoutMs?: number;
  imageCacheBytes?: number;
  maxImagesPerRequest?: number;
}

/** The image flags, checked: host names (not URLs) or *, an existing directory, all with --mmproj. */
export function mediaFlags(f: { mmproj?: string; "allowed-media-domains"?: string; "allowed-local-media-path"?: string; "media-fetch-timeout"?: number; "mm-processor-cache-gb"?: number; "limit-mm-per-prompt"?: string }): MediaFlags {
  const given = (["allowed-media-domains", "allowed-local-media-path", "media-fetch-timeout", "mm-processor-cache-gb", "limit-mm-per-prompt"] as const).filter((k) => f[k] !== undefined);
  const what = { "mm-processor-cache-gb": "sizes the cache of prepared images", "limit-mm-per-prompt": "limits a request's images" } as Record<string, string>;
  if (given.length > 0 && f.mmproj === undefined) throw new ArgsError(`Flag --${given[0]} ${what[given[0]] ?? "says where image URLs are read from"}; it needs --mmproj (a model that reads images)`);
  const out: MediaFlags = {};
  if (f["allowed-media-domains"] !== undefined) {
    const domains = f["allowed-media-domains"].split(",").map((d) => d.trim().toLowerCase());
    const bad = domains.find((d) => d !== "*" && !/^(?:[a-z0-9-]+\.)*[a-z0-9-]+$|^\[?[0-9a-f:.]+\]?$/.test(d));
    if (bad !== undefined) throw new ArgsError(`Flag --allowed-media-domains: ${JSON.stringify(bad)} is not a host name (give hosts such as images.example.com, without scheme, port or path) or *`);
    out.allowedMediaDomains = domains.map((d) => d.replace(/^\[(.*)\]$/, "$1"));
  }
  const dir = f["allowed-local-media-path"];
  if (dir !== undefined) {
    const isDir = (() => {
      try {
        return statSync(dir).isDirectory();
      } catch {
        return false;
      }
    })();
    if (!isDir) throw new ArgsError(`Flag --allowed-local-media-path: "${dir}" is not a directory`);
    out.allowedLocalMediaPath = dir;
  }
  if (f["media-fetch-timeout"] !== undefined) out.mediaFetchTimeoutMs = f["media-fetch-timeout"] * 1000;
  if (f["mm-processor-cache-gb"] !== undefined) out.imageCacheBytes = Math.round(f["mm-processor-cache-gb"] * 1024 ** 3);
  if (f["limit-mm-per-prompt"] !== undefined) out.maxImagesPerRequest = imageLimit(f["limit-mm-per-prompt"]);
  return out;
}

/**
 * `--chat-template`'s template, as vLLM reads the flag: the file it names, else the value itself where it
 * is a template (holds `{{` or `{%`); a value that is neither is an ArgsError (a mistyped path would
 * otherwise render every prompt as its own text).
 */
export function chatTemplateFlag(value: string): { text: string; from: string } {
  let text: string | undefined;
  try {
    text = readFileSync(value, "utf8");
  } catch {
    // Not a file: the value itself, if it is a template.
  }
  if (text === undefined && !/\{[{%]/.test(value)) throw new ArgsError(`Flag --chat-template: "${value}" is neither a file nor a template (no "{{" or "{%" in it)`);
  const template = text ?? value;
  const from = text === undefined ? "the flag" : `the file ${value}`;
  if (template.trim() === "") throw new ArgsError(`Flag --chat-template: ${from} is empty`);
  try {
    new Template(template);
  } catch (e) {
    throw new ArgsError(`Flag --chat-template: the template from ${from} does not parse: ${e instanceof Error ? e.message : String(e)}`);
  }
  return { text: template, from };
}

/** vLLM's flags accepted for its command lines where they ask what this server does anyway; other values refused saying why. */
export function checkVllmFlags(f: { "enable-prefix-caching"?: boolean; "enable-chunked-prefill"?: boolean; "tensor-parallel-size"?: number; dtype?: string }): void {
  if (f["enable-prefix-caching"] === false) throw new ArgsError("Flag --enable-prefix-caching=false is not supported: prefix caching is always on here");
  if (f["enable-chunked-prefill"] === false) throw new ArgsError("Flag --enable-chunked-prefill=false is not supported: long prompts always prefill in chunks here (--long-prefill-token-threshold sets their size)");
  const tp = f["tensor-parallel-size"];
  if (tp !== undefined && tp > 1) throw new ArgsError(`Flag --tensor-parallel-size ${tp} is not supported: each engine runs on one device here; --workers N runs N engines behind one router`);
  if (f.dtype !== undefined && f.dtype !== "auto") throw new ArgsError(`Flag --dtype ${f.dtype} is not supported: weights are computed as stored (f32, f16, bf16 or quantized blocks); --quantize converts them at load`);
}

/**
 * `serve MODEL --flags`, as `vllm serve MODEL` takes it: a first argument that is not a flag is the
 * model (`--model` then may not be given as well); any other argument outside a flag stays an error.
 */
export function modelFirst(argv: readonly string[]): string[] {
  if (argv.length === 0 || argv[0].startsWith("--")) return [...argv];
  if (argv.some((a) => a === "--model" || a.startsWith("--model="))) throw new ArgsError(`The model is given twice: "${argv[0]}" first, and --model`);
  return ["--model", argv[0], ...argv.slice(1)];
}

/** `--limit-mm-per-prompt`'s image count, from vLLM's JSON (`{"image": 4}`); other modalities only as 0. */
function imageLimit(value: string): number {
  const bad = (why: string) => new ArgsError(`Flag --limit-mm-per-prompt: ${why}, got ${JSON.stringify(value)} (e.g. '{"image": 4}')`);
  let parsed: unknown;
  try {
    parsed = JSON.parse(value);
  } catch {
    throw bad("expected a JSON object of counts by modality");
  }
  if (parsed === null || typeof parsed !== "object" || Array.isArray(parsed)) throw bad("expected a JSON object of counts by modality");
  let images: number | undefined;
  for (const [modality, count] of Object.entries(parsed)) {
    if (!Number.isInteger(count) || (count as number) < 0) throw bad(`the count for "${modality}" must be a whole number from 0`);
    if (modality === "image") images = count as number;
    else if (count !== 0) throw bad(`only images are read here ("${modality}" can only be 0)`);
  }
  if (images === undefined) throw bad('no "image" count');
  return images;
}
