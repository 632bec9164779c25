// Peak-FLOP ceiling: each thread runs `iters` rounds of 8 independent vec4 FMAs (64 FLOP per round).
struct P { threads: u32, iters: u32, _a: u32, _b: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read_write> dst: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let i = (wid.x + wid.y * nwg.x) * 256u + lid;
  if (i >= p.threads) { return; }
  let s = f32(i) * 1e-9;
  var a0 = vec4<f32>(s, s + 1.0, s + 2.0, s + 3.0);
  var a1 = a0 + 0.1; var a2 = a0 + 0.2; var a3 = a0 + 0.3;
  var a4 = a0 + 0.4; var a5 = a0 + 0.5; var a6 = a0 + 0.6; var a7 = a0 + 0.7;
  let m = vec4<f32>(0.9999);
  let c = vec4<f32>(1e-4);
  for (var it = 0u; it < p.iters; it += 1u) {
    a0 = fma(a0, m, c); a1 = fma(a1, m, c); a2 = fma(a2, m, c); a3 = fma(a3, m, c);
    a4 = fma(a4, m, c); a5 = fma(a5, m, c); a6 = fma(a6, m, c); a7 = fma(a7, m, c);
  }
  let r = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7;
  dst[i] = r.x + r.y + r.z + r.w;
}
