/** A worker thread entry that calls process.exit(0) once asked to load a model (robustness-hunt6.test.ts). */
import process from "node:process";
import { parentThreadPort } from "../../../src/runtime/threads.ts";

const port = await parentThreadPort();
port.onMessage(() => setTimeout(() => process.exit(0), 50));
