/**
 * The scripted agent model bench-agent-kv serves: tests/model/scripted-model.ts's one-hot bigram
 * GGUF (one layer, greedy output follows the last token), with a verbatim chat template and
 * literal pieces, so turn N+1's prompt starts with turn N's prompt and answer token for token, as
 * a real agent's does. The answer is picked by the last character of the last message (the
 * template ends the prompt with it): "!" → a few words, then a Hermes call to the fast tool;
 * "?" → the same for the slow tool; "." → a final answer with no call.
 */
import type OpenAI from "openai";
import { loadModel } from "../../src/model/load.ts";
import type { LoadedModel } from "../../src/model/config.ts";
import { type ScriptedModelSpec, writeScriptedModel } from "../../tests/model/scripted-model.ts";

/** The fast tool (results in about a second) and the slow one (tens of seconds). */
export const FAST_TOOL = "read_file";
/** See {@link FAST_TOOL}. */
export const SLOW_TOOL = "run_tests";

/** Last characters of a message that pick the model's answer. */
export const ENDING = { fast: "!", slow: "?", final: "." } as const;

/** A whole call as one token, written exactly as the template renders it back. */
const call = (name: string, args: string) => `<tool_call>\n{"name": "${name}", "arguments": ${args}}\n</tool_call>`;
const FAST_CALL = call(FAST_TOOL, '{"path": "src/main.ts"}');
const SLOW_CALL = call(SLOW_TOOL, '{"suite": "unit"}');
/** Answer words: each piece is one token, all distinct; capitals keep them out of the (lowercase) filler. */
const FAST_WORDS = ["Reading", " File", " src/main.ts", " First", " To", " See", " Its", " Code:"];
const SLOW_WORDS = ["Running", " Unit", " Tests", " Then", " So", " We", " Know", " More:"];
const FINAL_WORDS = ["Done:", " The", " Fix", " Is", " In", " Place", " Now", " (1)"];

/** Role lines; an assistant turn is rendered right after the generation prompt it answered, as written. */
const TEMPLATE = "{% if tools %}tools:{% for t in tools %} {{ t.function.name }}{% endfor %}\n{% endif %}" +
  "{% for m in messages %}{% if m.role == 'assistant' %}assistant{{ messages[loop.index0 - 1].content[-1:] }}{{ m.content or '' }}" +
  '{% for c in m.tool_calls or [] %}<tool_call>\n{"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments | tojson }}}\n</tool_call>{% endfor %}\n' +
  "{% else %}{{ m.role }}: {{ m.content }}\n{% endif %}{% endfor %}" +
  "{% if add_generation_prompt %}assistant{{ messages[-1].content[-1:] }}{% endif %}";

const chain = (...pieces: string[]): [string, string][] => pieces.slice(1).map((to, i) => [pieces[i], to]);

/** The bench's model spec: answers of 9 tokens (8 words + a call, or 8 words + EOS). */
export const AGENT_MODEL: ScriptedModelSpec = {
  pieces: [FAST_CALL, SLOW_CALL, ...FAST_WORDS, ...SLOW_WORDS, ...FINAL_WORDS],
  literalPieces: true,
  next: [
    ...chain(ENDING.fast, ...FAST_WORDS, FAST_CALL, "<eos>"),
    ...chain(ENDING.slow, ...SLOW_WORDS, SLOW_CALL, "<eos>"),
    ...chain(ENDING.final, ...FINAL_WORDS, "<eos>"),
  ],
  chatTemplate: TEMPLATE,
  contextLength: 8192,
};

/** The two tools, as sent in every request. */
export const AGENT_TOOLS: OpenAI.ChatCompletionTool[] = [FAST_TOOL, SLOW_TOOL].map((name) => ({
  type: "function" as const,
  function: { name, parameters: { type: "object", properties: {} } },
}));

/** Writes the model to `path` and loads it. */
export async function agentModel(path: string): Promise<LoadedModel> {
  await writeScriptedModel(path, AGENT_MODEL);
  return loadModel(path);
}
