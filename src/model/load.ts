/**
 * The one entry point for loading a model: a GGUF file or a Hugging Face directory.
 * Every failure the user can cause (missing path, bad file) surfaces as a one-line ModelLoadError.
 */
import { promises as fsp } from "node:fs";
import { pathExists } from "../runtime/fs.ts";
import { type LoadedModel, ModelLoadError } from "./config.ts";
import { loadGguf } from "./gguf-loader.ts";
import { loadHfDirectory } from "./hf-loader.ts";
import { attachEagleHead } from "./eagle-head.ts";
import { loadVisionModel } from "./vision/mmproj.ts";
import type { LoadOptions } from "./weights.ts";

export type { LoadOptions, LoadProgress } from "./weights.ts";

/** Loads a model from a .gguf file or a directory with config.json + safetensors + tokenizer.json. */
export async function loadModel(path: string, options: LoadOptions = {}): Promise<LoadedModel> {
  let isDir: boolean;
  try {
    isDir = (await fsp.stat(path)).isDirectory();
  } catch {
    throw new ModelLoadError(`Model file not found: "${path}"`);
  }
  try {
    if (isDir) await checkNotGgufDirectory(path);
    const model = isDir ? await loadHfDirectory(path, options) : await loadGguf(path, options);
    if (options.eagle) await attachEagleHead(model, options.eagle.method, options.eagle.path);
    if (options.mmproj !== undefined) {
      const vision = await loadVisionModel(options.mmproj, model.config.hiddenSize);
      return { ...model, config: { ...model.config, vision: vision.config }, vision };
    }
    return model;
  } catch (e) {
    if (e instanceof ModelLoadError) throw e;
    // I/O failures (permissions, a file shrinking mid-read) still get one clear line.
    const message = e instanceof Error ? e.message.split("\n")[0] : String(e);
    throw new ModelLoadError(`Cannot load model "${path}": ${message}`);
  }
}

/** A directory of GGUF files (a GGUF repository's snapshot) without config.json: the user meant one of the files. */
async function checkNotGgufDirectory(dir: string): Promise<void> {
  if (await pathExists(`${dir}/config.json`)) return;
  const ggufs = (await fsp.readdir(dir)).filter((n) => n.endsWith(".gguf")).sort();
  if (ggufs.length === 0) return;
  const shown = ggufs.slice(0, 3).map((n) => JSON.stringify(n)).join(", ") + (ggufs.length > 3 ? `, … (${ggufs.length} files)` : "");
  throw new ModelLoadError(`Model directory "${dir}" has no config.json but holds GGUF files (${shown}); pass one file's path as the model`);
}
