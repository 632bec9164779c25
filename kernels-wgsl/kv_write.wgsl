// Scatters k, v [n, row] into the paged caches at flat slots; slots outside the cache are skipped.
// F16: the caches hold two halves per u32 word (row is even) and each invocation writes one word,
// rounded as ggml's f32 → f16 copy (llama.cpp's KV cache): from ±65520 on ±inf, NaN a quiet NaN.
// pack2x16float leaves values past f16's range indeterminate, so those are written from their bits.
// Without V_CACHE one cache serves keys and values (multi-head latent attention): only k and kc are bound.
struct P { n: u32, row: u32, capacity: u32, _a: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> k: array<f32>;
@group(0) @binding(3) var<storage, read> slots: array<i32>;
#if ${F16}
@group(0) @binding(4) var<storage, read_write> kc: array<u32>;
#else
@group(0) @binding(4) var<storage, read_write> kc: array<f32>;
#endif
#if ${V_CACHE}
@group(0) @binding(2) var<storage, read> v: array<f32>;
#if ${F16}
@group(0) @binding(5) var<storage, read_write> vc: array<u32>;
#else
@group(0) @binding(5) var<storage, read_write> vc: array<f32>;
#endif
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
#else
const PER = 1u;
#endif

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let w = (wid.x + wid.y * nwg.x) * 256u + lid;
  let i = w * PER;
  if (i >= p.n * p.row) { return; }
  let t = i / p.row;
  let s = slots[t];
  if (s < 0 || u32(s) >= p.capacity) { return; }
  let dst = u32(s) * p.row + i % p.row;
#if ${F16}
  kc[dst / 2u] = pack_halves(k[i], k[i + 1u]);
#if ${V_CACHE}
  vc[dst / 2u] = pack_halves(v[i], v[i + 1u]);
#endif
#else
  kc[dst] = k[i];
#if ${V_CACHE}
  vc[dst] = v[i];
#endif
#endif
}
