/** A worker thread entry whose module ends without listening or answering (robustness-hunt6.test.ts). */
export {};
