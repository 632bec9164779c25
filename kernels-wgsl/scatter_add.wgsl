// x[index[i]] += values[i] for each i (logit biases and penalties before sampling). The host makes
// the offsets distinct, so no two invocations touch one element; offsets outside x are skipped.
struct P { m: u32, size: u32, _a: u32, _b: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read_write> x: array<f32>;
@group(0) @binding(2) var<storage, read> index: array<i32>;
@group(0) @binding(3) var<storage, read> values: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let i = (wid.x + wid.y * nwg.x) * 256u + lid;
  if (i >= p.m) { return; }
  let o = index[i];
  if (o < 0 || u32(o) >= p.size) { return; }
  x[u32(o)] += values[i];
}
