// Weight element access, prepended to every kernel that reads a weight (matmul, embedding).
// Storage layouts (see src/backend/webgpu/weight-layout.ts):
//   f32   array<f32>
//   f16   array<f16> when the device has shader-f16, else two halves per u32 word
//   bf16  two bf16 per u32 word (low half = even element)
//   q8_0  repacked at upload into 9-word blocks: [scale as f32 bits, 8 words of 4 int8 each]
//   q4_0, q4_1, q5_0, q5_1, q2_k, q3_k, q4_k, q5_k  llama.cpp's blocks, word-aligned (q4_0 and q5_0
//         repacked, q3_k padded from 110 to 112 bytes = 28 words: hmask, qs, scales, then d in the
//         low half of word 27; see weight-layout.ts); values decoded as llama.cpp's dequantize_row_* does.
//   q6_k  unpacked at upload into 69-word blocks of 256 values: [d as f32 bits, 16 int8 scales, 256 int8 codes].
//   mxfp4 repacked at upload into 5-word blocks of 32 values: [4 words of FP4 codes, the E8M0 scale byte].
//   f8_e4m3 9-word blocks of 32 values as loaded: [the scale as f32 bits, 8 words of 4 E4M3 codes each].
//   iq2_xxs, iq2_xs, iq2_s, iq3_xxs, iq3_s, iq1_s, iq1_m  the format's grid (2, 4, 8, 1, 2, 4, 4 KiB)
//         ahead of the blocks in every chunk, then each block with its f16 d widened to a word
//         (iq1_m's blocks as stored; see weight-layout.ts).
//   iq4_nl repacked as q4_0 (5 words: 4 of nibbles, the f16 scale); iq4_xs llama.cpp's 34-word blocks
//         (f16 d and u16 scales_h, scales_l, then 8 sub-blocks of 4 words of nibbles laid out as iq4_nl's).
// Every block format keeps a row's values in whole blocks, and w_at4's i is a multiple of 4, so the
// four values share a block and their codes sit in the same bytes of one or two words.
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
#elif ${W_BLOCKQ}
@group(0) @binding(1) var<storage, read> wbuf: array<u32>;
// The `mask` bits at bit `shift` of each byte of `w`, low byte first.
fn byte_bits(w: u32, shift: u32, mask: u32) -> vec4<u32> {
  return (vec4<u32>(w) >> (vec4<u32>(0u, 8u, 16u, 24u) + vec4<u32>(shift))) & vec4<u32>(mask);
}
#if ${W_KQ45}
// Byte `i` of a k-quant block's 12 scale bytes (words 1..3 of block word `b`).
fn k_scale_byte(b: u32, i: u32) -> u32 { return extractBits(wbuf[b + 1u + (i >> 2u)], (i & 3u) * 8u, 8u); }
// 6-bit scale and min of sub-block j (llama.cpp's get_scale_min_k4).
fn k_scale_min(b: u32, j: u32) -> vec2<f32> {
  if (j < 4u) { return vec2<f32>(f32(k_scale_byte(b, j) & 63u), f32(k_scale_byte(b, j + 4u) & 63u)); }
  let hi = k_scale_byte(b, j + 4u);
  return vec2<f32>(f32((hi & 15u) | ((k_scale_byte(b, j - 4u) >> 6u) << 4u)), f32((hi >> 4u) | ((k_scale_byte(b, j) >> 6u) << 4u)));
}
#endif
#if ${W_IQ4}
// llama.cpp's kvalues_iq4nl, 16 int8 packed four to a word, low byte first: picked by the code's
// bits 2–3, then its byte (bits 0–1) shifted to the top and back down with its sign.
fn iq4_values(q: vec4<u32>) -> vec4<f32> {
  let upper = (q & vec4<u32>(4u)) != vec4<u32>(0u);
  let neg = select(vec4<u32>(0xbfad9881u), vec4<u32>(0xf6eaddcfu), upper);
  let pos = select(vec4<u32>(0x26190d01u), vec4<u32>(0x71594535u), upper);
  let word = select(neg, pos, q >= vec4<u32>(8u));
  return vec4<f32>(bitcast<vec4<i32>>(word << ((vec4<u32>(3u) - (q & vec4<u32>(3u))) * vec4<u32>(8u))) >> vec4<u32>(24u));
}
#endif
#if ${W_IQGRID}
// Where value i of a lattice i-quant chunk lies: its block's first word (after the grid), its
// place e in the block's 256, its 32-value sub-block ib, its 8-value group l in that, and which half
// of the group (values 4·half … 4·half + 3) it starts.
struct IqAt { b: u32, e: u32, ib: u32, l: u32, half: u32 }
fn iq_at(i: u32) -> IqAt {
  let e = i & 255u;
  return IqAt(${IQ_GRID_WORDS}u + (i >> 8u) * ${IQ_BLOCK_WORDS}u, e, e >> 5u, (e & 31u) >> 3u, (e >> 2u) & 1u);
}
// ±1 for values 4·half … 4·half + 3 of group l from a word holding 4 × 7 sign bits (llama.cpp's
// ksigns_iq2xs: bit 7 set where the 7 stored bits have an odd count, so minus signs are even).
fn iq_signs(aux: u32, l: u32, half: u32) -> vec4<f32> {
  let s7 = (aux >> (7u * l)) & 127u;
  return iq_signs8(s7 | ((countOneBits(s7) & 1u) << 7u), half);
}
// ±1 for values 4·half … 4·half + 3 of a group whose 8 sign bits are `signs` (bit j: value j negative).
fn iq_signs8(signs: u32, half: u32) -> vec4<f32> {
  let bits = (vec4<u32>(signs) >> (vec4<u32>(0u, 1u, 2u, 3u) + vec4<u32>(4u * half))) & vec4<u32>(1u);
  return vec4<f32>(1.0) - 2.0 * vec4<f32>(bits);
}
#endif
#if ${W_IQ1}
// Values 4·half … 4·half + 3 (−1, 0 or +1) of entry g of iq1's grid, held at the chunk's head as
// 2-bit codes (value + 1), one u16 per entry (weight-layout.ts).
fn iq1_values(g: u32, half: u32) -> vec4<f32> {
  let entry = extractBits(wbuf[g >> 1u], (g & 1u) * 16u, 16u);
  return vec4<f32>((vec4<u32>(entry) >> (vec4<u32>(0u, 2u, 4u, 6u) + vec4<u32>(8u * half))) & vec4<u32>(3u)) - 1.0;
}
#endif
fn w_at4(i: u32) -> vec4<f32> {
#if ${W_Q4_0}
  // 5 words: 4 of nibbles (value e low nibble of byte e, e + 16 high nibble), then the f16 scale.
  let b = (i >> 5u) * 5u;
  let e = i & 31u;
  let q = byte_bits(wbuf[b + ((e & 15u) >> 2u)], (e >> 4u) * 4u, 15u);
  return (vec4<f32>(q) - 8.0) * unpack2x16float(wbuf[b + 4u]).x;
#elif ${W_Q4_1}
  // 5 words: f16 scale and min, then 4 of nibbles.
  let b = (i >> 5u) * 5u;
  let e = i & 31u;
  let dm = unpack2x16float(wbuf[b]);
  return vec4<f32>(byte_bits(wbuf[b + 1u + ((e & 15u) >> 2u)], (e >> 4u) * 4u, 15u)) * dm.x + dm.y;
#elif ${W_Q5_0}
  // 6 words: the 32 fifth bits, 4 of nibbles, then the f16 scale.
  let b = (i >> 5u) * 6u;
  let e = i & 31u;
  let q = byte_bits(wbuf[b + 1u + ((e & 15u) >> 2u)], (e >> 4u) * 4u, 15u) | (((vec4<u32>(wbuf[b]) >> (vec4<u32>(0u, 1u, 2u, 3u) + vec4<u32>(e))) & vec4<u32>(1u)) << vec4<u32>(4u));
  return (vec4<f32>(q) - 16.0) * unpack2x16float(wbuf[b + 5u]).x;
#elif ${W_Q5_1}
  // 6 words: f16 scale and min, the 32 fifth bits, 4 of nibbles.
  let b = (i >> 5u) * 6u;
  let e = i & 31u;
  let dm = unpack2x16float(wbuf[b]);
  let q = byte_bits(wbuf[b + 2u + ((e & 15u) >> 2u)], (e >> 4u) * 4u, 15u) | (((vec4<u32>(wbuf[b + 1u]) >> (vec4<u32>(0u, 1u, 2u, 3u) + vec4<u32>(e))) & vec4<u32>(1u)) << vec4<u32>(4u));
  return vec4<f32>(q) * dm.x + dm.y;
#elif ${W_Q2K}
  // 21 words: 16 scale bytes (low nibble scale, high nibble min, per 16 values), 64 bytes of 2-bit
  // codes (per 128 values n, 32 bytes; value 128·n + 32·j + l in bits 2·j of byte 32·n + l), then
  // f16 d and dmin.
  let b = (i >> 8u) * 21u;
  let e = i & 255u;
  let n = e >> 7u;
  let j = (e & 127u) >> 5u;
  let l = e & 31u;
  let k = n * 8u + j * 2u + (l >> 4u);
  let sc = extractBits(wbuf[b + (k >> 2u)], (k & 3u) * 8u, 8u);
  let dm = unpack2x16float(wbuf[b + 20u]);
  let q = byte_bits(wbuf[b + 4u + n * 8u + (l >> 2u)], j * 2u, 3u);
  return vec4<f32>(q) * (dm.x * f32(sc & 15u)) - dm.y * f32(sc >> 4u);
#elif ${W_Q3K}
  // 28 words (padded at upload): 32 hmask bytes (bit 4·n + j of byte l, for every n, the code's
  // bit 2), 64 bytes of low 2 bits laid out as q2_k's, 12 scale bytes (6-bit scale k − 32: low 4
  // bits the nibble k / 8 of byte k mod 8, high 2 bits bits 2·(k / 4) of byte 8 + k mod 4), f16 d.
  let b = (i >> 8u) * 28u;
  let e = i & 255u;
  let n = e >> 7u;
  let j = (e & 127u) >> 5u;
  let l = e & 31u;
  let k = n * 8u + j * 2u + (l >> 4u);
  let lo4 = extractBits(wbuf[b + 24u + ((k & 7u) >> 2u)], (k & 3u) * 8u + (k >> 3u) * 4u, 4u);
  let hi2 = extractBits(wbuf[b + 26u], (k & 3u) * 8u + (k >> 2u) * 2u, 2u);
  let scale = f32(i32(lo4 | (hi2 << 4u)) - 32) * unpack2x16float(wbuf[b + 27u]).x;
  // llama.cpp subtracts 4 where the hmask bit is clear: code = low | (bit << 2) − 4.
  let q = byte_bits(wbuf[b + 8u + n * 8u + (l >> 2u)], j * 2u, 3u) | (byte_bits(wbuf[b + (l >> 2u)], n * 4u + j, 1u) << vec4<u32>(2u));
  return (vec4<f32>(q) - 4.0) * scale;
#elif ${W_Q4K}
  // 36 words: f16 d and dmin, 12 scale bytes, 128 bytes of nibbles (64-value chunks: low nibbles
  // first, then high).
  let b = (i >> 8u) * 36u;
  let e = i & 255u;
  let j = e >> 5u;
  let dm = unpack2x16float(wbuf[b]);
  let sm = k_scale_min(b, j);
  let q = byte_bits(wbuf[b + 4u + (e >> 6u) * 8u + ((e & 31u) >> 2u)], (j & 1u) * 4u, 15u);
  return vec4<f32>(q) * (dm.x * sm.x) - dm.y * sm.y;
#elif ${W_Q5K}
  // 44 words: as q4_k with 32 bytes of fifth bits (bit j of byte l for value 32·j + l) before the nibbles.
  let b = (i >> 8u) * 44u;
  let e = i & 255u;
  let j = e >> 5u;
  let dm = unpack2x16float(wbuf[b]);
  let sm = k_scale_min(b, j);
  let lo = byte_bits(wbuf[b + 12u + (e >> 6u) * 8u + ((e & 31u) >> 2u)], (j & 1u) * 4u, 15u);
  let q = lo | (byte_bits(wbuf[b + 4u + ((e & 31u) >> 2u)], j, 1u) << vec4<u32>(4u));
  return vec4<f32>(q) * (dm.x * sm.x) - dm.y * sm.y;
#elif ${W_Q6K}
  // Unpacked at upload into 69 words per 256 values: d as f32, 16 int8 scales, 256 int8 codes − 32.
  let b = (i >> 8u) * 69u;
  let e = i & 255u;
  let g = e >> 4u;
  let sc = extractBits(bitcast<i32>(wbuf[b + 1u + (g >> 2u)]), (g & 3u) * 8u, 8u);
  let word = bitcast<i32>(wbuf[b + 5u + (e >> 2u)]);
  let q = vec4<i32>(extractBits(word, 0u, 8u), extractBits(word, 8u, 8u), extractBits(word, 16u, 8u), extractBits(word, 24u, 8u));
  return vec4<f32>(q) * (bitcast<f32>(wbuf[b]) * f32(sc));
#elif ${W_IQ4NL}
  // 5 words, as q4_0's: 4 of nibbles (value e low nibble of byte e, e + 16 high nibble), then the f16 scale.
  let b = (i >> 5u) * 5u;
  let e = i & 31u;
  return iq4_values(byte_bits(wbuf[b + ((e & 15u) >> 2u)], (e >> 4u) * 4u, 15u)) * unpack2x16float(wbuf[b + 4u]).x;
#elif ${W_IQ4XS}
  // 34 words: f16 d (low half) and scales_h (2 bits per sub-block, high half), scales_l (a nibble per
  // sub-block), then sub-block ib's 4 words of nibbles; its scale is 6 bits − 32.
  let b = (i >> 8u) * 34u;
  let e = i & 255u;
  let ib = e >> 5u;
  let head = wbuf[b];
  let ls = extractBits(wbuf[b + 1u], ib * 4u, 4u) | (extractBits(head, 16u + 2u * ib, 2u) << 4u);
  let dl = unpack2x16float(head).x * f32(i32(ls) - 32);
  return iq4_values(byte_bits(wbuf[b + 2u + ib * 4u + ((e & 15u) >> 2u)], ((e & 31u) >> 4u) * 4u, 15u)) * dl;
#elif ${W_IQ2XXS}
  // The 256-entry grid first (512 words: entry g's 8 magnitude bytes in words 2g, 2g + 1), then
  // 17-word blocks: f16 d (low half), and per 32 values two words: four grid-index bytes, then 4 × 7
  // sign bits (the 8th makes the count of minus signs even) under a 4-bit scale.
  let at = iq_at(i);
  let aux1 = wbuf[at.b + 2u + 2u * at.ib];
  let g = extractBits(wbuf[at.b + 1u + 2u * at.ib], at.l * 8u, 8u);
  let db = unpack2x16float(wbuf[at.b]).x * (0.5 + f32(aux1 >> 28u)) * 0.25;
  return vec4<f32>(byte_bits(wbuf[2u * g + at.half], 0u, 255u)) * iq_signs(aux1, at.l, at.half) * db;
#elif ${W_IQ2XS}
  // The 512-entry grid first (1024 words), then 19-word blocks: f16 d (low half), per 8 values a
  // u16 (9-bit grid index, 7 sign bits under the parity rule) in words 1–16, then per 16 values a
  // 4-bit scale (two per byte, one byte per 32 values) in words 17–18.
  let at = iq_at(i);
  let k = at.e >> 3u;
  let q = extractBits(wbuf[at.b + 1u + (k >> 1u)], (k & 1u) * 16u, 16u);
  let sc = extractBits(wbuf[at.b + 17u + (at.ib >> 2u)], (at.ib & 3u) * 8u + ((at.e & 31u) >> 4u) * 4u, 4u);
  let db = unpack2x16float(wbuf[at.b]).x * (0.5 + f32(sc)) * 0.25;
  return vec4<f32>(byte_bits(wbuf[2u * (q & 511u) + at.half], 0u, 255u)) * iq_signs(q >> 9u, 0u, at.half) * db;
#elif ${W_IQ2S}
  // The 1024-entry grid first (2048 words), then 21-word blocks: f16 d (low half), grid-index low
  // bytes (words 1–8, one per 8 values), sign bytes (words 9–16), the indices' high 2 bits (per 32
  // values a byte, words 17–18), 4-bit scales per 16 values (words 19–20).
  let at = iq_at(i);
  let g = extractBits(wbuf[at.b + 1u + at.ib], at.l * 8u, 8u) | (extractBits(wbuf[at.b + 17u + (at.ib >> 2u)], (at.ib & 3u) * 8u + 2u * at.l, 2u) << 8u);
  let sc = extractBits(wbuf[at.b + 19u + (at.ib >> 2u)], (at.ib & 3u) * 8u + (at.l >> 1u) * 4u, 4u);
  let db = unpack2x16float(wbuf[at.b]).x * (0.5 + f32(sc)) * 0.25;
  let signs = extractBits(wbuf[at.b + 9u + at.ib], at.l * 8u, 8u);
  return vec4<f32>(byte_bits(wbuf[2u * g + at.half], 0u, 255u)) * iq_signs8(signs, at.half) * db;
#elif ${W_IQ3S}
  // The 512-entry grid first (512 words), then 28-word blocks: f16 d (low half), grid-index low bytes
  // (words 1–16, two per 8 values), their high bits (a byte per 32 values, words 17–18), sign bytes
  // (words 19–26), and per 32 values a 4-bit scale s for d · (1 + 2s) (word 27).
  let at = iq_at(i);
  let q = 8u * at.ib + 2u * at.l + at.half;
  let g = extractBits(wbuf[at.b + 1u + (q >> 2u)], (q & 3u) * 8u, 8u) | (extractBits(wbuf[at.b + 17u + (at.ib >> 2u)], (at.ib & 3u) * 8u + 2u * at.l + at.half, 1u) << 8u);
  let db = unpack2x16float(wbuf[at.b]).x * f32(1u + 2u * extractBits(wbuf[at.b + 27u], at.ib * 4u, 4u));
  let signs = extractBits(wbuf[at.b + 19u + at.ib], at.l * 8u, 8u);
  return vec4<f32>(byte_bits(wbuf[g], 0u, 255u)) * iq_signs8(signs, at.half) * db;
#elif ${W_IQ1S}
  // The grid first (1024 words), then 13-word blocks: f16 d (low half), grid-index low bytes (words
  // 1–8, one per 8 values), and per 32 values a u16 qh (words 9–12): 4 × 3 high index bits, a 3-bit
  // scale s for d · (2s + 1), and the sign of the ±1/8 every value is offset by.
  let at = iq_at(i);
  let qh = extractBits(wbuf[at.b + 9u + (at.ib >> 1u)], (at.ib & 1u) * 16u, 16u);
  let g = extractBits(wbuf[at.b + 1u + at.ib], at.l * 8u, 8u) | (extractBits(qh, 3u * at.l, 3u) << 8u);
  let dl = unpack2x16float(wbuf[at.b]).x * f32(2u * extractBits(qh, 12u, 3u) + 1u);
  return (iq1_values(g, at.half) + select(0.125, -0.125, (qh & 0x8000u) != 0u)) * dl;
#elif ${W_IQ1M}
  // The grid first (1024 words), then llama.cpp's 14-word blocks: grid-index low bytes (words 0–7),
  // qh bytes (words 8–11: per 8 values 3 high index bits and the offset's sign, two per byte), four
  // u16 of 3-bit scales per 16 values (words 12–13) whose top nibbles together are the f16 d.
  let at = iq_at(i);
  let s01 = wbuf[at.b + 12u];
  let s23 = wbuf[at.b + 13u];
  let dbits = extractBits(s01, 12u, 4u) | (extractBits(s01, 28u, 4u) << 4u) | (extractBits(s23, 12u, 4u) << 8u) | (extractBits(s23, 28u, 4u) << 12u);
  let sc = extractBits(select(s01, s23, at.ib >= 4u), ((at.ib >> 1u) & 1u) * 16u + 6u * (at.ib & 1u) + 3u * (at.l >> 1u), 3u);
  let dl = unpack2x16float(dbits).x * f32(2u * sc + 1u);
  let qh = extractBits(wbuf[at.b + 8u + (at.ib >> 1u)], ((2u * at.ib + (at.l >> 1u)) & 3u) * 8u + 4u * (at.l & 1u), 4u);
  let g = extractBits(wbuf[at.b + at.ib], at.l * 8u, 8u) | ((qh & 7u) << 8u);
  return (iq1_values(g, at.half) + select(0.125, -0.125, (qh & 8u) != 0u)) * dl;
#elif ${W_IQ3XXS}
  // The 256-entry grid first (256 words: entry g's 4 magnitude bytes), then 25-word blocks: f16 d
  // (low half), 16 words of grid-index bytes (two per 8 values), and per 32 values a word of 4 × 7
  // sign bits under a 4-bit scale.
  let at = iq_at(i);
  let aux = wbuf[at.b + 17u + at.ib];
  let q = 8u * at.ib + 2u * at.l + at.half;
  let g = extractBits(wbuf[at.b + 1u + (q >> 2u)], (q & 3u) * 8u, 8u);
  let db = unpack2x16float(wbuf[at.b]).x * (0.5 + f32(aux >> 28u)) * 0.5;
  return vec4<f32>(byte_bits(wbuf[g], 0u, 255u)) * iq_signs(aux, at.l, at.half) * db;
#elif ${W_MXFP4}
  // 5 words: 4 of E2M1 codes (value e low nibble of byte e, e + 16 high nibble), then the E8M0 byte.
  let b = (i >> 5u) * 5u;
  let e = i & 31u;
  let q = byte_bits(wbuf[b + ((e & 15u) >> 2u)], (e >> 4u) * 4u, 15u);
  // llama.cpp's kvalues_mxfp4 (E2M1 doubled): magnitudes 0 1 2 3 4 6 8 12 as the nibbles of one
  // word, bit 3 of the code the sign.
  let mag = vec4<f32>((vec4<u32>(0xc8643210u) >> ((q & vec4<u32>(7u)) * vec4<u32>(4u))) & vec4<u32>(15u));
  let v = select(mag, -mag, (q & vec4<u32>(8u)) != vec4<u32>(0u));
  // Half the scale, 2^(s − 128), built as f32 bits (GGML_E8M0_TO_FP32_HALF: s < 2 are subnormals).
  let s = wbuf[b + 4u] & 255u;
  return v * bitcast<f32>(select((s - 1u) << 23u, 0x00200000u << min(s, 1u), s < 2u));
#elif ${W_F8E4M3}
  // 9 words per 32 values, kept as loaded: the f32 scale, then 8 words of E4M3 codes.
  let b = (i >> 5u) * 9u;
  let q = byte_bits(wbuf[b + 1u + ((i & 31u) >> 2u)], 0u, 255u);
  // Exponent and mantissa moved under f32's, the exponent rebiased by 127 − 7 = 120: exact for the
  // normal codes. Exponent 0 codes are subnormals, m · 2^−9. The NaN codes are not decoded as NaN
  // (the loader refuses them; the reference reads NaN).
  let normal = bitcast<vec4<f32>>(((q & vec4<u32>(127u)) << vec4<u32>(20u)) + vec4<u32>(120u << 23u));
  let mag = select(normal, vec4<f32>(q & vec4<u32>(7u)) * 0.001953125, (q & vec4<u32>(120u)) == vec4<u32>(0u));
  return select(mag, -mag, (q & vec4<u32>(128u)) != vec4<u32>(0u)) * bitcast<f32>(wbuf[b]);
#endif
}
fn w_at(i: u32) -> f32 { return w_at4(i & ~3u)[i & 3u]; }
#endif
