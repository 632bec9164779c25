/**
 * The two generation endpoints, request side: request bodies → engine requests (one per choice
 * with `n`). The responses are built in respond.ts.
 */
// Split by concern: serve-context.ts (the shared types), generation-request.ts (checks and engine
// requests), prompt-length.ts, chat-submit.ts and completion-submit.ts. Importers keep this path.
export type { AppliedTier, CompletionShape, EchoedPrompt, Kind, ServeContext, Submitted } from "./serve-context.ts";
export { appliedTier } from "./serve-context.ts";
export { checkPriority, MAX_CHOICES, submit } from "./generation-request.ts";
export { checkTextLength, truncatedPrompt } from "./prompt-length.ts";
export { chatPrompt, submitChat } from "./chat-submit.ts";
export { COMPLETION_DEFAULT_MAX_TOKENS, MAX_COMPLETION_GENERATIONS, submitCompletion } from "./completion-submit.ts";
