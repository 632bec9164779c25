/**
 * Loads a Node-API addon (`.node` file) on either runtime. Node and Deno both resolve `.node`
 * files through a CommonJS `require` made by `createRequire` (Deno needs --allow-ffi for it).
 */
import { createRequire } from "node:module";

/** Loads the addon at an absolute path; throws what the runtime throws (missing file, bad ELF). */
export function loadNativeAddon<T>(absolutePath: string): T {
  const require = createRequire(import.meta.url);
  return require(absolutePath) as T;
}
