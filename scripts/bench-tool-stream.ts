/**
 * How long the streamed tool-call parsers take over one long call: an agent writing a file through a
 * tool sends its content as one argument, and the server parses the answer delta by delta on its
 * event loop. Each format's answer holds one call whose `content` argument is N characters; it is fed
 * in deltas of 4 characters (about a token each), and the median of 5 runs is printed per format.
 *
 *   npx tsx scripts/bench-tool-stream.ts [N ...]    (default: 10000 100000)
 */
import type { ToolCallSyntax } from "../src/engine/grammar.ts";
import { type ChatOutputOptions, ChatOutputStream } from "../src/serve/chat-output.ts";

const WRITE = { name: "write_file", parameters: { type: "object", properties: { path: { type: "string" }, content: { type: "string" } }, required: ["path", "content"] } };

/** One call of write_file with `content` in `format`, as the model writes it. */
function answer(format: ToolCallSyntax, content: string): string {
  const args = JSON.stringify({ path: "a.ts", content });
  switch (format) {
    case "hermes": return `<tool_call>\n{"name": "write_file", "arguments": ${args}}\n</tool_call>`;
    case "llama3_json": return `{"name": "write_file", "parameters": ${args}}`;
    case "mistral": return `[TOOL_CALLS]write_file[ARGS]${args}`;
    case "mistral_pre_v11": return `[TOOL_CALLS] [{"name": "write_file", "arguments": ${args}}]`;
    case "kimi_k2": return `<|tool_calls_section_begin|><|tool_call_begin|>functions.write_file:0<|tool_call_argument_begin|>${args}<|tool_call_end|><|tool_calls_section_end|>`;
    case "qwen3_coder": return `<tool_call>\n<function=write_file>\n<parameter=path>\na.ts\n</parameter>\n<parameter=content>\n${content}\n</parameter>\n</function>\n</tool_call>`;
    case "minimax_m2": return `<minimax:tool_call>\n<invoke name="write_file">\n<parameter name="path">a.ts</parameter>\n<parameter name="content">${content}</parameter>\n</invoke>\n</minimax:tool_call>`;
    default: throw new RangeError(`No benchmark answer for ${format}`);
  }
}

/** Milliseconds to stream `text` through a chat output parser in 4-character deltas; checks the call came out. */
function run(format: ToolCallSyntax, text: string): number {
  const o: ChatOutputOptions = { reasoning: false, startsInReasoning: false, toolCalls: true, parallelToolCalls: true, toolCallFormat: format, tools: [WRITE] };
  const t0 = performance.now();
  const s = new ChatOutputStream(o);
  let calls = 0;
  for (let i = 0; i < text.length; i += 4) calls += s.push(text.slice(i, i + 4)).filter((p) => p.kind === "call").length;
  calls += s.end().filter((p) => p.kind === "call").length;
  const ms = performance.now() - t0;
  if (calls !== 1) throw new Error(`${format}: ${calls} calls parsed, expected 1`);
  return ms;
}

const sizes = process.argv.slice(2).map(Number);
const formats: ToolCallSyntax[] = ["hermes", "llama3_json", "mistral", "mistral_pre_v11", "kimi_k2", "qwen3_coder", "minimax_m2"];
// Source-like text: lines of code with quotes and braces, which JSON escapes.
const line = 'const x = { "a": [1, 2, 3] }; // it\'s {fine}\n';
console.log("| format | content chars | median ms (5 runs) |");
console.log("|---|---:|---:|");
for (const n of sizes.length > 0 ? sizes : [10_000, 100_000]) {
  const content = line.repeat(Math.ceil(n / line.length)).slice(0, n);
  for (const f of formats) {
    const text = answer(f, content);
    const times = Array.from({ length: 5 }, () => run(f, text)).sort((a, b) => a - b);
    console.log(`| ${f} | ${n} | ${times[2].toFixed(1)} |`);
  }
}
