/**
 * docs/modules.md maps every module (mini-sglang's docs page): each source file under src/, kv/ and
 * planner/ is named there, so a new module cannot land unmapped.
 */
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { projectRoot, test } from "../harness.ts";

/** Source files under `dir` (TypeScript and Node's .mjs entry points), as paths from the project root. */
function sources(dir: string): string[] {
  return readdirSync(join(projectRoot, dir), { withFileTypes: true }).flatMap((e) => {
    const path = `${dir}/${e.name}`;
    if (e.isDirectory()) return sources(path);
    return /\.(ts|mjs)$/.test(e.name) ? [path] : [];
  });
}

test("docs/modules.md names every module under src/, kv/ and planner/", () => {
  const map = readFileSync(join(projectRoot, "docs/modules.md"), "utf8");
  const files = ["src", "kv", "planner"].flatMap(sources);
  assert.ok(files.length > 100, `found ${files.length} source files`);
  const missing = files.filter((f) => !map.includes(`\`${f.slice(f.lastIndexOf("/") + 1)}\``));
  assert.deepEqual(missing, [], "modules docs/modules.md does not name");
});
