/**
 * Loads a LoRA adapter in either format a user has: a llama.cpp GGUF adapter file (lora-gguf.ts) or
 * a Hugging Face PEFT directory (lora-peft.ts), checked against the base model it will run on.
 */
import { stat } from "node:fs/promises";
import { ModelLoadError, type ModelConfig } from "./config.ts";
import { loadGgufLora } from "./lora-gguf.ts";
import { loadPeftLora } from "./lora-peft.ts";
import type { LoraAdapter, LoraLoadOptions } from "./lora.ts";

/** Reads the adapter at `path` (a GGUF file or a PEFT directory) for a base model with `config`. Throws ModelLoadError. */
export async function loadLoraAdapter(path: string, config: ModelConfig, options: LoraLoadOptions = {}): Promise<LoraAdapter> {
  let isDir: boolean;
  try {
    isDir = (await stat(path)).isDirectory();
  } catch {
    throw new ModelLoadError(`LoRA adapter not found: "${path}"`);
  }
  try {
    return isDir ? await loadPeftLora(path, config, options) : await loadGgufLora(path, config, options);
  } catch (e) {
    if (e instanceof ModelLoadError) throw e;
    // As loadModel(): I/O failures (permissions, a file shrinking mid-read) still get one clear line, so a server answers 400, not 500.
    const message = e instanceof Error ? e.message.split("\n")[0] : String(e);
    throw new ModelLoadError(`Cannot load LoRA adapter "${path}": ${message}`);
  }
}
