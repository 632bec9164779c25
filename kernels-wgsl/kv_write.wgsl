// Scatters k, v [n, row] into the paged caches at flat slots; slots outside the cache are skipped.
// F16: the caches hold two halves per u32 word (row is even) and each invocation writes one word,
// rounded as ggml's f32 → f16 copy (llama.cpp's KV cache): from ±65520 on ±inf, NaN a quiet NaN.
// pack2x16float leaves values past f16's range indeterminate, so those are written from their bits.
// F8: the caches hold f8_e4m3 blocks (quant-blocks-fp8.ts), 9 words per 32 values of a row: the
// scale 2^k (the smallest power of two within which 448 covers the block's largest magnitude; 0 for a
// block below 2^-100), then the 32 E4M3 codes, each the value ÷ scale rounded to nearest, ties to even.
// Each invocation encodes one block. Bit for bit the reference's encoder.
// Without V_CACHE one cache serves keys and values (multi-head latent attention): only k and kc are bound.
// With ROPE (Backend.rotateAndWriteKv: rope(q), rope(k) and the write in one dispatch) the keys are
// rotated as they are read (each value from its pair, as rope.wgsl computes it), and the invocations
// past the cache writes rotate q in place, one pair each (rope.wgsl's threads, less its copies).
#if ${ROPE}
struct P { n: u32, row: u32, capacity: u32, head_dim: u32, rot: u32, q_heads: u32, log2_theta: f32, kv_work: u32 }
#else
struct P { n: u32, row: u32, capacity: u32, _a: u32 }
#endif
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> k: array<f32>;
@group(0) @binding(3) var<storage, read> slots: array<i32>;
#if ${WORDS}
@group(0) @binding(4) var<storage, read_write> kc: array<u32>;
#else
@group(0) @binding(4) var<storage, read_write> kc: array<f32>;
#endif
#if ${V_CACHE}
@group(0) @binding(2) var<storage, read> v: array<f32>;
#if ${WORDS}
@group(0) @binding(5) var<storage, read_write> vc: array<u32>;
#else
@group(0) @binding(5) var<storage, read_write> vc: array<f32>;
#endif
#endif

#if ${ROPE}
@group(0) @binding(6) var<storage, read> pos: array<i32>;
@group(0) @binding(7) var<storage, read_write> q: array<f32>;
#if ${FREQ_FACTORS}
@group(0) @binding(8) var<storage, read> factors: array<f32>;
#endif
// Pair i's angle at token t, as rope.wgsl takes it.
fn angle(t: u32, i: u32) -> f32 {
#if ${FREQ_FACTORS}
  return f32(pos[t]) * exp2(-f32(2u * i) / f32(p.rot) * p.log2_theta) / factors[i];
#else
  return f32(pos[t]) * exp2(-f32(2u * i) / f32(p.rot) * p.log2_theta);
#endif
}
// Where dim d of a head sits in its pair: the pair, its two dims, and whether d is the first.
fn pair_of(d: u32) -> vec4<u32> {
  let half = p.rot / 2u;
#if ${NEOX}
  let i = d % half;
  return vec4<u32>(i, i, i + half, select(0u, 1u, d < half));
#else
  let i = d / 2u;
  return vec4<u32>(i, 2u * i, 2u * i + 1u, select(0u, 1u, (d & 1u) == 0u));
#endif
}
// Key value i of k [n, row] rotated: dims past rot as they are.
fn k_at(i: u32) -> f32 {
  let t = i / p.row;
  let d = (i % p.row) % p.head_dim;
  if (d >= p.rot) { return k[i]; }
  let base = i - d;
  let pr = pair_of(d);
  let a = angle(t, pr.x);
  let c = cos(a);
  let s = sin(a);
  let x0 = k[base + pr.y];
  let x1 = k[base + pr.z];
  return select(x0 * s + x1 * c, x0 * c - x1 * s, pr.w == 1u);
}
#else
fn k_at(i: u32) -> f32 { return k[i]; }
#endif

const F16_MAX = 65504.0;

