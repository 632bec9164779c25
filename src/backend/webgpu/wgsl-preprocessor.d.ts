/** Types for the `wgsl-preprocessor` npm package (it ships none, and no "main": import its file by path). */
declare module "wgsl-preprocessor/wgsl-preprocessor.js" {
  /** Template-literal tag: resolves `#if ${cond}` / `#elif` / `#else` / `#endif` and interpolates values. */
  export function wgsl(strings: readonly string[], ...values: unknown[]): string;
}
