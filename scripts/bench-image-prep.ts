/**
 * What a request's images cost the server's thread before the engine sees them (decode, resize,
 * normalize, key): an agent's request resends every screenshot of its conversation. A server with the
 * bundled model and a random 336-pixel tower (LLaVA-1.5's side), `POST /tokenize` of chat messages
 * holding `--images` 1920 × 1080 PNG screenshots (UI-like: flat panels, text-like strokes); per
 * setting, medians of `--rounds` runs of the request's wall time and of the longest stall of the
 * server's event loop meanwhile (a 1 ms ticker in the server's process: what every other stream
 * waited):
 *
 * - "new screenshots": images the server has never seen;
 * - "same screenshots again": the same request resent;
 * - "next turn": the same screenshots and one new one (an agent's next step).
 *
 *   npx deno run -A --no-check scripts/bench-image-prep.ts [--images 8] [--rounds 5]
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { parseArgs } from "../src/cli/args.ts";
import { encodePng } from "../src/model/vision/png.ts";
import { cliArgs, exitProcess, runtimeName } from "../src/runtime/env.ts";
import { startServer } from "../src/serve/server.ts";
import { writeMmproj } from "../tests/model/vision-files.ts";
import { median } from "./agent-session-timing.ts";

const f = parseArgs(cliArgs(), {
  images: { kind: "int", min: 1, help: "screenshots per request (default 8)" },
  rounds: { kind: "int", min: 1, help: "rounds (default 5)" },
});
const count = f.images ?? 8, rounds = f.rounds ?? 5;
const dir = mkdtempSync(`${tmpdir()}/bench-image-prep-`);
writeMmproj(`${dir}/mmproj.gguf`, { lmHidden: 64, seed: 5, imageSize: 336, patchSize: 14 });
const modelPath = new URL("../models/stories260K.gguf", import.meta.url).pathname;
const server = await startServer({ modelPath, mmproj: `${dir}/mmproj.gguf`, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 64, maxBodyBytes: 256 * 1024 * 1024 });

let seed = 0;
/** A new 1920 × 1080 screenshot-like PNG as a data URL: panels of flat colour, rows of short strokes. */
function screenshot(): string {
  seed++;
  const w = 1920, h = 1080, rgb = new Uint8Array(w * h * 3);
  for (let y = 0; y < h; y++) {
    for (let x = 0; x < w; x++) {
      const panel = ((x >> 8) + (y >> 7) * 3 + seed) % 5;
      let v = 200 + panel * 10;
      // Text-like: short dark strokes on some rows, different per screenshot.
      if ((y % 18) < 11 && ((x * 7 + y * 3 + seed * 131) % 23) < 9 && (x >> 6) % 3 !== 0) v = 30 + ((x * 13 + y * 7 + seed) * 2654435761 >>> 26);
      const i = (y * w + x) * 3;
      rgb[i] = v;
      rgb[i + 1] = (v + panel * 17) & 255;
      rgb[i + 2] = (v + seed * 29) & 255;
    }
  }
  const png = encodePng({ width: w, height: h, rgb });
  let text = "";
  for (let i = 0; i < png.length; i += 0x8000) text += String.fromCharCode(...png.subarray(i, i + 0x8000));
  return `data:image/png;base64,${btoa(text)}`;
}

/** The request's wall time and the event loop's longest stall meanwhile, in ms. */
async function timed(urls: readonly string[]): Promise<{ wall: number; stall: number }> {
  let last = performance.now(), stall = 0;
  const ticker = setInterval(() => {
    const now = performance.now();
    stall = Math.max(stall, now - last);
    last = now;
  }, 1);
  const t0 = performance.now();
  const res = await fetch(`${server.url}/tokenize`, {
    method: "POST", headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: server.modelName, messages: [{ role: "user", content: [{ type: "text", text: "What is on the screen?" }, ...urls.map((url) => ({ type: "image_url", image_url: { url } }))] }] }),
  });
  if (!res.ok) throw new Error(`tokenize answered ${res.status}: ${await res.text()}`);
  await res.json();
  const wall = performance.now() - t0;
  clearInterval(ticker);
  return { wall, stall: Math.max(stall, performance.now() - last) };
}

const settings = ["new screenshots", "same screenshots again", "next turn"] as const;
const results = new Map<string, { wall: number[]; stall: number[] }>(settings.map((s) => [s, { wall: [], stall: [] }]));
const pngBytes: number[] = [];
try {
  for (let r = 0; r < rounds; r++) {
    const shots = Array.from({ length: count }, screenshot);
    pngBytes.push(...shots.map((s) => Math.round(s.length * 3 / 4)));
    const next = [...shots, screenshot()];
    for (const [setting, urls] of [["new screenshots", shots], ["same screenshots again", shots], ["next turn", next]] as const) {
      const t = await timed(urls);
      results.get(setting)!.wall.push(t.wall);
      results.get(setting)!.stall.push(t.stall);
    }
  }
  console.log(`# ${runtimeName()}: ${count} screenshots of 1920 × 1080 a request (PNG ${Math.round(median(pngBytes) / 1024)} KiB median), a 336-pixel tower; medians of ${rounds}`);
  console.log("| setting | request ms | longest event-loop stall ms |");
  console.log("|---|---|---|");
  for (const s of settings) console.log(`| ${s} | ${median(results.get(s)!.wall).toFixed(0)} | ${median(results.get(s)!.stall).toFixed(0)} |`);
} finally {
  await server.shutdown();
  rmSync(dir, { recursive: true, force: true });
}
exitProcess(0);
