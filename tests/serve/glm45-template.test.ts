/**
 * GLM-4.5's own chat template (as zai-org's GLM-4.5 / 4.6 checkpoints ship it, MIT; copied from public
 * copies) through our template engine: the tool list, an assistant turn's reasoning and call, tool
 * responses and `chat_template_kwargs`' enable_thinking, and the call it writes read back by
 * `--tool-call-parser glm45`, so a GLM agent's history round-trips.
 */
import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { parseChatOutput } from "../../src/serve/chat-output.ts";
import { chatRenderer } from "../../src/serve/chat-template.ts";
import type { ChatMessageIn, ToolDef } from "../../src/serve/schemas.ts";

const GLM45_TEMPLATE = `[gMASK]<sop>
{%- if tools -%}
<|system|>
# Tools

You may call one or more functions to assist with the user query.

You are provided with function signatures within <tools></tools> XML tags:
<tools>
{% for tool in tools %}
{{ tool | tojson(ensure_ascii=False) }}
{% endfor %}
</tools>

For each function call, output the function name and arguments within the following XML format:
<tool_call>{function-name}
<arg_key>{arg-key-1}</arg_key>
<arg_value>{arg-value-1}</arg_value>
<arg_key>{arg-key-2}</arg_key>
<arg_value>{arg-value-2}</arg_value>
...
</tool_call>{%- endif -%}
{%- macro visible_text(content) -%}
    {%- if content is string -%}
        {{- content }}
    {%- elif content is iterable and content is not mapping -%}
        {%- for item in content -%}
            {%- if item is mapping and item.type == 'text' -%}
                {{- item.text }}
            {%- elif item is string -%}
                {{- item }}
            {%- endif -%}
        {%- endfor -%}
    {%- else -%}
        {{- content }}
    {%- endif -%}
{%- endmacro -%}
{%- set ns = namespace(last_user_index=-1) %}
{%- for m in messages %}
    {%- if m.role == 'user' %}
        {% set ns.last_user_index = loop.index0 -%}
    {%- endif %}
{%- endfor %}
{% for m in messages %}
{%- if m.role == 'user' -%}<|user|>
{{ visible_text(m.content) }}
{{- '/nothink' if (enable_thinking is defined and not enable_thinking and not visible_text(m.content).endswith("/nothink")) else '' -}}
{%- elif m.role == 'assistant' -%}
<|assistant|>
{%- set reasoning_content = '' %}
{%- set content = visible_text(m.content) %}
{%- if m.reasoning_content is string %}
    {%- set reasoning_content = m.reasoning_content %}
{%- else %}
    {%- if '</think>' in content %}
        {%- set reasoning_content = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}
        {%- set content = content.split('</think>')[-1].lstrip('\\n') %}
    {%- endif %}
{%- endif %}
{%- if loop.index0 > ns.last_user_index and reasoning_content -%}
{{ '\\n<think>' + reasoning_content.strip() +  '</think>'}}
{%- else -%}
{{ '\\n<think></think>' }}
{%- endif -%}
{%- if content.strip() -%}
{{ '\\n' + content.strip() }}
{%- endif -%}
{% if m.tool_calls %}
{% for tc in m.tool_calls %}
{%- if tc.function %}
    {%- set tc = tc.function %}
{%- endif %}
{{ '\\n<tool_call>' + tc.name }}
{% set _args = tc.arguments %}
{% for k, v in _args.items() %}
<arg_key>{{ k }}</arg_key>
<arg_value>{{ v | tojson(ensure_ascii=False) if v is not string else v }}</arg_value>
{% endfor %}
</tool_call>{% endfor %}
{% endif %}
{%- elif m.role == 'tool' -%}
{%- if m.content is string -%}
{%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
    {{- '<|observation|>' }}
{%- endif %}
{{- '\\n<tool_response>\\n' }}
{{- m.content }}
{{- '\\n</tool_response>' }}
{%- else -%}
<|observation|>{% for tr in m.content %}

<tool_response>
{{ tr.output if tr.output is defined else tr }}
</tool_response>{% endfor -%}
{% endif -%}
{%- elif m.role == 'system' -%}
<|system|>
{{ visible_text(m.content) }}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
    <|assistant|>{{- '\\n<think></think>' if (enable_thinking is defined and not enable_thinking) else '' -}}
{%- endif -%}
`;

const TOOLS = [{
  type: "function",
  function: { name: "get_weather", description: "Weather", parameters: { type: "object", properties: { city: { type: "string" }, days: { type: "integer" } } } },
}] as ToolDef[];
const ARGS = { city: "東京", days: 2 };
const HISTORY = [
  { role: "system", content: "Be brief." },
  { role: "user", content: "Weather in Tokyo?" },
  {
    role: "assistant",
    content: "",
    reasoning_content: "Need the tool.",
    tool_calls: [{ id: "c1", type: "function", function: { name: "get_weather", arguments: JSON.stringify(ARGS) } }],
  },
  { role: "tool", tool_call_id: "c1", content: "sunny" },
] as ChatMessageIn[];

test("chatRenderer() renders GLM-4.5's template: tools, the call in GLM's XML form, the tool response, the generation prompt", () => {
  const { text } = chatRenderer(GLM45_TEMPLATE, {}).render(HISTORY, TOOLS);
  assert.ok(text.startsWith("[gMASK]<sop><|system|>\n# Tools"), text.slice(0, 40));
  assert.ok(text.includes(`<tools>\n${JSON.stringify(TOOLS[0]).replaceAll(",", ", ").replaceAll(":", ": ")}\n</tools>`), "tools as tojson writes them");
  assert.ok(text.includes("<|user|>\nWeather in Tokyo?<|assistant|>\n<think>Need the tool.</think>\n<tool_call>get_weather"), text);
  assert.ok(text.endsWith("</tool_call><|observation|>\n<tool_response>\nsunny\n</tool_response><|assistant|>"), text.slice(-120));
  // The call as the template wrote it is what the glm45 parser reads: the next turn sees its own call.
  const call = /<tool_call>get_weather[\s\S]*?<\/tool_call>/.exec(text)![0];
  const parsed = parseChatOutput(call, {
    reasoning: false, startsInReasoning: false, toolCalls: true, parallelToolCalls: true, toolCallFormat: "glm45",
    tools: [{ name: "get_weather", parameters: TOOLS[0].function.parameters }],
  });
  assert.equal(parsed.content, null);
  assert.deepEqual(parsed.calls.map((c) => [c.name, JSON.parse(c.arguments)]), [["get_weather", ARGS]]);
});

test("chatRenderer() passes enable_thinking to GLM-4.5's template: /nothink on the user turn and a closed think block", () => {
  const r = chatRenderer(GLM45_TEMPLATE, {});
  const ask = [{ role: "user", content: "Hi" }] as ChatMessageIn[];
  assert.equal(r.render(ask).text, "[gMASK]<sop><|user|>\nHi<|assistant|>");
  assert.equal(r.render(ask, undefined, { enable_thinking: false }).text, "[gMASK]<sop><|user|>\nHi/nothink<|assistant|>\n<think></think>");
  // Reasoning of turns before the last user message is dropped, as GLM-4.5 was trained.
  const later = r.render([...HISTORY, { role: "assistant", content: "Sunny." }, { role: "user", content: "Thanks" }] as ChatMessageIn[]).text;
  assert.ok(!later.includes("Need the tool."), later);
  assert.ok(later.includes("<|assistant|>\n<think></think>\n<tool_call>get_weather"), later);
});
