// Reads the TAP log of a `node --test` run that failed and prints the test files whose process died by
// a signal (a native crash: Dawn's WebGPU on lavapipe has segfaulted once mid-file), one per line.
// Exits 1, printing nothing, when any failure is something else (a failing test, an error at import,
// a nonzero exit): scripts/test-all.sh reruns crashed files alone only when every failure is a crash.
import { readFileSync } from "node:fs";

// deno-lint-ignore no-control-regex
const lines = readFileSync(process.argv[2], "utf8").replace(/\x1b\[[0-9;]*m/g, "").split("\n");
const crashed = [];
let failures = 0;
for (let i = 0; i < lines.length; i++) {
  // Top-level results only: a file's failure is reported there, named by the file's path.
  const m = /^not ok \d+ - (.*)$/.exec(lines[i]);
  if (!m) continue;
  failures++;
  const block = [];
  for (let j = i + 1; j < lines.length && !/^(ok|not ok) \d+ - /.test(lines[j]) && lines[j].trim() !== "..."; j++) block.push(lines[j]);
  const signal = block.some((l) => /^\s+signal: '(SIGSEGV|SIGBUS|SIGABRT|SIGILL)'$/.test(l));
  const wholeFile = m[1].endsWith(".test.ts") && block.some((l) => /^\s+location: '.*\.test\.ts:1:1'$/.test(l));
  if (signal && wholeFile) crashed.push(m[1]);
}
if (failures === 0 || crashed.length !== failures) process.exit(1);
console.log(crashed.join("\n"));