// One f32 as f16 bits (low 16 bits of the result).
fn half_bits(x: f32) -> u32 {
  let b = bitcast<u32>(x);
  let sign = (b >> 16u) & 0x8000u;
  let mag = b & 0x7fffffffu;
  if (mag > 0x7f800000u) { return sign | 0x7e00u; } // NaN
  if (mag >= 0x477ff000u) { return sign | 0x7c00u; } // |x| >= 65520 rounds to inf (to even, past 65504)
  // Below 65520 and above 65504 rounds to 65504: clamped, pack2x16float stays in range.
  return pack2x16float(vec2<f32>(clamp(x, -F16_MAX, F16_MAX), 0.0)) & 0xffffu;
}
fn pack_halves(a: f32, b: f32) -> u32 { return half_bits(a) | (half_bits(b) << 16u); }
#if ${F16}
const PER = 2u;
#elif ${F8}
const PER = 32u;
// The E4M3 code of q (|q| <= 448), sign from `neg`: below 2^-6 the subnormal codes m · 2^-9 (m = 8 is
// 2^-6's code), else f32's exponent rebiased from 127 to 7 over its mantissa rounded to 3 bits.
fn e4m3_code(q: f32, neg: bool) -> u32 {
  let a = abs(q);
  var c: u32;
  if (a < 0.015625) {
    c = u32(round(a * 512.0)); // round() ties to even
  } else {
    let b = bitcast<u32>(a);
    c = ((b + 0x7ffffu + ((b >> 20u) & 1u)) >> 20u) - (120u << 3u);
  }
  return select(c, c | 0x80u, neg);
}
// The block's scale exponent k (scale 2^k) from its largest magnitude's bits, or -1000 below 2^-100.
fn scale_exp(amax: f32) -> i32 {
  let b = bitcast<u32>(amax);
  let e = i32((b >> 23u) & 0xffu);
  if (e < 27) { return -1000; }
  return e - select(134, 135, (b & 0x7fffffu) <= 0x600000u);
}
// One block's 9 words: the scale, then the codes four to a word, low byte first.
fn encode_block(x: array<f32, 32>) -> array<u32, 9> {
  var out: array<u32, 9>;
  var amax = 0.0;
  for (var j = 0u; j < 32u; j += 1u) { amax = max(amax, abs(x[j])); }
  let k = scale_exp(amax);
  if (k == -1000) { return out; } // zero-initialised: scale 0, codes 0
  out[0] = bitcast<u32>(k + 127) << 23u;
  let inv = bitcast<f32>(bitcast<u32>(127 - k) << 23u);
  for (var w = 0u; w < 8u; w += 1u) {
    var word = 0u;
    for (var j = 0u; j < 4u; j += 1u) {
      let v = x[4u * w + j];
      word |= e4m3_code(v * inv, (bitcast<u32>(v) >> 31u) == 1u) << (8u * j);
    }
    out[1u + w] = word;
  }
  return out;
}
#else
const PER = 1u;
#endif

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let w = (wid.x + wid.y * nwg.x) * 256u + lid;
#if ${ROPE}
  if (w >= p.kv_work) {
    // q [n, q_heads, head_dim]: pair i of head th rotated in place (each pair by one invocation).
    let half = p.rot / 2u;
    let id = w - p.kv_work;
    if (id >= p.n * p.q_heads * half) { return; }
    let th = id / half;
    let i = id % half;
    let base = th * p.head_dim;
#if ${NEOX}
    let pr = pair_of(i);
#else
    let pr = pair_of(2u * i);
#endif
    let a = angle(th / p.q_heads, i);
    let c = cos(a);
    let s = sin(a);
    let x0 = q[base + pr.y];
    let x1 = q[base + pr.z];
    q[base + pr.y] = x0 * c - x1 * s;
    q[base + pr.z] = x0 * s + x1 * c;
    return;
  }
#endif
  let i = w * PER;
  if (i >= p.n * p.row) { return; }
  let t = i / p.row;
  let s = slots[t];
  if (s < 0 || u32(s) >= p.capacity) { return; }
  let dst = u32(s) * p.row + i % p.row;
#if ${F16}
  kc[dst / 2u] = pack_halves(k_at(i), k_at(i + 1u));
#if ${V_CACHE}
  vc[dst / 2u] = pack_halves(v[i], v[i + 1u]);
#endif
#elif ${F8}
  let b = (dst / 32u) * 9u;
  var x: array<f32, 32>;
  for (var j = 0u; j < 32u; j += 1u) { x[j] = k_at(i + j); }
  let kw = encode_block(x);
  for (var j = 0u; j < 9u; j += 1u) { kc[b + j] = kw[j]; }
#if ${V_CACHE}
  for (var j = 0u; j < 32u; j += 1u) { x[j] = v[i + j]; }
  let vw = encode_block(x);
  for (var j = 0u; j < 9u; j += 1u) { vc[b + j] = vw[j]; }
#endif
#else
  kc[dst] = k_at(i);
#if ${V_CACHE}
  vc[dst] = v[i];
#endif
#endif
}
