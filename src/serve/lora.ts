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
import { type LoadedModel, ModelLoadError } from "../model/config.ts";
import { loadLoraAdapter } from "../model/lora-load.ts";
import { pathExists } from "../runtime/fs.ts";
import { ApiError } from "./errors.ts";

/** One `--lora-modules` entry. */
export interface LoraModule {
  name: string;
  path: string;
}

/** Parses `--lora-modules`: comma-separated `name=path` pairs. Throws a RangeError naming the bad entry. */
export function parseLoraModules(spec: string): LoraModule[] {
  const out: LoraModule[] = [];
  for (const raw of spec.split(",").map((s) => s.trim()).filter((s) => s !== "")) {
    const eq = raw.indexOf("=");
    const name = raw.slice(0, eq).trim(), path = raw.slice(eq + 1).trim();
    if (eq < 1 || name === "" || path === "") throw new RangeError(`--lora-modules takes name=path pairs separated by commas, got "${raw}"`);
    if (out.some((m) => m.name === name)) throw new RangeError(`--lora-modules names "${name}" twice`);
    out.push({ name, path });
  }
  return out;
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

/** Reads the adapter file at `path` and loads it into `engine` as `name`; errors become ApiErrors (400, 404 for a missing file). */
export async function loadAdapterInto(engine: ServingEngine, model: LoadedModel, name: string, path: string): Promise<void> {
  if (!engine.loadAdapter) throw new ApiError(400, "This server's engine cannot load LoRA adapters", "lora_name", "lora_unsupported");
  if (engine.adapterNames?.().includes(name)) throw new ApiError(400, `The LoRA adapter '${name}' has already been loaded`, "lora_name", "invalid_value");
  if (!(await pathExists(path))) throw new ApiError(404, `LoRA adapter not found: "${path}"`, "lora_path", "not_found");
  try {
    const adapter = await loadLoraAdapter(path, model.config, { hasOutput: model.weights.output !== undefined });
    await engine.loadAdapter(name, adapter);
  } catch (e) {
    if (e instanceof LoraAdapterError) throw new ApiError(400, e.message, "lora_name", "invalid_value");
    if (e instanceof ModelLoadError) throw new ApiError(400, e.message, "lora_path", "invalid_value");
    throw e;
  }
}

const LoadRequest = z.looseObject({ lora_name: z.string().min(1), lora_path: z.string().min(1) });
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
    await loadAdapterInto(o.engine, o.model, body.lora_name, body.lora_path);
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
