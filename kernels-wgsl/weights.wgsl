// Weight element access, prepended to every kernel that reads a weight (matmul, embedding).
// Storage layouts (see src/backend/webgpu/weight-layout.ts):
//   f32   array<f32>
//   f16   array<f16> when the device has shader-f16, else two halves per u32 word
//   bf16  two bf16 per u32 word (low half = even element)
//   q8_0  repacked at upload into 9-word blocks: [scale as f32 bits, 8 words of 4 int8 each]
#if ${W_F16N}
enable f16;
#endif

#if ${W_F32}
@group(0) @binding(1) var<storage, read> wbuf: array<f32>;
fn w_at(i: u32) -> f32 { return wbuf[i]; }
fn w_at4(i: u32) -> vec4<f32> { return vec4<f32>(wbuf[i], wbuf[i + 1u], wbuf[i + 2u], wbuf[i + 3u]); }
#elif ${W_F16N}
@group(0) @binding(1) var<storage, read> wbuf: array<f16>;
fn w_at(i: u32) -> f32 { return f32(wbuf[i]); }
fn w_at4(i: u32) -> vec4<f32> {
  return vec4<f32>(vec4<f16>(wbuf[i], wbuf[i + 1u], wbuf[i + 2u], wbuf[i + 3u]));
}
#elif ${W_F16}
@group(0) @binding(1) var<storage, read> wbuf: array<u32>;
fn w_at(i: u32) -> f32 { return unpack2x16float(wbuf[i >> 1u])[i & 1u]; }
// i is a multiple of 4, so the four halves sit in two whole words.
fn w_at4(i: u32) -> vec4<f32> {
  let w = i >> 1u;
  return vec4<f32>(unpack2x16float(wbuf[w]), unpack2x16float(wbuf[w + 1u]));
}
#elif ${W_BF16}
@group(0) @binding(1) var<storage, read> wbuf: array<u32>;
fn bf_lo(w: u32) -> f32 { return bitcast<f32>(w << 16u); }
fn bf_hi(w: u32) -> f32 { return bitcast<f32>(w & 0xffff0000u); }
fn w_at(i: u32) -> f32 {
  let w = wbuf[i >> 1u];
  return select(bf_lo(w), bf_hi(w), (i & 1u) == 1u);
}
fn w_at4(i: u32) -> vec4<f32> {
  let a = wbuf[i >> 1u];
  let b = wbuf[(i >> 1u) + 1u];
  return vec4<f32>(bf_lo(a), bf_hi(a), bf_lo(b), bf_hi(b));
}
#elif ${W_Q8}
@group(0) @binding(1) var<storage, read> wbuf: array<u32>;
fn w_at(i: u32) -> f32 {
  let blk = i >> 5u;
  let j = i & 31u;
  let word = bitcast<i32>(wbuf[blk * 9u + 1u + (j >> 2u)]);
  return f32(extractBits(word, (j & 3u) * 8u, 8u)) * bitcast<f32>(wbuf[blk * 9u]);
}
// i is a multiple of 4, so the four int8 share one word.
fn w_at4(i: u32) -> vec4<f32> {
  let blk = i >> 5u;
  let word = bitcast<i32>(wbuf[blk * 9u + 1u + ((i & 31u) >> 2u)]);
  let q = vec4<i32>(extractBits(word, 0u, 8u), extractBits(word, 8u, 8u), extractBits(word, 16u, 8u), extractBits(word, 24u, 8u));
  return vec4<f32>(q) * bitcast<f32>(wbuf[blk * 9u]);
}
#endif
