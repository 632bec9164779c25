// out[i, c] = table[ids[i], c] as f32, for the rows of one weight chunk [row_start, row_start + row_count).
// An id outside the table's `rows` gives a zero row (as on CUDA), written by the first chunk's
// dispatch alone: left unwritten it would hold whatever its recycled buffer held before.
struct P { n: u32, cols: u32, row_start: u32, row_count: u32, rows: u32, _a: u32, _b: u32, _c: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(2) var<storage, read> ids: array<i32>;
@group(0) @binding(3) var<storage, read_write> dst: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let i = (wid.x + wid.y * nwg.x) * 256u + lid;
  if (i >= p.n * p.cols) { return; }
  let r = i / p.cols;
  let c = i % p.cols;
  let id = ids[r];
  if (id < 0 || id >= i32(p.rows)) {
    if (p.row_start == 0u) { dst[i] = 0.0; }
    return;
  }
  let local = id - i32(p.row_start);
  if (local < 0 || local >= i32(p.row_count)) { return; }
  dst[i] = w_at(u32(local) * p.cols + c);
}
