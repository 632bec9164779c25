/**
 * `--tool-call-parser auto` (tool-call-detect.ts): each format told from the markers real chat
 * templates carry (the fragments below are the lines of those templates that write or announce calls),
 * gpt-oss by its architecture, Hermes where nothing tells; and the choices the flag takes.
 */
import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { detectToolCallFormat, toolCallChoice } from "../../src/serve/tool-call-detect.ts";

const TEMPLATES: [string, string, string][] = [
  ["Qwen2.5 (Hermes)", "For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>", "hermes"],
  ["Llama 3.1", "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}{{- '{\"name\": \"' + tool_call.name + '\", ' }}{{- '\"parameters\": ' }}{{- tool_call.arguments | tojson }}", "llama3_json"],
  ["Llama 3.2 (python_tag)", "{%- if builtin_tools is defined %}{{- \"<|python_tag|>\" + tool_call.name }}", "llama3_json"],
  ["Mistral", "{{- \"[TOOL_CALLS]\" + tool_call.function.name + \"[ARGS]\" + tool_call.function.arguments }}", "mistral"],
  ["Kimi K2", "{{'<|tool_calls_section_begin|>'}}{%- for tool_call in message['tool_calls'] -%}<|tool_call_begin|>{{tool_call['id']}}", "kimi_k2"],
  ["DeepSeek V3", "{{'<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + tool['function']['name'] + '\\n' + '```json' + '\\n' + tool['function']['arguments'] + '\\n' + '```' + '<｜tool▁call▁end｜>'}}", "deepseek_v3"],
  ["DeepSeek V3.1", "{{'<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>'+ tool['function']['name'] + '<｜tool▁sep｜>' + tool['function']['arguments'] + '<｜tool▁call▁end｜>'}}", "deepseek_v31"],
  ["GLM-4.5", "<tool_call>{{ tc.name }}\n{% for k, v in tc.arguments.items() %}<arg_key>{{ k }}</arg_key>\n<arg_value>{{ v }}</arg_value>\n{% endfor %}</tool_call>", "glm45"],
  ["Qwen3-Coder", "{{- '<tool_call>\\n<function=' + tool_call.name + '>\\n' }}{{- '<parameter=' + args_name + '>\\n' }}", "qwen3_coder"],
  ["MiniMax M2", "{{- '<minimax:tool_call>' + '\\n' }}<invoke name=\"{{ tool_call.name }}\">", "minimax_m2"],
  // Seed-OSS writes Qwen3-Coder's function and parameter tags, inside its own.
  ["Seed-OSS", "{{- '<seed:tool_call>\\n<function=' + tool_call.name + '>\\n' }}{{- '<parameter=' + k + '>' }}", "seed_oss"],
  ["Granite 3.x", "{%- if message['role'] == 'assistant_tool_call' %}{{- '<|start_of_role|>assistant<|end_of_role|><|tool_call|>' + message['content'] }}", "granite"],
  ["Nemotron Nano 2", "{%- if tools %}<AVAILABLE_TOOLS>{{ tools | tojson }}</AVAILABLE_TOOLS>{%- endif %}{%- for m in messages %}{%- if m.tool_calls %}<TOOLCALL>{{ m.tool_calls | tojson }}</TOOLCALL>{%- endif %}{%- endfor %}", "nemotron_json"],
  ["Phi-4-mini", "{% if message['role'] == 'system' and 'tools' in message and message['tools'] is not none %}{{ '<|' + message['role'] + '|>' + message['content'] + '<|tool|>' + message['tools'] + '<|/tool|>' + '<|end|>' }}", "phi4_mini_json"],
  ["gpt-oss (harmony) by its template", "{{- \"<|start|>assistant<|channel|>analysis<|message|>\" }}", "harmony"],
  ["stories-style, no tools", "{% for m in messages %}{{ m.content }}{% endfor %}", "hermes"],
];

test("detectToolCallFormat() tells each format from its chat template's markers, Hermes where none tells", () => {
  for (const [name, template, format] of TEMPLATES) assert.equal(detectToolCallFormat(template, "llama"), format, name);
  assert.equal(detectToolCallFormat(undefined, "qwen3"), "hermes", "no template: Hermes");
  assert.equal(detectToolCallFormat(undefined, "gpt-oss"), "harmony", "gpt-oss by its architecture, whatever its template");
});

test("toolCallChoice() takes auto, every format and vLLM's aliases, and nothing else", () => {
  assert.equal(toolCallChoice("auto"), "auto");
  assert.equal(toolCallChoice("granite"), "granite");
  assert.equal(toolCallChoice("openai"), "harmony");
  assert.equal(toolCallChoice("pythonic"), undefined);
});
