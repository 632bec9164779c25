// Repetition penalty: wherever bit v of row k's bits is 1 (a token the request's prompt or output
// holds), logits[rows[k], v] is divided by factors[k] if positive and multiplied by it if not. One
// invocation per bit word, as mask_logits.wgsl. The host makes the rows distinct; rows outside
// logits are skipped.
struct P { m: u32, n: u32, vocab: u32, words: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read_write> logits: array<f32>;
@group(0) @binding(2) var<storage, read> rows: array<i32>;
@group(0) @binding(3) var<storage, read> bits: array<u32>;
@group(0) @binding(4) var<storage, read> factors: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let i = (wid.x + wid.y * nwg.x) * 256u + lid;
  if (i >= p.m * p.words) { return; }
  let k = i / p.words;
  let w = i % p.words;
  let row = rows[k];
  if (row < 0 || u32(row) >= p.n) { return; }
  let word = bits[i];
  if (word == 0u) { return; }
  let f = factors[k];
  let base = u32(row) * p.vocab;
  let first = w * 32u;
  let last = min(first + 32u, p.vocab);
  for (var v = first; v < last; v++) {
    if (((word >> (v - first)) & 1u) == 1u) {
      let x = logits[base + v];
      logits[base + v] = select(x * f, x / f, x > 0.0);
    }
  }
}
