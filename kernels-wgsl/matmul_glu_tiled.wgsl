// Gated feed-forward, register-blocked (prefill, and decode on CPU adapters):
// y[r, o] = act(x[r, :] · G[o, :]) · (x[r, :] · U[o, :]), act SiLU or (GELU) GELU's tanh form, as
// elementwise.wgsl's silu_mul and gelu_mul. matmul_tiled.wgsl's blocking, each thread's 4 × 4 block
// of sums being 4 rows × (outputs o, o+1 of G and the same of U): the same registers as a plain
// matmul's (8 accumulators a thread measured 1.5× slower than two matmuls on llvmpipe, spilled), half
// the outputs a thread. G is read through the weights prelude, U (same dtype and shape, binding 6)
// through its copy whose names end in _u (kernel-source.ts).
const RT = ${RT}u;
const OT = 64u / RT;
struct P { n: u32, k: u32, m_rows: u32, out_stride: u32, out_offset: u32, groups_m: u32, _a: u32, _b: u32 }
@group(0) @binding(0) var<uniform> p: P;
#if ${VEC4}
@group(0) @binding(2) var<storage, read> x: array<vec4<f32>>;
#else
@group(0) @binding(2) var<storage, read> x: array<f32>;
#endif
@group(0) @binding(4) var<storage, read_write> y: array<f32>;

fn act(g: f32) -> f32 {
#if ${GELU}
  // 0.5·g·(1 + tanh(z)) written as g·sigmoid(2z), as elementwise.wgsl has it.
  return g / (1.0 + exp(-(1.5957691216057308 * (g + 0.044715 * g * g * g))));
#else
  return g / (1.0 + exp(-g));
#endif
}

fn store(r: u32, o: u32, g: f32, u: f32) {
  if (r < p.n && o < p.m_rows) { y[r * p.out_stride + p.out_offset + o] = act(g) * u; }
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let g = wid.x + wid.y * nwg.x;
  let r0 = (g / p.groups_m) * (4u * RT) + (lid / OT) * 4u;
  let o0 = (g % p.groups_m) * (2u * OT) + (lid % OT) * 2u;
  if (r0 >= p.n || o0 >= p.m_rows) { return; }
  let rl = p.n - 1u;
  let ol = p.m_rows - 1u;
  let w0 = min(o0, ol) * p.k;
  let w1 = min(o0 + 1u, ol) * p.k;
  // Row r's sums: (G·x for o0, o0+1, U·x for o0, o0+1).
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
    let b0 = w_at4(w0 + kk);
    let b1 = w_at4(w1 + kk);
    let b2 = w_at4_u(w0 + kk);
    let b3 = w_at4_u(w1 + kk);
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
    let b = vec4<f32>(w_at(w0 + kk), w_at(w1 + kk), w_at_u(w0 + kk), w_at_u(w1 + kk));
    a0 += x[x0 + kk] * b;
    a1 += x[x1 + kk] * b;
    a2 += x[x2 + kk] * b;
    a3 += x[x3 + kk] * b;
  }
#endif
  for (var c = 0u; c < 2u; c += 1u) {
    store(r0, o0 + c, a0[c], a0[c + 2u]);
    store(r0 + 1u, o0 + c, a1[c], a1[c + 2u]);
    store(r0 + 2u, o0 + c, a2[c], a2[c + 2u]);
    store(r0 + 3u, o0 + c, a3[c], a3[c + 2u]);
  }
}
