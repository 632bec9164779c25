/**
 * A scripted model that loops: it answers a message ending in "~" with " a b a b …" until its token
 * budget runs out, and one ending in "." with "Done.". Its template writes "ROLE: CONTENT" lines,
 * then "assistant" and the last message's last character as the generation prompt.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import { loadModel } from "../../src/model/load.ts";
import { writeScriptedModel } from "../model/scripted-model.ts";

const dir = mkdtempSync(`${tmpdir()}/looper-model-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
/** Where the model file is written (a temp dir removed on exit). */
export const modelPath = `${dir}/looper.gguf`;
await writeScriptedModel(modelPath, {
  pieces: [" a", " b", "Done."],
  literalPieces: true,
  next: [["~", " a"], [" a", " b"], [" b", " a"], [".", "Done."], ["Done.", "<eos>"]],
  chatTemplate: "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}{% if add_generation_prompt %}assistant{{ messages[-1].content[-1:] }}{% endif %}",
  contextLength: 8192,
});
/** The loaded model, shared by the servers of a test file. */
export const model = await loadModel(modelPath);
