// Register-blocked matmul: each thread accumulates a 4-row × 4-output block in registers; the 64
// threads of a workgroup form RT row groups × (64 / RT) output groups, so a workgroup covers 4·RT
// rows × 256/RT outputs (RT = 8 for prefill; fewer for small batches so no thread idles). No shared
// memory: on llvmpipe this beats shared-memory tiles, and on GPUs neighbours share cache lines.
const RT = ${RT}u;
const OT = 64u / RT;
struct P { n: u32, k: u32, m_rows: u32, out_stride: u32, out_offset: u32, groups_m: u32, _a: u32, _b: u32 }
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
// A residual added as the outputs are written (Backend.matmulAdd), [n, out_stride] as y.
@group(0) @binding(5) var<storage, read> res: array<f32>;
#endif

fn store(r: u32, o: u32, v: f32) {
  if (r < p.n && o < p.m_rows) {
    let col = p.out_offset + o;
    var out = v;
#if ${HAS_BIAS}
    out += bias[col];
#endif
#if ${HAS_RES}
    out += res[r * p.out_stride + col];
#endif
    y[r * p.out_stride + col] = out;
  }
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
    let b2 = w_at4(w2 + kk);
    let b3 = w_at4(w3 + kk);
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
    let b = vec4<f32>(w_at(w0 + kk), w_at(w1 + kk), w_at(w2 + kk), w_at(w3 + kk));
    a0 += x[x0 + kk] * b;
    a1 += x[x1 + kk] * b;
    a2 += x[x2 + kk] * b;
    a3 += x[x3 + kk] * b;
  }
#endif
  for (var c = 0u; c < 4u; c += 1u) {
    store(r0, o0 + c, a0[c]);
    store(r0 + 1u, o0 + c, a1[c]);
    store(r0 + 2u, o0 + c, a2[c]);
    store(r0 + 3u, o0 + c, a3[c]);
  }
}
