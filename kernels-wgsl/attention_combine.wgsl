// Merges split-KV attention's partials (paged_attention.wgsl with SPLIT): for each query row and head,
// spans s = 0 … splits-1 left unnormalised sums acc_s, their max m_s and weight sum l_s. With
// M = max_s m_s (and the head's sink logit with SINKS, which joins the denominator only),
// out = Σ_s acc_s · e^(m_s - M) / (Σ_s l_s · e^(m_s - M) [+ e^(sink - M)]). One workgroup per (row, head).
const WG = 64u;
struct P {
  n: u32, heads: u32, head_dim: u32, splits: u32,
}
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> part: array<f32>;
@group(0) @binding(2) var<storage, read_write> dst: array<f32>;
#if ${SINKS}
@group(0) @binding(3) var<storage, read> sinks: array<f32>;
#endif

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let g = wid.x + wid.y * nwg.x; // query row t's head h: g = t · heads + h
  if (g >= p.n * p.heads) { return; }
  let hd = p.head_dim;
  let ml = p.n * p.heads * p.splits * hd + g * p.splits * 2u;
  var mx = -3.0e38;
#if ${SINKS}
  let sink = sinks[g % p.heads];
  mx = sink;
#endif
  for (var s = 0u; s < p.splits; s += 1u) { mx = max(mx, part[ml + s * 2u]); }
  var l = 0.0;
#if ${SINKS}
  l = exp(sink - mx);
#endif
  for (var s = 0u; s < p.splits; s += 1u) { l += part[ml + s * 2u + 1u] * exp(part[ml + s * 2u] - mx); }
  let inv = 1.0 / l;
  for (var d = lid; d < hd; d += WG) {
    var sum = 0.0;
    for (var s = 0u; s < p.splits; s += 1u) { sum += part[(g * p.splits + s) * hd + d] * exp(part[ml + s * 2u] - mx); }
    dst[g * hd + d] = sum * inv;
  }
}
