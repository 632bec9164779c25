// The experts' gated feed-forward for many rows (Backend.matmulExpertsGlu): matmul_experts_tiled.wgsl
// with a second stacked weight U (same dtype, shape and row chunks; binding 6, read through the
// prelude's copy whose names end in _u: kernel-source.ts), y = act(x · G[e]) · (x · U[e]), act SiLU or
// (GELU) GELU's tanh form. Each thread's 4 × 4 block of sums is 4 rows × (outputs o, o+1 of G and
// the same of U): a plain tile's registers (matmul_glu_tiled.wgsl says why), 16 outputs a workgroup.
const OT = 8u;
struct P { inner: u32, out: u32, k: u32, per_expert_input: u32, row_start: u32, chunk_rows: u32, groups_m: u32, _a: u32 }
@group(0) @binding(0) var<uniform> p: P;
#if ${VEC4}
@group(0) @binding(2) var<storage, read> x: array<vec4<f32>>;
#else
@group(0) @binding(2) var<storage, read> x: array<f32>;
#endif
@group(0) @binding(3) var<storage, read> perm: array<u32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;
@group(0) @binding(5) var<storage, read> tiles: array<u32>;

fn act(g: f32) -> f32 {
#if ${GELU}
  return g / (1.0 + exp(-(1.5957691216057308 * (g + 0.044715 * g * g * g))));
#else
  return g / (1.0 + exp(-g));
#endif
}

// The x row of output row r: r itself, or its token's when every expert shares the token's input.
fn x_row(r: u32) -> u32 { return select(r / p.k, r, p.per_expert_input != 0u); }

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let g = wid.x + wid.y * nwg.x;
  let t = g / p.groups_m;
  if (t >= tiles[0]) { return; }
  let e = tiles[1u + 3u * t];
  let first = tiles[2u + 3u * t];
  let count = tiles[3u + 3u * t];
  let i0 = (lid / OT) * 4u;
  let o0 = (g % p.groups_m) * (2u * OT) + (lid % OT) * 2u;
  if (i0 >= count || o0 >= p.out) { return; }
  let g0 = e * p.out + o0;
  let chunk_end = p.row_start + p.chunk_rows;
  if (g0 + 1u < p.row_start || g0 >= chunk_end) { return; }
  let lo = p.row_start;
  let hi = chunk_end - 1u;
  let w0 = (clamp(g0, lo, hi) - lo) * p.inner;
  let w1 = (clamp(g0 + 1u, lo, hi) - lo) * p.inner;
  let last = first + count - 1u;
  let r0 = perm[min(first + i0, last)];
  let r1 = perm[min(first + i0 + 1u, last)];
  let r2 = perm[min(first + i0 + 2u, last)];
  let r3 = perm[min(first + i0 + 3u, last)];
  var a0 = vec4<f32>(0.0);
  var a1 = vec4<f32>(0.0);
  var a2 = vec4<f32>(0.0);
  var a3 = vec4<f32>(0.0);
#if ${VEC4}
  let k4 = p.inner / 4u;
  let x0 = x_row(r0) * k4;
  let x1 = x_row(r1) * k4;
  let x2 = x_row(r2) * k4;
  let x3 = x_row(r3) * k4;
  for (var kk = 0u; kk < p.inner; kk += 4u) {
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
  let x0 = x_row(r0) * p.inner;
  let x1 = x_row(r1) * p.inner;
  let x2 = x_row(r2) * p.inner;
  let x3 = x_row(r3) * p.inner;
  for (var kk = 0u; kk < p.inner; kk += 1u) {
    let b = vec4<f32>(w_at(w0 + kk), w_at(w1 + kk), w_at_u(w0 + kk), w_at_u(w1 + kk));
    a0 += x[x0 + kk] * b;
    a1 += x[x1 + kk] * b;
    a2 += x[x2 + kk] * b;
    a3 += x[x3 + kk] * b;
  }
#endif
  for (var c = 0u; c < 2u; c += 1u) {
    let gc = g0 + c;
    if (o0 + c >= p.out || gc < p.row_start || gc >= chunk_end) { continue; }
    let col = o0 + c;
    if (i0 < count) { y[r0 * p.out + col] = act(a0[c]) * a0[c + 2u]; }
    if (i0 + 1u < count) { y[r1 * p.out + col] = act(a1[c]) * a1[c + 2u]; }
    if (i0 + 2u < count) { y[r2 * p.out + col] = act(a2[c]) * a2[c + 2u]; }
    if (i0 + 3u < count) { y[r3 * p.out + col] = act(a3[c]) * a3[c + 2u]; }
  }
}
