// Decode matmul (few rows): y[r, o] = x[r, :] · W[o, :] (+ bias[o]) (+ res[r, o] with HAS_RES).
// One workgroup of 64 computes 4 outputs of one row; threads stride over k and reduce in shared
// memory, so consecutive threads read consecutive weight words (coalesced on real GPUs).
// The weight may be one row chunk of a larger matrix: outputs go to columns out_offset + o.
struct P { n: u32, k: u32, m_rows: u32, out_stride: u32, out_offset: u32, groups_per_row: u32, _a: u32, _b: u32 }
@group(0) @binding(0) var<uniform> p: P;
#if ${VEC4}
@group(0) @binding(2) var<storage, read> x: array<vec4<f32>>;
#else
@group(0) @binding(2) var<storage, read> x: array<f32>;
#endif
#if ${HAS_BIAS}
@group(0) @binding(3) var<storage, read> bias: array<f32>;
#endif
@group(0) @binding(4) var<storage, read_write> y: array<f32>;
#if ${HAS_RES}
@group(0) @binding(5) var<storage, read> res: array<f32>;
#endif
var<workgroup> red: array<vec4<f32>, 64>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let g = wid.x + wid.y * nwg.x;
  let row = g / p.groups_per_row;
  if (row >= p.n) { return; }
  let o0 = (g % p.groups_per_row) * 4u;
  let last = p.m_rows - 1u;
  let w0 = min(o0, last) * p.k;
  let w1 = min(o0 + 1u, last) * p.k;
  let w2 = min(o0 + 2u, last) * p.k;
  let w3 = min(o0 + 3u, last) * p.k;
  var acc = vec4<f32>(0.0);
#if ${VEC4}
  let xb = row * (p.k / 4u);
  for (var kk = lid * 4u; kk < p.k; kk += 256u) {
    let xv = x[xb + kk / 4u];
    acc += vec4<f32>(dot(xv, w_at4(w0 + kk)), dot(xv, w_at4(w1 + kk)), dot(xv, w_at4(w2 + kk)), dot(xv, w_at4(w3 + kk)));
  }
#else
  let xb = row * p.k;
  for (var kk = lid; kk < p.k; kk += 64u) {
    let xv = x[xb + kk];
    acc += xv * vec4<f32>(w_at(w0 + kk), w_at(w1 + kk), w_at(w2 + kk), w_at(w3 + kk));
  }
#endif
  red[lid] = acc;
  workgroupBarrier();
  for (var s = 32u; s > 0u; s >>= 1u) {
    if (lid < s) { red[lid] += red[lid + s]; }
    workgroupBarrier();
  }
  if (lid < 4u && o0 + lid < p.m_rows) {
    let o = p.out_offset + o0 + lid;
    var v = red[0][lid];
#if ${HAS_BIAS}
    v += bias[o];
#endif
#if ${HAS_RES}
    v += res[row * p.out_stride + o];
#endif
    y[row * p.out_stride + o] = v;
  }
}
