// Decode gated feed-forward (few rows): y[r, o] = act(x[r, :] · G[o, :]) · (x[r, :] · U[o, :]), act
// SiLU or (GELU) GELU's tanh form, as elementwise.wgsl's silu_mul and gelu_mul. matmul_gemv.wgsl's
// layout for both weights at once: a workgroup of 64 computes 4 outputs of one row, threads striding
// over k; G is read through the weights prelude, U (same dtype and shape, binding 6) through its
// copy whose names end in _u (kernel-source.ts). Both may be one row chunk of larger matrices.
struct P { n: u32, k: u32, m_rows: u32, out_stride: u32, out_offset: u32, groups_per_row: u32, _a: u32, _b: u32 }
@group(0) @binding(0) var<uniform> p: P;
#if ${VEC4}
@group(0) @binding(2) var<storage, read> x: array<vec4<f32>>;
#else
@group(0) @binding(2) var<storage, read> x: array<f32>;
#endif
@group(0) @binding(4) var<storage, read_write> y: array<f32>;
var<workgroup> red_g: array<vec4<f32>, 64>;
var<workgroup> red_u: array<vec4<f32>, 64>;

fn act(g: f32) -> f32 {
#if ${GELU}
  // 0.5·g·(1 + tanh(z)) written as g·sigmoid(2z), as elementwise.wgsl has it.
  return g / (1.0 + exp(-(1.5957691216057308 * (g + 0.044715 * g * g * g))));
#else
  return g / (1.0 + exp(-g));
#endif
}

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
  var ag = vec4<f32>(0.0);
  var au = vec4<f32>(0.0);
#if ${VEC4}
  let xb = row * (p.k / 4u);
  for (var kk = lid * 4u; kk < p.k; kk += 256u) {
    let xv = x[xb + kk / 4u];
    ag += vec4<f32>(dot(xv, w_at4(w0 + kk)), dot(xv, w_at4(w1 + kk)), dot(xv, w_at4(w2 + kk)), dot(xv, w_at4(w3 + kk)));
    au += vec4<f32>(dot(xv, w_at4_u(w0 + kk)), dot(xv, w_at4_u(w1 + kk)), dot(xv, w_at4_u(w2 + kk)), dot(xv, w_at4_u(w3 + kk)));
  }
#else
  let xb = row * p.k;
  for (var kk = lid; kk < p.k; kk += 64u) {
    let xv = x[xb + kk];
    ag += xv * vec4<f32>(w_at(w0 + kk), w_at(w1 + kk), w_at(w2 + kk), w_at(w3 + kk));
    au += xv * vec4<f32>(w_at_u(w0 + kk), w_at_u(w1 + kk), w_at_u(w2 + kk), w_at_u(w3 + kk));
  }
#endif
  red_g[lid] = ag;
  red_u[lid] = au;
  workgroupBarrier();
  for (var s = 32u; s > 0u; s >>= 1u) {
    if (lid < s) {
      red_g[lid] += red_g[lid + s];
      red_u[lid] += red_u[lid + s];
    }
    workgroupBarrier();
  }
  if (lid < 4u && o0 + lid < p.m_rows) {
    y[row * p.out_stride + p.out_offset + o0 + lid] = act(red_g[0][lid]) * red_u[0][lid];
  }
}
