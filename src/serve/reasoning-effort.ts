/**
 * Reasoning effort, the one mapping for all three APIs: chat's `reasoning_effort`, the Responses
 * API's `reasoning.effort` and the Messages API's `output_config.effort` are taken as OpenAI (and
 * vLLM) take them, and reach the chat template as the levels templates know.
 */

/** OpenAI's values of `reasoning_effort` / `reasoning.effort` (vLLM's `ReasoningEffortValue` too), least to most. */
export const REASONING_EFFORTS = ["none", "minimal", "low", "medium", "high", "xhigh", "max"] as const;

/** One of {@link REASONING_EFFORTS}. */
export type ReasoningEffort = typeof REASONING_EFFORTS[number];

/** Anthropic's values of `output_config.effort`, each also one of OpenAI's. */
export const ANTHROPIC_EFFORTS = ["low", "medium", "high", "xhigh", "max"] as const satisfies readonly ReasoningEffort[];

/**
 * The levels a template that reads `reasoning_effort` knows: gpt-oss's ("Reasoning: low|medium|high",
 * harmony's `ReasoningEffort`). A template that knows more gets any value through
 * `chat_template_kwargs.reasoning_effort`, which is passed as written.
 */
export const TEMPLATE_EFFORTS = ["low", "medium", "high"] as const;

/** One of {@link TEMPLATE_EFFORTS}. */
export type TemplateEffort = typeof TEMPLATE_EFFORTS[number];

/**
 * The template level nearest an effort: "none" and "minimal" are the least a template knows (low),
 * "xhigh" and "max" the most (high); the rest are themselves.
 */
export function templateEffort(effort: ReasoningEffort): TemplateEffort {
  if (effort === "none" || effort === "minimal") return "low";
  if (effort === "xhigh" || effort === "max") return "high";
  return effort;
}

/**
 * The chat template's variables for a request's effort and `chat_template_kwargs`: `reasoning_effort`
 * as {@link templateEffort}, and `enable_thinking` (Qwen3's, GLM's, Gemma's switch) false for "none",
 * true for any other, as vLLM sets both; the request's own kwargs say last. Undefined when neither is given.
 */
export function effortVariables(effort: ReasoningEffort | null | undefined, kwargs: Readonly<Record<string, unknown>> | null | undefined): Record<string, unknown> | undefined {
  if (effort === null || effort === undefined) return kwargs ?? undefined;
  return { reasoning_effort: templateEffort(effort), enable_thinking: effort !== "none", ...kwargs };
}

/**
 * A Messages request's `output_config.effort` as the chat request's `reasoning_effort`: Anthropic's
 * levels as the template levels ({@link templateEffort}: "xhigh" and "max" are high); a level this
 * server does not know (Anthropic adds them) is no effort rather than a 400, so that Claude Code is answered.
 */
export function anthropicEffort(asked: string | null | undefined): TemplateEffort | undefined {
  return (ANTHROPIC_EFFORTS as readonly (string | null | undefined)[]).includes(asked) ? templateEffort(asked as ReasoningEffort) : undefined;
}
