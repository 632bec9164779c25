/** A worker thread entry that closes itself at start, without an error (robustness-hunt6.test.ts). */
import { parentThreadPort } from "../../../src/runtime/threads.ts";

const port = await parentThreadPort();
port.onMessage(() => {});
await port.close();
