// Penalties of the tokens a request sampled on the device since the host counted its tokens
// (multi-step decoding): row k first records sampled[rows[k]] as history[k, count - 1], then for
// each distinct token t of history[k, 0..count-1], c times there: the repetition penalty where t
// is not in `seen` (the prompt and output the host counted), then minus frequency · c, and minus
// presence where t is not in `present` (the output the host counted). One invocation per row: a
// row holds at most a few tokens. The host makes the rows distinct; rows outside logits are skipped.
struct P { m: u32, n: u32, vocab: u32, words: u32, h: u32, count: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read_write> logits: array<f32>;
@group(0) @binding(2) var<storage, read> rows: array<i32>;
@group(0) @binding(3) var<storage, read> sampled: array<i32>;
@group(0) @binding(4) var<storage, read_write> history: array<i32>;
@group(0) @binding(5) var<storage, read> seen: array<u32>;
@group(0) @binding(6) var<storage, read> present: array<u32>;
// (repetition factor, presence, frequency) per row.
@group(0) @binding(7) var<storage, read> params: array<f32>;

fn has(bits_at: u32, t: u32, which: u32) -> bool {
  var word: u32;
  if (which == 0u) { word = seen[bits_at + (t >> 5u)]; } else { word = present[bits_at + (t >> 5u)]; }
  return ((word >> (t & 31u)) & 1u) == 1u;
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let k = (wid.x + wid.y * nwg.x) * 64u + lid;
  if (k >= p.m) { return; }
  let row = rows[k];
  if (row < 0 || u32(row) >= p.n) { return; }
  let at = k * p.h;
  history[at + p.count - 1u] = sampled[u32(row)];
  let factor = params[k * 3u];
  let presence = params[k * 3u + 1u];
  let frequency = params[k * 3u + 2u];
  let base = u32(row) * p.vocab;
  for (var j = 0u; j < p.count; j++) {
    let tj = history[at + j];
    if (tj < 0 || u32(tj) >= p.vocab) { continue; }
    var first = true;
    var c = 0u;
    for (var i = 0u; i < p.count; i++) {
      if (history[at + i] == tj) {
        if (i < j) { first = false; }
        c++;
      }
    }
    if (!first) { continue; }
    let t = u32(tj);
    var x = logits[base + t];
    if (!has(k * p.words, t, 0u)) { x = select(x * factor, x / factor, x > 0.0); }
    var delta = -(frequency * f32(c));
    if (!has(k * p.words, t, 1u)) { delta = delta - presence; }
    logits[base + t] = x + delta;
  }
}
