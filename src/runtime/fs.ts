/** File access shared by Deno and Node: node:fs works on both runtimes. */
import { promises as fsp } from "node:fs";
import type { FileHandle } from "node:fs/promises";

/** A file opened for random-access reads (GGUF and safetensors are read by range, not whole). */
export interface RandomAccessFile {
  readonly path: string;
  readonly size: number;
  /** Reads exactly `length` bytes at `offset`; fails if the file is shorter. */
  read(offset: number, length: number): Promise<Uint8Array>;
  close(): Promise<void>;
}

/** Opens a file for ranged reads. */
export async function openRandomAccess(path: string): Promise<RandomAccessFile> {
  const handle: FileHandle = await fsp.open(path, "r");
  const { size } = await handle.stat();
  return {
    path,
    size,
    async read(offset: number, length: number): Promise<Uint8Array> {
      // Node takes a negative, fractional or unsafe position as "the current one" and reads from
      // there; Deno refuses some of them. Both refuse all of them here, before any read.
      if (!Number.isSafeInteger(offset) || !Number.isSafeInteger(length) || offset < 0 || length < 0 || !Number.isSafeInteger(offset + length)) {
        throw new RangeError(`Cannot read ${length} bytes at byte ${offset} of "${path}": the position and length must be whole numbers from 0 to 2^53 - 1`);
      }
      const out = new Uint8Array(length);
      let done = 0;
      while (done < length) {
        const { bytesRead } = await handle.read(out, done, length - done, offset + done);
        if (bytesRead === 0) {
          throw new RangeError(`Read past the end of "${path}" at byte ${offset + done} (size ${size})`);
        }
        done += bytesRead;
      }
      return out;
    },
    close: () => handle.close(),
  };
}

/** True when a path exists. */
export async function pathExists(path: string): Promise<boolean> {
  try {
    await fsp.stat(path);
    return true;
  } catch {
    return false;
  }
}

export const readFile = (path: string): Promise<Uint8Array> => fsp.readFile(path);
export const readTextFile = (path: string): Promise<string> => fsp.readFile(path, "utf8");
export const writeFile = (path: string, data: Uint8Array | string): Promise<void> => fsp.writeFile(path, data);
