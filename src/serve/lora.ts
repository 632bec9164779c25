/**
 * LoRA adapters over HTTP, as vLLM serves them: each loaded adapter is a model of its own name
 * (`--lora-modules name=path`; `/v1/models` lists it with the base model as `parent`), a request
 * for that name runs on the base model with the adapter, and with `--allow-runtime-lora-updating`
 * `/v1/load_lora_adapter` and `/v1/unload_lora_adapter` change the set while the server runs.
 */
import type { Context, Hono } from "hono";
import { z, type ZodType } from "zod";
import type { ServingEngine } from "../engine/engine-types.ts";
import { LoraAdapterError } from "../engine/engine-adapters.ts";
import { canReplaceAdapter } from "../cluster/cluster-front.ts";
import { type LoadedModel, ModelLoadError } from "../model/config.ts";
import { loadLoraAdapter } from "../model/lora-load.ts";
import { pathExists } from "../runtime/fs.ts";
import { ApiError } from "./errors.ts";

/** One `--lora-modules` entry. */
export interface LoraModule {
  name: string;
  path: string;
}

/**
 * Parses `--lora-modules`: comma-separated `name=path` pairs, or vLLM's JSON form, an object
 * `{"name": …, "path": …, "base_model_name": …}` or an array of them (the JSON holds commas, so it is
 * the whole value). `base_model_name` is read and not used: an adapter's parent is the served model.
 * Throws a RangeError naming the bad entry.
 */
export function parseLoraModules(spec: string): LoraModule[] {
  const trimmed = spec.trim();
  const entries = trimmed.startsWith("{") || trimmed.startsWith("[") ? jsonModules(trimmed) : spec.split(",").map((raw) => pairModule(raw.trim())).filter((m) => m !== undefined);
  const out: LoraModule[] = [];
  for (const m of entries) {
    if (out.some((o) => o.name === m.name)) throw new RangeError(`--lora-modules names "${m.name}" twice`);
    out.push(m);
  }
  return out;
}

/** One `name=path` entry (undefined for an empty one). */
function pairModule(raw: string): LoraModule | undefined {
  if (raw === "") return undefined;
  const eq = raw.indexOf("=");
  const name = raw.slice(0, eq).trim(), path = raw.slice(eq + 1).trim();
  if (eq < 1 || name === "" || path === "") throw new RangeError(`--lora-modules takes name=path pairs separated by commas, got "${raw}"`);
  return { name, path };
}

/** vLLM's JSON entries (its LoRAModulePath: name, path, base_model_name). */
function jsonModules(text: string): LoraModule[] {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    throw new RangeError(`--lora-modules JSON is not valid: ${JSON.stringify(text)}`);
  }
  return (Array.isArray(v) ? v : [v]).map((e: unknown) => {
    const o = typeof e === "object" && e !== null && !Array.isArray(e) ? e as Record<string, unknown> : undefined;
    const extra = o && Object.keys(o).find((k) => k !== "name" && k !== "path" && k !== "base_model_name");
    if (!o || typeof o.name !== "string" || o.name.trim() === "" || typeof o.path !== "string" || o.path.trim() === "" || extra !== undefined) {
      throw new RangeError(`--lora-modules JSON entries are {"name": …, "path": …} objects (base_model_name optional), got ${JSON.stringify(e)}`);
    }
    return { name: o.name.trim(), path: o.path.trim() };
  });
}

/**
 * `engine` with every request it is given run with the adapter `name` (GenerateRequest.adapter): what
 * a route serving a request for that model name submits to. Everything else is the engine's own.
 */
export function withAdapter(engine: ServingEngine, name: string): ServingEngine {
  return new Proxy(engine, {
    get(target, prop) {
      if (prop === "submit") return (req: Parameters<ServingEngine["submit"]>[0]) => target.submit({ ...req, adapter: name });
      const v = Reflect.get(target, prop, target);
      return typeof v === "function" ? v.bind(target) : v;
    },
  });
}

