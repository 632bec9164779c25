// Row-wise softmax: one workgroup of 64 per row (max, then sum of exp, then scale).
struct P { rows: u32, cols: u32, _a: u32, _b: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> dst: array<f32>;
var<workgroup> red: array<f32, 64>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let row = wid.x + wid.y * nwg.x;
  if (row >= p.rows) { return; }
  let base = row * p.cols;
  var m = -3.0e38;
  for (var c = lid; c < p.cols; c += 64u) { m = max(m, x[base + c]); }
  red[lid] = m;
  workgroupBarrier();
  for (var s = 32u; s > 0u; s >>= 1u) {
    if (lid < s) { red[lid] = max(red[lid], red[lid + s]); }
    workgroupBarrier();
  }
  let mx = red[0];
  workgroupBarrier();
  var sum = 0.0;
  for (var c = lid; c < p.cols; c += 64u) { sum += exp(x[base + c] - mx); }
  red[lid] = sum;
  workgroupBarrier();
  for (var s = 32u; s > 0u; s >>= 1u) {
    if (lid < s) { red[lid] += red[lid + s]; }
    workgroupBarrier();
  }
  let inv = 1.0 / red[0];
  for (var c = lid; c < p.cols; c += 64u) { dst[base + c] = exp(x[base + c] - mx) * inv; }
}
