/**
 * GGUF format constants and value types shared by the reader and the writer
 * (https://github.com/ggml-org/ggml/blob/master/docs/gguf.md).
 */
import type { WeightDType } from "../backend/types.ts";

/** "GGUF" read as a little-endian u32. */
export const GGUF_MAGIC = 0x46554747;
/** Alignment of tensor data when `general.alignment` is absent. */
export const GGUF_DEFAULT_ALIGNMENT = 32;

/** Metadata value types, numbered as in the file. */
export enum GgufType {
  UINT8 = 0,
  INT8 = 1,
  UINT16 = 2,
  INT16 = 3,
  UINT32 = 4,
  INT32 = 5,
  FLOAT32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  UINT64 = 10,
  INT64 = 11,
  FLOAT64 = 12,
}

/** A scalar metadata value; 64-bit integers beyond 2^53 stay bigint. */
export type GgufScalar = number | bigint | boolean | string;
/** A metadata value: a scalar or an (possibly nested) array of them. */
export type GgufValue = GgufScalar | GgufValue[];

/** One metadata entry with its on-disk type (arrays also carry their element type). */
export interface GgufEntry {
  type: GgufType;
  /** Element type, for arrays only. */
  itemType?: GgufType;
  value: GgufValue;
}

/** Block geometry of a ggml tensor type: `blockSize` elements take `blockBytes` bytes. */
export interface GgmlTypeInfo {
  name: string;
  blockSize: number;
  blockBytes: number;
  /** Our weight dtype when the type is supported, else undefined. */
  dtype?: WeightDType;
}

/** ggml tensor types by id (ggml.h `enum ggml_type`); sizes let us validate files we cannot load. */
export const GGML_TYPES: ReadonlyMap<number, GgmlTypeInfo> = new Map<number, GgmlTypeInfo>([
  [0, { name: "F32", blockSize: 1, blockBytes: 4, dtype: "f32" }],
  [1, { name: "F16", blockSize: 1, blockBytes: 2, dtype: "f16" }],
  [2, { name: "Q4_0", blockSize: 32, blockBytes: 18, dtype: "q4_0" }],
  [3, { name: "Q4_1", blockSize: 32, blockBytes: 20, dtype: "q4_1" }],
  [6, { name: "Q5_0", blockSize: 32, blockBytes: 22, dtype: "q5_0" }],
  [7, { name: "Q5_1", blockSize: 32, blockBytes: 24, dtype: "q5_1" }],
  [8, { name: "Q8_0", blockSize: 32, blockBytes: 34, dtype: "q8_0" }],
  [9, { name: "Q8_1", blockSize: 32, blockBytes: 36 }],
  [10, { name: "Q2_K", blockSize: 256, blockBytes: 84, dtype: "q2_k" }],
  [11, { name: "Q3_K", blockSize: 256, blockBytes: 110, dtype: "q3_k" }],
  [12, { name: "Q4_K", blockSize: 256, blockBytes: 144, dtype: "q4_k" }],
  [13, { name: "Q5_K", blockSize: 256, blockBytes: 176, dtype: "q5_k" }],
  [14, { name: "Q6_K", blockSize: 256, blockBytes: 210, dtype: "q6_k" }],
  [15, { name: "Q8_K", blockSize: 256, blockBytes: 292 }],
  [16, { name: "IQ2_XXS", blockSize: 256, blockBytes: 66, dtype: "iq2_xxs" }],
  [17, { name: "IQ2_XS", blockSize: 256, blockBytes: 74, dtype: "iq2_xs" }],
  [18, { name: "IQ3_XXS", blockSize: 256, blockBytes: 98, dtype: "iq3_xxs" }],
  [19, { name: "IQ1_S", blockSize: 256, blockBytes: 50, dtype: "iq1_s" }],
  [20, { name: "IQ4_NL", blockSize: 32, blockBytes: 18, dtype: "iq4_nl" }],
  [21, { name: "IQ3_S", blockSize: 256, blockBytes: 110, dtype: "iq3_s" }],
  [22, { name: "IQ2_S", blockSize: 256, blockBytes: 82, dtype: "iq2_s" }],
  [23, { name: "IQ4_XS", blockSize: 256, blockBytes: 136, dtype: "iq4_xs" }],
  [24, { name: "I8", blockSize: 1, blockBytes: 1 }],
  [25, { name: "I16", blockSize: 1, blockBytes: 2 }],
  [26, { name: "I32", blockSize: 1, blockBytes: 4 }],
  [27, { name: "I64", blockSize: 1, blockBytes: 8 }],
  [28, { name: "F64", blockSize: 1, blockBytes: 8 }],
  [29, { name: "IQ1_M", blockSize: 256, blockBytes: 56, dtype: "iq1_m" }],
  [30, { name: "BF16", blockSize: 1, blockBytes: 2, dtype: "bf16" }],
  [34, { name: "TQ1_0", blockSize: 256, blockBytes: 54 }],
  [35, { name: "TQ2_0", blockSize: 256, blockBytes: 66 }],
  [39, { name: "MXFP4", blockSize: 32, blockBytes: 17, dtype: "mxfp4" }],
]);

/** The ggml type id that stores one of our weight dtypes. */
export function ggmlTypeOf(dtype: WeightDType): number {
  for (const [id, info] of GGML_TYPES) if (info.dtype === dtype) return id;
  throw new RangeError(`No ggml type stores dtype "${dtype}"`);
}

/** Rounds `offset` up to a multiple of `alignment`. */
export function alignUp(offset: number, alignment: number): number {
  return Math.ceil(offset / alignment) * alignment;
}
