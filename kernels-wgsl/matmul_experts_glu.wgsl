// The experts' gated feed-forward, GEMV-shaped (Backend.matmulExpertsGlu): y[r, o] =
// act(x[xr, :] · G[e, o, :]) · (x[xr, :] · U[e, o, :]) with e = ids[r], xr as in matmul_experts.wgsl,
// act SiLU or (GELU) GELU's tanh form, as elementwise.wgsl's. matmul_experts.wgsl with a second
// stacked weight U (same dtype, shape and row chunks; binding 6, read through the prelude's copy
// whose names end in _u: kernel-source.ts) and a sum for each. This dispatch covers one chunk of both.
struct P { rows: u32, inner: u32, out: u32, k: u32, per_expert_input: u32, experts: u32, row_start: u32, chunk_rows: u32, groups_per_row: u32, _a: u32, _b: u32, _c: u32 }
@group(0) @binding(0) var<uniform> p: P;
#if ${VEC4}
@group(0) @binding(2) var<storage, read> x: array<vec4<f32>>;
#else
@group(0) @binding(2) var<storage, read> x: array<f32>;
#endif
@group(0) @binding(3) var<storage, read> ids: array<i32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;
var<workgroup> red: array<vec4<f32>, 64>;
var<workgroup> red_u: array<vec4<f32>, 64>;
var<workgroup> expert: u32;

fn act(g: f32) -> f32 {
#if ${GELU}
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
  if (row >= p.rows) { return; }
  // The expert is read once and shared: workgroupUniformLoad makes it uniform, so the chunk test
  // below may return before the barriers.
  if (lid == 0u) { expert = u32(clamp(ids[row], 0, i32(p.experts) - 1)); }
  let e = workgroupUniformLoad(&expert);
  let o0 = (g % p.groups_per_row) * 4u;
  let g0 = e * p.out + o0;
  let chunk_end = p.row_start + p.chunk_rows;
  if (g0 + 3u < p.row_start || g0 >= chunk_end) { return; }
  var w: array<u32, 4>;
  var ok: array<bool, 4>;
  for (var i = 0u; i < 4u; i++) {
    let gi = g0 + i;
    ok[i] = o0 + i < p.out && gi >= p.row_start && gi < chunk_end;
    w[i] = (clamp(gi, p.row_start, chunk_end - 1u) - p.row_start) * p.inner;
  }
  let xr = select(row / p.k, row, p.per_expert_input != 0u);
  var acc = vec4<f32>(0.0);
  var acc_u = vec4<f32>(0.0);
#if ${VEC4}
  let xb = xr * (p.inner / 4u);
  for (var kk = lid * 4u; kk < p.inner; kk += 256u) {
    let xv = x[xb + kk / 4u];
    acc += vec4<f32>(dot(xv, w_at4(w[0] + kk)), dot(xv, w_at4(w[1] + kk)), dot(xv, w_at4(w[2] + kk)), dot(xv, w_at4(w[3] + kk)));
    acc_u += vec4<f32>(dot(xv, w_at4_u(w[0] + kk)), dot(xv, w_at4_u(w[1] + kk)), dot(xv, w_at4_u(w[2] + kk)), dot(xv, w_at4_u(w[3] + kk)));
  }
#else
  let xb = xr * p.inner;
  for (var kk = lid; kk < p.inner; kk += 64u) {
    let xv = x[xb + kk];
    acc += xv * vec4<f32>(w_at(w[0] + kk), w_at(w[1] + kk), w_at(w[2] + kk), w_at(w[3] + kk));
    acc_u += xv * vec4<f32>(w_at_u(w[0] + kk), w_at_u(w[1] + kk), w_at_u(w[2] + kk), w_at_u(w[3] + kk));
  }
#endif
  red[lid] = acc;
  red_u[lid] = acc_u;
  workgroupBarrier();
  for (var s = 32u; s > 0u; s >>= 1u) {
    if (lid < s) {
      red[lid] += red[lid + s];
      red_u[lid] += red_u[lid + s];
    }
    workgroupBarrier();
  }
  if (lid < 4u && ok[lid]) {
    y[row * p.out + o0 + lid] = act(red[0][lid]) * red_u[0][lid];
  }
}
