// dst[idx[i], :] = src[i, :] over u32 words: half-bit rows written into an f16 table (two halves per
// word) bit for bit. Indices outside 0..rows-1 are skipped; the host makes them distinct.
struct P { n: u32, cols: u32, rows: u32, _pad: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> src: array<u32>;
@group(0) @binding(2) var<storage, read> idx: array<i32>;
@group(0) @binding(3) var<storage, read_write> dst: array<u32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let i = (wid.x + wid.y * nwg.x) * 256u + lid;
  if (i >= p.n * p.cols) { return; }
  let r = idx[i / p.cols];
  if (r < 0 || r >= i32(p.rows)) { return; }
  dst[u32(r) * p.cols + i % p.cols] = src[i];
}
