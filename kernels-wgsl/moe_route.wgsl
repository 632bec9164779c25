// Expert routing: per row of router logits, the k largest (ties to the lower index) and their
// softmax probabilities, over all experts or renormalised over the k. One invocation per row: a
// router row is a few hundred logits, and k passes over it cost less than a shared-memory sort.
// Each pass takes the largest logit ordered strictly after the previous pick in (logit desc,
// index asc), so no per-row "taken" array is needed.
struct P { n: u32, experts: u32, k: u32, normalize: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> logits: array<f32>;
@group(0) @binding(2) var<storage, read_write> ids: array<i32>;
@group(0) @binding(3) var<storage, read_write> weights: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let t = (wid.x + wid.y * nwg.x) * 64u + lid;
  if (t >= p.n) { return; }
  let base = t * p.experts;
  var mx = logits[base];
  for (var e = 1u; e < p.experts; e++) { mx = max(mx, logits[base + e]); }
  var total = 0.0;
  for (var e = 0u; e < p.experts; e++) { total += exp(logits[base + e] - mx); }
  var prev_l = 0.0;
  var prev_i = -1;
  var picked = 0.0;
  for (var j = 0u; j < p.k; j++) {
    var best = -1;
    var best_l = 0.0;
    for (var e = 0u; e < p.experts; e++) {
      let l = logits[base + e];
      let after = prev_i < 0 || l < prev_l || (l == prev_l && i32(e) > prev_i);
      if (after && (best < 0 || l > best_l)) { best = i32(e); best_l = l; }
    }
    // Only NaN logits leave nothing to pick; expert 0 keeps the ids in range.
    if (best < 0) { best = 0; best_l = mx; }
    ids[t * p.k + j] = best;
    let pj = exp(best_l - mx);
    weights[t * p.k + j] = pj;
    picked += pj;
    prev_l = best_l;
    prev_i = best;
  }
  let denominator = select(total, picked, p.normalize != 0u);
  for (var j = 0u; j < p.k; j++) { weights[t * p.k + j] /= denominator; }
}
