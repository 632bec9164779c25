/**
 * The knobs of the online planner (online-planner.ts) and their defaults, kept apart from the planner's
 * logic: every option is documented where it is declared.
 */
import type { ItlAdmissionOptions } from "./itl-admission.ts";
import type { SessionAdmissionOptions } from "./session-admission.ts";

/** Knobs of {@link OnlinePlanner}. */
export interface OnlinePlannerOptions {
  intervalS?: number;
  ttftTargetS?: number;
  itlTargetS?: number;
  /** Relative improvement a new split must bring (hysteresis). */
  margin?: number;
  /** Consecutive ticks a move must be wanted before it happens (unless urgent). */
  confirmTicks?: number;
  /** Seconds a worker must stay in a role after flipping. */
  cooldownS?: number;
  /** Most workers flipped in one tick, as a fraction of the fleet. */
  maxFlipFraction?: number;
  /** Cost charged per flipped worker (in SLO-pressure units): the drain and the transient it causes. */
  flipCost?: number;
  /** Bounds of the adaptive local-prefill threshold (uncached tokens). */
  minLocalPrefill?: number;
  maxLocalPrefill?: number;
  initialLocalPrefill?: number;
  /** Most sequences a worker decodes at once (engine setting): splits that need more are infeasible. */
  maxDecodeBatch?: number;
  /** Prefill tokens a mixed worker's step carries at most (chunked-prefill budget shared with decodes). */
  mixedChunkTokens?: number;
  /** Consider mixed workers at all (false: prefill/decode splits only). */
  allowMixed?: boolean;
  /**
   * Price every step from a roofline step model fitted online to the workers' measured steps
   * (planner/step-model.ts) instead of per-role rates: context-aware decode, and the measured extra
   * cost of mixed steps that a prefill or decode worker would not pay. Default true; until the model
   * has a fit (it needs decode-only and prefill-carrying steps with their shapes), and with false,
   * steps are priced from per-role rates and a decode step of a + B·batch.
   */
  stepModel?: boolean;
  /** Prefill tokens a prefill worker's step carries at most. */
  prefillChunkTokens?: number;
  /**
   * Let workers run prefill chunks and decodes as separate steps when the step model prices mixed
   * steps dearer (action "step-mixing"; default true; needs `stepModel`). With false, splits are
   * priced with the step mixing workers run ({@link initialSplitSteps}), which then never changes.
   */
  adaptStepMixing?: boolean;
  /**
   * Workers start with prefill chunks and decodes in separate steps (default false: mixed steps).
   * The planner must know: it prices every split with the mixing workers run, and switches from it.
   */
  initialSplitSteps?: boolean;
  /**
   * Hold new sessions at the front door while turns wait for KV memory on many workers (action
   * "admission"; planner/session-admission.ts, with its options when given). Default false.
   */
  sessionAdmission?: boolean | SessionAdmissionOptions;
  /**
   * Let in only as many new sessions each tick as the decode pool takes within the ITL target; the
   * others wait at the door until the next tick and are turned away if there is still no room (action
   * "admission"; planner/itl-admission.ts, with its options when given; needs `stepModel`). Default false.
   */
  itlAdmission?: boolean | ItlAdmissionOptions;
}

/** What {@link OnlinePlannerOptions} left out means. */
export const ONLINE_PLANNER_DEFAULTS: Readonly<Required<OnlinePlannerOptions>> = {
  intervalS: 1, ttftTargetS: 0.5, itlTargetS: 0.05, margin: 0.1, confirmTicks: 2, cooldownS: 15,
  maxFlipFraction: 0.0625, flipCost: 0.03, minLocalPrefill: 256, maxLocalPrefill: 2048,
  initialLocalPrefill: 512, maxDecodeBatch: 512, mixedChunkTokens: 8192, allowMixed: true, stepModel: true,
  prefillChunkTokens: 16384, adaptStepMixing: true, initialSplitSteps: false, sessionAdmission: false, itlAdmission: false,
};
