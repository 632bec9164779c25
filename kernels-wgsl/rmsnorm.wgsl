// Row-wise RMS norm: one workgroup of 64 per row, tree reduction of the sum of squares. With `groups`
// weight rows, row r takes weight row r mod groups (a grouped norm). With CENTER, LayerNorm: the row's
// mean is taken first and the squares are of the values about it; with BIAS, b is added.
struct P { rows: u32, cols: u32, eps: f32, groups: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<f32>;
@group(0) @binding(3) var<storage, read_write> dst: array<f32>;
#if ${BIAS}
@group(0) @binding(4) var<storage, read> bias: array<f32>;
#endif
var<workgroup> red: array<f32, 64>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let row = wid.x + wid.y * nwg.x;
  if (row >= p.rows) { return; }
  let base = row * p.cols;
#if ${CENTER}
  var sum = 0.0;
  for (var c = lid; c < p.cols; c += 64u) { sum += x[base + c]; }
  red[lid] = sum;
  workgroupBarrier();
  for (var s = 32u; s > 0u; s >>= 1u) {
    if (lid < s) { red[lid] += red[lid + s]; }
    workgroupBarrier();
  }
  let mean = red[0] / f32(p.cols);
  // Every thread has read the sum before the slot is reused.
  workgroupBarrier();
#else
  let mean = 0.0;
#endif
  var ss = 0.0;
  for (var c = lid; c < p.cols; c += 64u) { let v = x[base + c] - mean; ss += v * v; }
  red[lid] = ss;
  workgroupBarrier();
  for (var s = 32u; s > 0u; s >>= 1u) {
    if (lid < s) { red[lid] += red[lid + s]; }
    workgroupBarrier();
  }
  let inv = 1.0 / sqrt(red[0] / f32(p.cols) + p.eps);
  let wBase = (row % p.groups) * p.cols;
#if ${BIAS}
  for (var c = lid; c < p.cols; c += 64u) { dst[base + c] = (x[base + c] - mean) * inv * w[wBase + c] + bias[c]; }
#else
  for (var c = lid; c < p.cols; c += 64u) { dst[base + c] = (x[base + c] - mean) * inv * w[wBase + c]; }
#endif
}
