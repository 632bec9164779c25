// The gated delta rule over each sequence's rows (Backend.gatedDeltaNet). x [n, width] holds each
// row's q (numKHeads·dk), k (numKHeads·dk) and v (numVHeads·dv); alpha, beta [n, nv]; decay, dt_bias
// [nv]; state [slots, nv, dk, dv] (read and written in place); seqs [numSeqs, 4] = (first row, row
// count, slot, fresh); dst [n, nv·dv].
//
// Column j of a head's state S [dk, dv] evolves on its own: per row, with q and k L2-normed (q also
// times `scale`), g = decay·softplus(alpha + dt_bias) and b = sigmoid(beta),
//   S[:, j] ← S[:, j]·e^g;  u = (v[j] − S[:, j]·k)·b;  S[:, j] += k·u;  out[j] = S[:, j]·q.
// One workgroup per (sequence, value head, block of WG columns), one invocation per column, each
// holding its column in a private array of up to DKM values (the host picks the bucket, dk ≤ DKM).
// Each row the workgroup stages the raw q and k of the head's key head in workgroup memory and sums
// their squares together; the norms are applied as scalars. A sequence whose rows or slot are out of
// range is skipped (the host checks uploaded tables first).
const WG = 64u;
const DKM = ${DKM}u;
struct P {
  n: u32, width: u32, nk: u32, nv: u32,
  dk: u32, dv: u32, slots: u32, num_seqs: u32,
  blocks: u32, tiled: u32, eps: f32, scale: f32,
}
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> alpha: array<f32>;
@group(0) @binding(3) var<storage, read> beta: array<f32>;
@group(0) @binding(4) var<storage, read> decay: array<f32>;
@group(0) @binding(5) var<storage, read> dt_bias: array<f32>;
@group(0) @binding(6) var<storage, read_write> state: array<f32>;
@group(0) @binding(7) var<storage, read> seqs: array<i32>;
@group(0) @binding(8) var<storage, read_write> dst: array<f32>;

var<workgroup> qs: array<f32, DKM>;
var<workgroup> ks: array<f32, DKM>;
var<workgroup> red: array<vec2<f32>, WG>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let g = wid.x + wid.y * nwg.x;
  let per_seq = p.nv * p.blocks;
  if (g >= p.num_seqs * per_seq) { return; }
  let s = g / per_seq;
  let h = (g % per_seq) / p.blocks;
  let j = (g % p.blocks) * WG + lid;
  let owns_col = j < p.dv;
  let first = seqs[s * 4u];
  let count = seqs[s * 4u + 1u];
  let slot = seqs[s * 4u + 2u];
  let fresh = seqs[s * 4u + 3u] != 0;
  if (first < 0 || count < 1 || u32(first) + u32(count) > p.n || slot < 0 || u32(slot) >= p.slots) { return; }
  let dk = p.dk;
  let dv = p.dv;
  let kh = select(h / (p.nv / p.nk), h % p.nk, p.tiled != 0u);
  let q_at = kh * dk;
  let k_at = p.nk * dk + kh * dk;
  let v_at = 2u * p.nk * dk + h * dv + j;
  let s_at = (u32(slot) * p.nv + h) * dk * dv + j;
  var col: array<f32, DKM>;
  for (var i = 0u; i < dk; i += 1u) { col[i] = 0.0; }
  if (owns_col && !fresh) {
    for (var i = 0u; i < dk; i += 1u) { col[i] = state[s_at + i * dv]; }
  }
  let dec = decay[h];
  let bias = dt_bias[h];
  for (var t = 0u; t < u32(count); t += 1u) {
    let row = u32(first) + t;
    let xb = row * p.width;
    workgroupBarrier(); // the previous row's q and k are read by everyone
    var part = vec2<f32>(0.0, 0.0);
    for (var i = lid; i < dk; i += WG) {
      let qv = x[xb + q_at + i];
      let kv = x[xb + k_at + i];
      qs[i] = qv;
      ks[i] = kv;
      part += vec2<f32>(qv * qv, kv * kv);
    }
    red[lid] = part;
    workgroupBarrier();
    var sums = vec2<f32>(0.0, 0.0);
    for (var l = 0u; l < WG; l += 1u) { sums += red[l]; }
    let inv_q = p.scale / max(sqrt(sums.x), p.eps);
    let inv_k = 1.0 / max(sqrt(sums.y), p.eps);
    let a = alpha[row * p.nv + h] + bias;
    // softplus as ggml's: the identity past 20 (log(1 + e^a) overflowing there is discarded).
    let decayed = exp(dec * select(log(1.0 + exp(a)), a, a > 20.0));
    let b = 1.0 / (1.0 + exp(-beta[row * p.nv + h]));
    if (owns_col) {
      var sk = 0.0;
      for (var i = 0u; i < dk; i += 1u) { sk += col[i] * ks[i]; }
      let uk = (x[xb + v_at] - decayed * sk * inv_k) * b * inv_k;
      var o = 0.0;
      for (var i = 0u; i < dk; i += 1u) {
        let v = col[i] * decayed + ks[i] * uk;
        col[i] = v;
        o += v * qs[i];
      }
      dst[row * p.nv * dv + h * dv + j] = o * inv_q;
    }
  }
  if (owns_col) {
    for (var i = 0u; i < dk; i += 1u) { state[s_at + i * dv] = col[i]; }
  }
}
