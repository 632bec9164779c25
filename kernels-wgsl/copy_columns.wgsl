// dst[r, dst_offset + c] = src[r, src_offset + c] for r < rows, c < width: a column slice of a
// row-major matrix, or one half of a concatenation along the last dim (strides in elements).
struct P { rows: u32, width: u32, src_stride: u32, src_offset: u32, dst_stride: u32, dst_offset: u32, _p0: u32, _p1: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> src: array<f32>;
@group(0) @binding(2) var<storage, read_write> dst: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let i = (wid.x + wid.y * nwg.x) * 256u + lid;
  if (i >= p.rows * p.width) { return; }
  let r = i / p.width;
  let c = i % p.width;
  dst[r * p.dst_stride + p.dst_offset + c] = src[r * p.src_stride + p.src_offset + c];
}
