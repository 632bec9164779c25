/**
 * Runs test files in this one Node process, one after another, as `deno test` runs a shard: Node 20's
 * `--test` starts a process per file, and loading tsx and the module graph again costs about 1.7 s a
 * file (some 300 files: minutes of CI). Each file is imported and the tests it registers are awaited
 * before the next is taken. With `NODE_TESTS_CLAIMS` set to a directory, several such processes share
 * one list: each takes the next file no other has claimed (a claim is a `mkdir`, which only one
 * process can make; `done` inside it once the file's tests ended), so they end within a file of each
 * other however long each file runs. A file that
 * fails to import is reported as a failing test named by its path; the rest still run.
 *
 *   NODE_TESTS_CLAIMS=$(mktemp -d) node --import tsx --test-reporter=tap scripts/node-tests.ts tests/a.test.ts …
 */
import { test } from "node:test";
import { mkdirSync } from "node:fs";
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import process from "node:process";
import { NODE_PENDING_TESTS } from "../tests/harness.ts";

/** True when this process claims file `i` (always, without a claims directory). */
function claim(dir: string | undefined, i: number): boolean {
  if (dir === undefined) return true;
  try {
    mkdirSync(join(dir, String(i)));
    return true;
  } catch {
    return false;
  }
}

const pending: Promise<unknown>[] = [];
(globalThis as { [NODE_PENDING_TESTS]?: Promise<unknown>[] })[NODE_PENDING_TESTS] = pending;
const claims = process.env.NODE_TESTS_CLAIMS || undefined;
for (const [i, file] of process.argv.slice(2).entries()) {
  if (!claim(claims, i)) continue;
  try {
    await import(pathToFileURL(resolve(file)).href);
  } catch (e) {
    pending.push(test(`${file} (loading the file)`, () => {
      throw e;
    }));
  }
  await Promise.allSettled(pending.splice(0));
  // Finished: what a crashed process leaves without this mark is what runs again (scripts/test-all.sh).
  if (claims !== undefined) mkdirSync(join(claims, String(i), "done"));
}
