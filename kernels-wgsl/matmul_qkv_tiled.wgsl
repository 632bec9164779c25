// Three matmuls of one input in one dispatch (an attention layer's q, k and v projections), register
// blocked as matmul_tiled.wgsl: y_j[r, o] = x[r, :] · W_j[o, :]. The workgroups of each row block
// are the q outputs' groups, then k's, then v's; a workgroup's weight `which` is uniform, so the
// loop's choice of accessor (the weights prelude for q, its copies ending in _u at binding 6 for k and
// _v at binding 7 for v; kernel-source.ts) is the same for all its threads. One dtype for the three.
const RT = ${RT}u;
const OT = 64u / RT;
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
fn store(which: u32, m: u32, r: u32, o: u32, v: f32) {
  if (r >= p.n || o >= m) { return; }
  if (which == 0u) { yq[r * m + o] = v; } else if (which == 1u) { yk[r * m + o] = v; } else { yv[r * m + o] = v; }
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let g = wid.x + wid.y * nwg.x;
  let per_rows = p.g_q + p.g_k + p.g_v;
  var og = g % per_rows;
  var which = 0u;
  var m = p.m_q;
  if (og >= p.g_q + p.g_k) { which = 2u; og -= p.g_q + p.g_k; m = p.m_v; } else if (og >= p.g_q) { which = 1u; og -= p.g_q; m = p.m_k; }
  let r0 = (g / per_rows) * (4u * RT) + (lid / OT) * 4u;
  let o0 = og * (4u * OT) + (lid % OT) * 4u;
  if (r0 >= p.n || o0 >= m) { return; }
  let rl = p.n - 1u;
  let ol = m - 1u;
  let w0 = min(o0, ol) * p.k;
  let w1i = min(o0 + 1u, ol) * p.k;
  let w2 = min(o0 + 2u, ol) * p.k;
  let w3 = min(o0 + 3u, ol) * p.k;
  var a0 = vec4<f32>(0.0);
  var a1 = vec4<f32>(0.0);
  var a2 = vec4<f32>(0.0);
  var a3 = vec4<f32>(0.0);
#if ${VEC4}
  let k4 = p.k / 4u;
  let x0 = min(r0, rl) * k4;
  let x1 = min(r0 + 1u, rl) * k4;
  let x2 = min(r0 + 2u, rl) * k4;
  let x3 = min(r0 + 3u, rl) * k4;
  for (var kk = 0u; kk < p.k; kk += 4u) {
    let b0 = w4(which, w0 + kk);
    let b1 = w4(which, w1i + kk);
    let b2 = w4(which, w2 + kk);
    let b3 = w4(which, w3 + kk);
    let j = kk / 4u;
    let v0 = x[x0 + j];
    let v1 = x[x1 + j];
    let v2 = x[x2 + j];
    let v3 = x[x3 + j];
    a0 += vec4<f32>(dot(v0, b0), dot(v0, b1), dot(v0, b2), dot(v0, b3));
    a1 += vec4<f32>(dot(v1, b0), dot(v1, b1), dot(v1, b2), dot(v1, b3));
    a2 += vec4<f32>(dot(v2, b0), dot(v2, b1), dot(v2, b2), dot(v2, b3));
    a3 += vec4<f32>(dot(v3, b0), dot(v3, b1), dot(v3, b2), dot(v3, b3));
  }
#else
  let x0 = min(r0, rl) * p.k;
  let x1 = min(r0 + 1u, rl) * p.k;
  let x2 = min(r0 + 2u, rl) * p.k;
  let x3 = min(r0 + 3u, rl) * p.k;
  for (var kk = 0u; kk < p.k; kk += 1u) {
    let b = vec4<f32>(w1(which, w0 + kk), w1(which, w1i + kk), w1(which, w2 + kk), w1(which, w3 + kk));
    a0 += x[x0 + kk] * b;
    a1 += x[x1 + kk] * b;
    a2 += x[x2 + kk] * b;
    a3 += x[x3 + kk] * b;
  }
#endif
  for (var c = 0u; c < 4u; c += 1u) {
    store(which, m, r0, o0 + c, a0[c]);
    store(which, m, r0 + 1u, o0 + c, a1[c]);
    store(which, m, r0 + 2u, o0 + c, a2[c]);
    store(which, m, r0 + 3u, o0 + c, a3[c]);
  }
}
