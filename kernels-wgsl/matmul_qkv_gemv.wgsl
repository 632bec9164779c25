// Three decode matmuls of one input in one dispatch (an attention layer's q, k and v projections),
// as matmul_gemv.wgsl: a workgroup of 64 computes 4 outputs of one row. A row's workgroups are the q
// outputs' groups, then k's, then v's; a workgroup's weight `which` is uniform (the weights prelude
// for q, its copies ending in _u at binding 6 for k and _v at binding 7 for v; kernel-source.ts).
struct P { n: u32, k: u32, m_q: u32, m_k: u32, m_v: u32, g_q: u32, g_k: u32, g_v: u32 }
@group(0) @binding(0) var<uniform> p: P;
#if ${VEC4}
@group(0) @binding(2) var<storage, read> x: array<vec4<f32>>;
#else
@group(0) @binding(2) var<storage, read> x: array<f32>;
#endif
@group(0) @binding(4) var<storage, read_write> yq: array<f32>;
@group(0) @binding(8) var<storage, read_write> yk: array<f32>;
@group(0) @binding(9) var<storage, read_write> yv: array<f32>;
var<workgroup> red: array<vec4<f32>, 64>;

fn w4(which: u32, i: u32) -> vec4<f32> {
  if (which == 0u) { return w_at4(i); }
  if (which == 1u) { return w_at4_u(i); }
  return w_at4_v(i);
}
fn w1(which: u32, i: u32) -> f32 {
  if (which == 0u) { return w_at(i); }
  if (which == 1u) { return w_at_u(i); }
  return w_at_v(i);
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let g = wid.x + wid.y * nwg.x;
  let per_row = p.g_q + p.g_k + p.g_v;
  let row = g / per_row;
  if (row >= p.n) { return; }
  var og = g % per_row;
  var which = 0u;
  var m = p.m_q;
  if (og >= p.g_q + p.g_k) { which = 2u; og -= p.g_q + p.g_k; m = p.m_v; } else if (og >= p.g_q) { which = 1u; og -= p.g_q; m = p.m_k; }
  let o0 = og * 4u;
  let last = m - 1u;
  let w0 = min(o0, last) * p.k;
  let wa = min(o0 + 1u, last) * p.k;
  let w2 = min(o0 + 2u, last) * p.k;
  let w3 = min(o0 + 3u, last) * p.k;
  var acc = vec4<f32>(0.0);
#if ${VEC4}
  let xb = row * (p.k / 4u);
  for (var kk = lid * 4u; kk < p.k; kk += 256u) {
    let xv = x[xb + kk / 4u];
    acc += vec4<f32>(dot(xv, w4(which, w0 + kk)), dot(xv, w4(which, wa + kk)), dot(xv, w4(which, w2 + kk)), dot(xv, w4(which, w3 + kk)));
  }
#else
  let xb = row * p.k;
  for (var kk = lid; kk < p.k; kk += 64u) {
    let xv = x[xb + kk];
    acc += xv * vec4<f32>(w1(which, w0 + kk), w1(which, wa + kk), w1(which, w2 + kk), w1(which, w3 + kk));
  }
#endif
  red[lid] = acc;
  workgroupBarrier();
  for (var s = 32u; s > 0u; s >>= 1u) {
    if (lid < s) { red[lid] += red[lid + s]; }
    workgroupBarrier();
  }
  if (lid < 4u && o0 + lid < m) {
    let v = red[0][lid];
    let o = row * m + o0 + lid;
    if (which == 0u) { yq[o] = v; } else if (which == 1u) { yk[o] = v; } else { yv[o] = v; }
  }
}
