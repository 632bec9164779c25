/** Public surface of the pure planner layer. */
export * from "./types.ts";
export * from "./profile.ts";
export * from "./sla-profile-planner.ts";
export * from "./load-planner.ts";
export * from "./online-planner.ts";
export * from "./routers.ts";
export * from "./prefill-order.ts";
export * from "./step-model.ts";
export * from "./step-pricing.ts";
export * from "./session-admission.ts";
export * from "./itl-admission.ts";
export * from "./goodput-curve.ts";
export * from "./step-window.ts";
export * from "./snapshot-guard.ts";
