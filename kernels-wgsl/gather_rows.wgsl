// out[i, :] = x[idx[i], :] (with SCATTER the reverse, x[idx[i], :] = src[i, :], indices distinct);
// outside 0..rows-1 a gathered row is zero (as on CUDA; unwritten, it would hold stale pool data)
// and a scattered one is skipped. T is f32, or u32 to move the words of an f16 table (two
// halves per word) bit for bit.
struct P { n: u32, cols: u32, rows: u32, _pad: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> src: array<${T}>;
@group(0) @binding(2) var<storage, read> idx: array<i32>;
@group(0) @binding(3) var<storage, read_write> dst: array<${T}>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let i = (wid.x + wid.y * nwg.x) * 256u + lid;
  if (i >= p.n * p.cols) { return; }
  let r = idx[i / p.cols];
#if ${SCATTER}
  if (r < 0 || r >= i32(p.rows)) { return; }
  dst[u32(r) * p.cols + i % p.cols] = src[i];
#else
  if (r < 0 || r >= i32(p.rows)) { dst[i] = ${T}(0); return; }
  dst[i] = src[u32(r) * p.cols + i % p.cols];
#endif
}
