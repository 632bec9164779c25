/** A Hugging Face model directory's files: its JSON files, and its safetensors shards (through model.safetensors.index.json or not). */
import { promises as fsp } from "node:fs";
import { openRandomAccess, pathExists, type RandomAccessFile, readTextFile } from "../runtime/fs.ts";
import { ModelLoadError } from "./config.ts";
import { isJsonObject, type Json } from "./hf-json.ts";
import { readSafetensorsHeader, type SafetensorsInfo } from "./safetensors.ts";

/** `path` (the directory's `what`) parsed as a JSON object; a one-line error when it is missing, not JSON, or not an object. */
export async function readJson(path: string, what: string): Promise<Json> {
  let text: string;
  try {
    text = await readTextFile(path);
  } catch {
    throw new ModelLoadError(`Model directory lacks ${what}: "${path}" not found`);
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    throw new ModelLoadError(`"${path}" is not valid JSON`);
  }
  if (!isJsonObject(json)) throw new ModelLoadError(`"${path}" should hold a JSON object, got ${Array.isArray(json) ? "an array" : JSON.stringify(json)}`);
  return json;
}

/** Opens every safetensors shard and indexes its tensors by name. */
export async function openShards(dir: string): Promise<{ files: RandomAccessFile[]; index: Map<string, [RandomAccessFile, SafetensorsInfo]> }> {
  const indexPath = `${dir}/model.safetensors.index.json`;
  let shardNames: string[];
  let weightMap: Json | undefined;
  if (await pathExists(indexPath)) {
    weightMap = (await readJson(indexPath, "its safetensors index")).weight_map as Json;
    if (!isJsonObject(weightMap)) throw new ModelLoadError(`"${indexPath}" has no weight_map`);
    if (Object.keys(weightMap).length === 0) {
      throw new ModelLoadError(`"${indexPath}" has an empty weight_map; it should map each tensor name to its shard file`);
    }
    shardNames = [...new Set(Object.values(weightMap))].map((shard) => {
      // A shard is a file of the directory itself, not a path to elsewhere.
      if (typeof shard !== "string" || shard === "" || shard.includes("/") || shard.includes("\\") || shard === "." || shard === "..") {
        throw new ModelLoadError(`"${indexPath}" names shard ${JSON.stringify(shard)}; expected a file name in the model directory`);
      }
      return shard;
    });
  } else {
    shardNames = (await fsp.readdir(dir)).filter((n) => n.endsWith(".safetensors")).sort();
  }
  if (shardNames.length === 0) throw new ModelLoadError(`Model directory "${dir}" holds no .safetensors files`);
  const files: RandomAccessFile[] = [];
  const index = new Map<string, [RandomAccessFile, SafetensorsInfo]>();
  try {
    for (const name of shardNames) {
      const shardPath = `${dir}/${name}`;
      if (!(await pathExists(shardPath))) throw new ModelLoadError(`Safetensors shard not found: "${shardPath}"`);
      const file = await openRandomAccess(shardPath);
      files.push(file);
      for (const [t, info] of (await readSafetensorsHeader(file)).tensors) {
        const seen = index.get(t);
        // A tensor in two shards is read from the one the index names; without one, which is meant is unknown.
        if (seen && weightMap?.[t] !== name) {
          if (weightMap?.[t] === seen[0].path.slice(dir.length + 1)) continue;
          throw new ModelLoadError(`Tensor "${t}" is in both "${seen[0].path}" and "${shardPath}"; ${weightMap ? "the index names neither" : "remove one of them"}`);
        }
        index.set(t, [file, info]);
      }
    }
  } catch (e) {
    await Promise.all(files.map((f) => f.close()));
    throw e;
  }
  return { files, index };
}
