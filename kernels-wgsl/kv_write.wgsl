// Scatters k, v [n, row] into the paged caches at flat slots; slots outside the cache are skipped.
struct P { n: u32, row: u32, capacity: u32, _a: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> k: array<f32>;
@group(0) @binding(2) var<storage, read> v: array<f32>;
@group(0) @binding(3) var<storage, read> slots: array<i32>;
@group(0) @binding(4) var<storage, read_write> kc: array<f32>;
@group(0) @binding(5) var<storage, read_write> vc: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let i = (wid.x + wid.y * nwg.x) * 256u + lid;
  if (i >= p.n * p.row) { return; }
  let t = i / p.row;
  let s = slots[t];
  if (s < 0 || u32(s) >= p.capacity) { return; }
  let dst = u32(s) * p.row + i % p.row;
  kc[dst] = k[i];
  vc[dst] = v[i];
}
