// out[t, c] = Σ_j weights[t, j] · y[t·k + j, c], summed in j order.
struct P { n: u32, k: u32, d: u32, _pad: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> y: array<f32>;
@group(0) @binding(2) var<storage, read> weights: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let i = (wid.x + wid.y * nwg.x) * 256u + lid;
  if (i >= p.n * p.d) { return; }
  let t = i / p.d;
  let c = i % p.d;
  var acc = 0.0;
  for (var j = 0u; j < p.k; j++) {
    let r = t * p.k + j;
    acc += weights[r] * y[r * p.d + c];
  }
  out[i] = acc;
}
