import assert from "node:assert/strict";
import { test, projectRoot } from "../harness.ts";
import { readdir, readFile } from "node:fs/promises";

async function sources(dir: string): Promise<string[]> {
  const out: string[] = [];
  for (const e of await readdir(`${projectRoot}/${dir}`, { withFileTypes: true })) {
    const p = `${dir}/${e.name}`;
    if (e.isDirectory()) out.push(...await sources(p));
    else if (e.name.endsWith(".ts")) out.push(p);
  }
  return out;
}

function imports(src: string): string[] {
  return [...src.matchAll(/(?:import|export)\s[^;]*?from\s+"([^"]+)"|import\(\s*"([^"]+)"\s*\)/g)].map((m) => m[1] ?? m[2]);
}

function resolve(file: string, spec: string): string {
  if (!spec.startsWith(".")) return spec;
  const parts = file.split("/").slice(0, -1);
  for (const s of spec.split("/")) {
    if (s === "..") parts.pop();
    else if (s !== ".") parts.push(s);
  }
  return parts.join("/");
}

// Impurities planner/ and kv/ must not touch (checked in code with comments stripped).
const IMPURE = [/\bDeno\./, /\bprocess\./, /Date\.now\s*\(/, /Math\.random\s*\(/, /\bsetTimeout\s*\(/, /\bsetInterval\s*\(/, /performance\.now\s*\(/];

test("import graph: planner/ and kv/ are pure and import only each other", async () => {
  for (const file of [...await sources("planner"), ...await sources("kv")]) {
    const src = await readFile(`${projectRoot}/${file}`, "utf8");
    for (const spec of imports(src)) {
      const target = resolve(file, spec);
      assert.ok(target.startsWith("planner/") || target.startsWith("kv/"), `${file} imports ${spec}`);
    }
    const code = src.replace(/\/\*[\s\S]*?\*\//g, "").replace(/\/\/.*$/gm, "");
    for (const re of IMPURE) assert.ok(!re.test(code), `${file} uses ${re}`);
  }
});

test("import graph: src/sim imports planner/ and kv/, never the engine or a backend", async () => {
  const files = await sources("src/sim");
  assert.ok(files.length > 5);
  let usesPlanner = false, usesKv = false;
  for (const file of files) {
    const src = await readFile(`${projectRoot}/${file}`, "utf8");
    for (const spec of imports(src)) {
      const target = resolve(file, spec);
      assert.ok(!/^src\/(engine|backend|model|serve)\b/.test(target), `${file} imports ${spec}`);
      assert.ok(target.startsWith("src/sim/") || target.startsWith("planner/") || target.startsWith("kv/"), `${file} imports ${spec}`);
      usesPlanner ||= target.startsWith("planner/");
      usesKv ||= target.startsWith("kv/");
    }
  }
  assert.ok(usesPlanner && usesKv, "the simulator runs the real planner and KV code");
});
