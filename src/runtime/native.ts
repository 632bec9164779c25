/**
 * Loads a Node-API addon (`.node` file) on either runtime. Node and Deno both resolve `.node`
 * files through a CommonJS `require` made by `createRequire` (Deno needs --allow-ffi for it).
 */
import { createRequire } from "node:module";
import { resolve } from "node:path";

/**
 * Loads the addon at `path` (a relative path is read from the working directory); throws what the
 * runtime throws (missing file, bad ELF), or a TypeError for a path that is not a `.node` file,
 * which `require` would otherwise run as JavaScript.
 */
export function loadNativeAddon<T>(path: string): T {
  if (!path.endsWith(".node")) throw new TypeError(`A Node-API addon is a ".node" file; got "${path}"`);
  const require = createRequire(import.meta.url);
  return require(resolve(path)) as T;
}
