// Gated feed-forward, register-blocked (prefill, and decode on CPU adapters):
// y[r, o] = act(x[r, :] · G[o, :]) · (x[r, :] · U[o, :]), act SiLU or (GELU) GELU's tanh form, as
// elementwise.wgsl's silu_mul and gelu_mul. matmul_tiled.wgsl's blocking with two accumulators per
// output: each thread a 4-row × 4-output block of G and of U. G is read through the weights prelude,
// U (same dtype and shape, binding 6) through its copy whose names end in _u (kernel-source.ts).
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
  let o0 = (g % p.groups_m) * (4u * OT) + (lid % OT) * 4u;
  if (r0 >= p.n || o0 >= p.m_rows) { return; }
  let rl = p.n - 1u;
  let ol = p.m_rows - 1u;
  let w0 = min(o0, ol) * p.k;
  let w1 = min(o0 + 1u, ol) * p.k;
  let w2 = min(o0 + 2u, ol) * p.k;
  let w3 = min(o0 + 3u, ol) * p.k;
  var g0 = vec4<f32>(0.0);
  var g1 = vec4<f32>(0.0);
  var g2 = vec4<f32>(0.0);
  var g3 = vec4<f32>(0.0);
  var u0 = vec4<f32>(0.0);
  var u1 = vec4<f32>(0.0);
  var u2 = vec4<f32>(0.0);
  var u3 = vec4<f32>(0.0);
#if ${VEC4}
  let k4 = p.k / 4u;
  let x0 = min(r0, rl) * k4;
  let x1 = min(r0 + 1u, rl) * k4;
  let x2 = min(r0 + 2u, rl) * k4;
  let x3 = min(r0 + 3u, rl) * k4;
  for (var kk = 0u; kk < p.k; kk += 4u) {
    let j = kk / 4u;
    let v0 = x[x0 + j];
    let v1 = x[x1 + j];
    let v2 = x[x2 + j];
    let v3 = x[x3 + j];
    let b0 = w_at4(w0 + kk);
    let b1 = w_at4(w1 + kk);
    let b2 = w_at4(w2 + kk);
    let b3 = w_at4(w3 + kk);
    g0 += vec4<f32>(dot(v0, b0), dot(v0, b1), dot(v0, b2), dot(v0, b3));
    g1 += vec4<f32>(dot(v1, b0), dot(v1, b1), dot(v1, b2), dot(v1, b3));
    g2 += vec4<f32>(dot(v2, b0), dot(v2, b1), dot(v2, b2), dot(v2, b3));
    g3 += vec4<f32>(dot(v3, b0), dot(v3, b1), dot(v3, b2), dot(v3, b3));
    let c0 = w_at4_u(w0 + kk);
    let c1 = w_at4_u(w1 + kk);
    let c2 = w_at4_u(w2 + kk);
    let c3 = w_at4_u(w3 + kk);
    u0 += vec4<f32>(dot(v0, c0), dot(v0, c1), dot(v0, c2), dot(v0, c3));
    u1 += vec4<f32>(dot(v1, c0), dot(v1, c1), dot(v1, c2), dot(v1, c3));
    u2 += vec4<f32>(dot(v2, c0), dot(v2, c1), dot(v2, c2), dot(v2, c3));
    u3 += vec4<f32>(dot(v3, c0), dot(v3, c1), dot(v3, c2), dot(v3, c3));
  }
#else
  let x0 = min(r0, rl) * p.k;
  let x1 = min(r0 + 1u, rl) * p.k;
  let x2 = min(r0 + 2u, rl) * p.k;
  let x3 = min(r0 + 3u, rl) * p.k;
  for (var kk = 0u; kk < p.k; kk += 1u) {
    let b = vec4<f32>(w_at(w0 + kk), w_at(w1 + kk), w_at(w2 + kk), w_at(w3 + kk));
    let c = vec4<f32>(w_at_u(w0 + kk), w_at_u(w1 + kk), w_at_u(w2 + kk), w_at_u(w3 + kk));
    g0 += x[x0 + kk] * b;
    g1 += x[x1 + kk] * b;
    g2 += x[x2 + kk] * b;
    g3 += x[x3 + kk] * b;
    u0 += x[x0 + kk] * c;
    u1 += x[x1 + kk] * c;
    u2 += x[x2 + kk] * c;
    u3 += x[x3 + kk] * c;
  }
#endif
  for (var c = 0u; c < 4u; c += 1u) {
    store(r0, o0 + c, g0[c], u0[c]);
    store(r0 + 1u, o0 + c, g1[c], u1[c]);
    store(r0 + 2u, o0 + c, g2[c], u2[c]);
    store(r0 + 3u, o0 + c, g3[c], u3[c]);
  }
}