/**
 * Reads the adapter file at `path` and loads it into `engine` as `name`; errors become ApiErrors (400,
 * 404 for a missing file). `inplace` (vLLM's `load_inplace`) replaces an adapter already loaded as
 * `name`, once the new file has been read (a bad file leaves the old adapter serving); refused while
 * requests use the old one.
 */
export async function loadAdapterInto(engine: ServingEngine, model: LoadedModel, name: string, path: string, inplace = false): Promise<void> {
  if (!engine.loadAdapter) throw new ApiError(400, "This server's engine cannot load LoRA adapters", "lora_name", "lora_unsupported");
  const loaded = engine.adapterNames?.().includes(name) ?? false;
  if (loaded && !inplace) throw new ApiError(400, `The LoRA adapter '${name}' has already been loaded`, "lora_name", "invalid_value");
  if (!(await pathExists(path))) throw new ApiError(404, `LoRA adapter not found: "${path}"`, "lora_path", "not_found");
  try {
    const adapter = await loadLoraAdapter(path, model.config, { hasOutput: model.weights.output !== undefined });
    // A cluster's workers each read the file again, and one may fail: it swaps the new one in only once all have it.
    if (loaded && canReplaceAdapter(engine)) await engine.replaceAdapter(name, adapter);
    else {
      if (loaded) await engine.unloadAdapter!(name);
      await engine.loadAdapter(name, adapter);
    }
  } catch (e) {
    if (e instanceof LoraAdapterError) throw new ApiError(400, e.message, "lora_name", "invalid_value");
    if (e instanceof ModelLoadError) throw new ApiError(400, e.message, "lora_path", "invalid_value");
    throw e;
  }
}

const LoadRequest = z.looseObject({ lora_name: z.string().min(1), lora_path: z.string().min(1), load_inplace: z.boolean().nullish() });
const UnloadRequest = z.looseObject({ lora_name: z.string().min(1), lora_int_id: z.number().int().nullish() });

/** What {@link addLoraRoutes} needs from the app. */
export interface LoraRoutesOptions {
  engine: ServingEngine;
  model: LoadedModel;
  /** The base model's served name (an adapter may not take it). */
  modelName: string;
  /** Where each loaded adapter came from (`/v1/models`' `root`); the routes keep it current. */
  sources: Map<string, string>;
  /** `--allow-runtime-lora-updating`: without it the load and unload routes answer 404. */
  allowRuntime: boolean;
  readBody<T>(c: Context, schema: ZodType<T>): Promise<T>;
}

/** vLLM's `/v1/load_lora_adapter` and `/v1/unload_lora_adapter` (plain-text success bodies, as vLLM's). */
export function addLoraRoutes(app: Hono, o: LoraRoutesOptions): void {
  const gate = () => {
    if (!o.allowRuntime) throw new ApiError(404, "Loading and unloading LoRA adapters at run time is off; start the server with --allow-runtime-lora-updating", null, "not_found");
  };
  app.post("/v1/load_lora_adapter", async (c) => {
    gate();
    const body = await o.readBody(c, LoadRequest);
    if (body.lora_name === o.modelName) throw new ApiError(400, `A LoRA adapter cannot take the base model's name '${o.modelName}'`, "lora_name", "invalid_value");
    await loadAdapterInto(o.engine, o.model, body.lora_name, body.lora_path, body.load_inplace === true);
    o.sources.set(body.lora_name, body.lora_path);
    return c.text(`Success: LoRA adapter '${body.lora_name}' added successfully.`);
  });
  app.post("/v1/unload_lora_adapter", async (c) => {
    gate();
    const body = await o.readBody(c, UnloadRequest);
    if (!o.engine.adapterNames?.().includes(body.lora_name)) {
      throw new ApiError(404, `The LoRA adapter '${body.lora_name}' cannot be found`, "lora_name", "not_found");
    }
    try {
      await o.engine.unloadAdapter!(body.lora_name);
    } catch (e) {
      if (e instanceof LoraAdapterError) throw new ApiError(e.notFound ? 404 : 400, e.message, "lora_name", e.notFound ? "not_found" : "invalid_value");
      throw e;
    }
    o.sources.delete(body.lora_name);
    return c.text(`Success: LoRA adapter '${body.lora_name}' removed successfully.`);
  });
}
