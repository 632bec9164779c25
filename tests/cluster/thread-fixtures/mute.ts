/** A worker thread entry that listens but never answers (robustness-hunt6.test.ts): only a start timeout ends its wait. */
import { parentThreadPort } from "../../../src/runtime/threads.ts";

const port = await parentThreadPort();
port.onMessage(() => {});
