/**
 * One call to a `set_unit` tool written in each tool-call syntax that can write calls amid text, for
 * the grammar tests of those syntaxes (tests/engine/structural-tag.test.ts, tests/serve/api-gaps-hunt6.test.ts).
 */

/** set_unit's parameters: one required unit, "c" or "f". */
export const UNIT = { type: "object", properties: { unit: { type: "string", enum: ["c", "f"] } }, required: ["unit"], additionalProperties: false };

const D = { begin: "<｜tool▁calls▁begin｜>", call: "<｜tool▁call▁begin｜>", sep: "<｜tool▁sep｜>", callEnd: "<｜tool▁call▁end｜>", end: "<｜tool▁calls▁end｜>" };

/** The call `set_unit({"unit": "c"})`, as a whole run of calls, by syntax. */
export const SET_UNIT_CALLS: Readonly<Record<string, string>> = {
  hermes: '<tool_call>\n{"name": "set_unit", "arguments": {"unit": "c"}}\n</tool_call>',
  llama3_json: '{"name": "set_unit", "parameters": {"unit": "c"}}',
  kimi_k2: '<|tool_calls_section_begin|><|tool_call_begin|>functions.set_unit:0<|tool_call_argument_begin|>{"unit": "c"}<|tool_call_end|><|tool_calls_section_end|>',
  deepseek_v31: `${D.begin}${D.call}set_unit${D.sep}{"unit": "c"}${D.callEnd}${D.end}`,
  deepseek_v3: `${D.begin}${D.call}function${D.sep}set_unit\n\`\`\`json\n{"unit": "c"}\n\`\`\`${D.callEnd}${D.end}`,
  glm45: "<tool_call>set_unit\n<arg_key>unit</arg_key>\n<arg_value>c</arg_value>\n</tool_call>",
  qwen3_coder: "<tool_call>\n<function=set_unit>\n<parameter=unit>\nc\n</parameter>\n</function>\n</tool_call>",
  minimax_m2: '<minimax:tool_call>\n<invoke name="set_unit">\n<parameter name="unit">c</parameter>\n</invoke>\n</minimax:tool_call>',
  mistral: '[TOOL_CALLS]set_unit[ARGS]{"unit": "c"}',
  mistral_pre_v11: '[TOOL_CALLS][{"name": "set_unit", "arguments": {"unit": "c"}}]',
};
