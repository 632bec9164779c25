/**
 * Entry of the thread that prepares images (image-prep.ts): each data URL decoded, resized,
 * normalized and keyed here, its pixels moved back to the server's thread.
 */
import { preprocessImage } from "../model/vision/image-preprocess.ts";
import { imageKey } from "../model/vision/image-tokens.ts";
import { parentThreadPort } from "../runtime/threads.ts";
import type { PrepReply, PrepRequest } from "./image-prep.ts";
import { imageFromUrl } from "./prompt-images.ts";

const port = await parentThreadPort();
port.onMessage((m) => {
  const { id, url, spec } = m as PrepRequest;
  let reply: PrepReply;
  try {
    const pixels = preprocessImage(imageFromUrl(url, "image"), spec);
    reply = { id, pixels, key: imageKey(pixels) };
  } catch (e) {
    reply = { id, error: e instanceof Error ? e.message : String(e) };
  }
  port.post(reply, "pixels" in reply ? [reply.pixels.buffer as ArrayBuffer] : []);
});
