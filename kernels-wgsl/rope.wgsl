// Rotary embedding on x [n, heads, head_dim]. One thread per (token, head, i) where i < half rotates
// one pair and half <= i < half + (head_dim - rot) copies an unrotated dim. `magnitude` multiplies the
// rotated pairs only (LongRoPE's attention factor; 1 elsewhere).
struct P { n: u32, heads: u32, head_dim: u32, rot: u32, log2_theta: f32, magnitude: f32, _b: u32, _c: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> pos: array<i32>;
@group(0) @binding(3) var<storage, read_write> dst: array<f32>;
#if ${FREQ_FACTORS}
// Per-pair frequency divisors [rot / 2] (Llama 3.1+ "llama3" scaling, llama.cpp's rope_freqs).
@group(0) @binding(4) var<storage, read> factors: array<f32>;
#endif

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let half = p.rot / 2u;
  let per_head = half + (p.head_dim - p.rot);
  let id = (wid.x + wid.y * nwg.x) * 256u + lid;
  if (id >= p.n * p.heads * per_head) { return; }
  let i = id % per_head;
  let th = id / per_head;
  let base = th * p.head_dim;
  if (i >= half) {
    let d = p.rot + (i - half);
    dst[base + d] = x[base + d];
    return;
  }
#if ${FREQ_FACTORS}
  let angle = f32(pos[th / p.heads]) * exp2(-f32(2u * i) / f32(p.rot) * p.log2_theta) / factors[i];
#else
  let angle = f32(pos[th / p.heads]) * exp2(-f32(2u * i) / f32(p.rot) * p.log2_theta);
#endif
  let c = cos(angle) * p.magnitude;
  let s = sin(angle) * p.magnitude;
#if ${NEOX}
  let i0 = base + i;
  let i1 = base + i + half;
#else
  let i0 = base + 2u * i;
  let i1 = i0 + 1u;
#endif
  let a = x[i0];
  let b = x[i1];
  dst[i0] = a * c - b * s;
  dst[i1] = a * s + b * c;
}
