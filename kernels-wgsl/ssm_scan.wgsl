// Mamba-2's selective state-space scan over each sequence's rows (Backend.ssmScan). xbc [n, width]
// holds each row's x (heads·hd), B (groups·ds) and C (groups·ds); dt [n, heads]; a, d, dt_bias
// [heads]; state [slots, heads, hd, ds] (read and written in place); seqs [numSeqs, 4] = (first row,
// row count, slot, fresh); dst [n, heads·hd].
//
// Row i of a head's state S [hd, ds] evolves on its own: per row of the sequence, with
// delta = softplus(dt + dt_bias) and decay = exp(delta·a),
//   S[i, :] ← S[i, :]·decay + delta·x[i]·B;  out[i] = S[i, :]·C + d·x[i].
// One workgroup per (sequence, head, block of WG state rows), one invocation per row, each holding its
// row in a private array of up to DSM values (the host picks the bucket, ds ≤ DSM). Each step the
// workgroup stages the head's group's B and C in workgroup memory. A sequence whose rows or slot are
// out of range is skipped (the host checks uploaded tables first).
const WG = 64u;
const DSM = ${DSM}u;
struct P {
  n: u32, width: u32, heads: u32, hd: u32,
  ds: u32, groups: u32, slots: u32, num_seqs: u32,
  blocks: u32, _a: u32, _b: u32, _c: u32,
}
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> xbc: array<f32>;
@group(0) @binding(2) var<storage, read> dt: array<f32>;
@group(0) @binding(3) var<storage, read> a: array<f32>;
@group(0) @binding(4) var<storage, read> d: array<f32>;
@group(0) @binding(5) var<storage, read> dt_bias: array<f32>;
@group(0) @binding(6) var<storage, read_write> state: array<f32>;
@group(0) @binding(7) var<storage, read> seqs: array<i32>;
@group(0) @binding(8) var<storage, read_write> dst: array<f32>;

var<workgroup> bs: array<f32, DSM>;
var<workgroup> cs: array<f32, DSM>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let g = wid.x + wid.y * nwg.x;
  let per_seq = p.heads * p.blocks;
  if (g >= p.num_seqs * per_seq) { return; }
  let s = g / per_seq;
  let h = (g % per_seq) / p.blocks;
  let i = (g % p.blocks) * WG + lid;
  let owns_row = i < p.hd;
  let first = seqs[s * 4u];
  let count = seqs[s * 4u + 1u];
  let slot = seqs[s * 4u + 2u];
  let fresh = seqs[s * 4u + 3u] != 0;
  if (first < 0 || count < 1 || u32(first) + u32(count) > p.n || slot < 0 || u32(slot) >= p.slots) { return; }
  let ds = p.ds;
  let grp = h / (p.heads / p.groups);
  let b_at = p.heads * p.hd + grp * ds;
  let c_at = p.heads * p.hd + p.groups * ds + grp * ds;
  let s_at = ((u32(slot) * p.heads + h) * p.hd + i) * ds;
  var row: array<f32, DSM>;
  for (var j = 0u; j < ds; j += 1u) { row[j] = 0.0; }
  if (owns_row && !fresh) {
    for (var j = 0u; j < ds; j += 1u) { row[j] = state[s_at + j]; }
  }
  let rate = a[h];
  let bias = dt_bias[h];
  let skip = d[h];
  for (var t = 0u; t < u32(count); t += 1u) {
    let r = u32(first) + t;
    let xb = r * p.width;
    workgroupBarrier(); // the previous row's B and C are read by everyone
    for (var j = lid; j < ds; j += WG) {
      bs[j] = xbc[xb + b_at + j];
      cs[j] = xbc[xb + c_at + j];
    }
    workgroupBarrier();
    let v = dt[r * p.heads + h] + bias;
    // softplus as ggml's: the identity past 20 (log(1 + e^v) overflowing there is discarded).
    let delta = select(log(1.0 + exp(v)), v, v > 20.0);
    let decay = exp(delta * rate);
    if (owns_row) {
      let x = xbc[xb + h * p.hd + i];
      let xd = x * delta;
      var y = 0.0;
      for (var j = 0u; j < ds; j += 1u) {
        let u = row[j] * decay + bs[j] * xd;
        row[j] = u;
        y += u * cs[j];
      }
      dst[r * p.heads * p.hd + h * p.hd + i] = y + skip * x;
    }
  }
  if (owns_row) {
    for (var j = 0u; j < ds; j += 1u) { state[s_at + j] = row[j]; }
  }
}
