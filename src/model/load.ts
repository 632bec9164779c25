/**
 * The one entry point for loading a model: a GGUF file or a Hugging Face directory.
 * Every failure the user can cause (missing path, bad file) surfaces as a one-line ModelLoadError.
 */
import { promises as fsp } from "node:fs";
import { type LoadedModel, ModelLoadError } from "./config.ts";
import { loadGguf } from "./gguf-loader.ts";
import { loadHfDirectory } from "./hf-loader.ts";
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
    return isDir ? await loadHfDirectory(path, options) : await loadGguf(path, options);
  } catch (e) {
    if (e instanceof ModelLoadError) throw e;
    // I/O failures (permissions, a file shrinking mid-read) still get one clear line.
    const message = e instanceof Error ? e.message.split("\n")[0] : String(e);
    throw new ModelLoadError(`Cannot load model "${path}": ${message}`);
  }
}
