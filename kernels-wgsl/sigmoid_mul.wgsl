// sigmoid(gate) · x, elementwise, f32 (Backend.sigmoidMul: Qwen3.5's gated attention output).
// 1 / (1 + exp(-g)) saturates cleanly: exp overflowing to +inf gives 0, never NaN.
struct P { n: u32, _a: u32, _b: u32, _c: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> gate: array<f32>;
@group(0) @binding(2) var<storage, read> x: array<f32>;
@group(0) @binding(3) var<storage, read_write> dst: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let i = (wid.x + wid.y * nwg.x) * 256u + lid;
  if (i >= p.n) { return; }
  dst[i] = x[i] / (1.0 + exp(-gate[i]));
}
