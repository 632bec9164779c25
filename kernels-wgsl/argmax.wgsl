// Row-wise argmax (lowest index wins ties): one workgroup of 64 per row. NaN is never the max (as in
// the reference and CUDA), found from its bits: WGSL lets a compiler assume no NaN in comparisons.
// A row of NaN only gives 0.
struct P { rows: u32, cols: u32, _a: u32, _b: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> dst: array<i32>;
var<workgroup> rv: array<f32, 64>;
var<workgroup> ri: array<u32, 64>;

fn is_nan(v: f32) -> bool { return (bitcast<u32>(v) & 0x7fffffffu) > 0x7f800000u; }

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let row = wid.x + wid.y * nwg.x;
  if (row >= p.rows) { return; }
  let base = row * p.cols;
  var bv = -3.0e38;
  var bi = 0xffffffffu;
  for (var c = lid; c < p.cols; c += 64u) {
    let v = x[base + c];
    if (!is_nan(v) && (bi == 0xffffffffu || v > bv)) { bv = v; bi = c; }
  }
  rv[lid] = bv;
  ri[lid] = bi;
  workgroupBarrier();
  for (var s = 32u; s > 0u; s >>= 1u) {
    if (lid < s) {
      let ov = rv[lid + s];
      let oi = ri[lid + s];
      let mine = ri[lid];
      if (oi != 0xffffffffu && (mine == 0xffffffffu || ov > rv[lid] || (ov == rv[lid] && oi < mine))) {
        rv[lid] = ov;
        ri[lid] = oi;
      }
    }
    workgroupBarrier();
  }
  if (lid == 0u) { dst[row] = select(i32(ri[0]), 0, ri[0] == 0xffffffffu); }
}
