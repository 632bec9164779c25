// Expert routing: per row of router logits, the k experts with the highest selection scores (ties
// to the lower index) and their weights: probabilities by softmax over the row or by each logit's
// sigmoid (SIGMOID), renormalised over the k (normalize), times scale. The selection score is the
// logit, which both gatings keep in order (so f32 rounding of the probabilities cannot reorder), or
// with a selection bias (BIAS) the probability plus the expert's bias. One invocation per row: a
// router row is a few hundred logits, and k passes over it cost less than a shared-memory sort.
// Each pass takes the largest score ordered strictly after the previous pick in (score desc, index
// asc), so no per-row "taken" array is needed. GROUPED (DeepSeek V3's grouped top-k): scores are
// probabilities (+ bias), each of `groups` consecutive groups scores the sum of its two best, and
// only experts of the `groups_used` best groups (a bit mask, ties to the lower group) are picked.
struct P { n: u32, experts: u32, k: u32, normalize: u32, scale: f32, groups: u32, groups_used: u32, _p2: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> logits: array<f32>;
@group(0) @binding(2) var<storage, read_write> ids: array<i32>;
@group(0) @binding(3) var<storage, read_write> weights: array<f32>;
#if ${BIAS}
@group(0) @binding(4) var<storage, read> bias: array<f32>;
#endif

// An expert's probability: exp(l - mx) / total under softmax, its sigmoid otherwise (total = 1).
fn prob(l: f32, mx: f32, total: f32) -> f32 {
#if ${SIGMOID}
  return 1.0 / (1.0 + exp(-l));
#else
  return exp(l - mx) / total;
#endif
}

fn score(base: u32, e: u32, mx: f32, total: f32) -> f32 {
  let l = logits[base + e];
#if ${BIAS}
  return prob(l, mx, total) + bias[e];
#elif ${GROUPED}
  return prob(l, mx, total);
#else
  return l;
#endif
}

// Bit g set for each of the groups_used best groups; all bits without grouping.
fn allowed_groups(base: u32, mx: f32, total: f32) -> u32 {
#if ${GROUPED}
  let size = p.experts / p.groups;
  var mask = 0u;
  var prev_s = 0.0;
  var prev_g = -1;
  for (var j = 0u; j < p.groups_used; j++) {
    var best = -1;
    var best_s = 0.0;
    for (var g = 0u; g < p.groups; g++) {
      var top1 = -3.0e38;
      var top2 = -3.0e38;
      for (var e = g * size; e < (g + 1u) * size; e++) {
        let s = score(base, e, mx, total);
        if (s > top1) { top2 = top1; top1 = s; } else if (s > top2) { top2 = s; }
      }
      let s = top1 + top2;
      let after = prev_g < 0 || s < prev_s || (s == prev_s && i32(g) > prev_g);
      if (after && (best < 0 || s > best_s)) { best = i32(g); best_s = s; }
    }
    if (best < 0) { break; }
    mask |= 1u << u32(best);
    prev_s = best_s;
    prev_g = best;
  }
  return mask;
#else
  return 0xffffffffu;
#endif
}

fn group_of(e: u32) -> u32 {
#if ${GROUPED}
  return e / (p.experts / p.groups);
#else
  return 0u;
#endif
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let t = (wid.x + wid.y * nwg.x) * 64u + lid;
  if (t >= p.n) { return; }
  let base = t * p.experts;
  var mx = logits[base];
  for (var e = 1u; e < p.experts; e++) { mx = max(mx, logits[base + e]); }
  var total = 0.0;
#if ${SIGMOID}
  total = 1.0;
#else
  for (var e = 0u; e < p.experts; e++) { total += exp(logits[base + e] - mx); }
#endif
  let mask = allowed_groups(base, mx, total);
  var prev_s = 0.0;
  var prev_i = -1;
  var picked = 0.0;
  for (var j = 0u; j < p.k; j++) {
    var best = -1;
    var best_s = 0.0;
    for (var e = 0u; e < p.experts; e++) {
      if ((mask & (1u << group_of(e))) == 0u) { continue; }
      let s = score(base, e, mx, total);
      let after = prev_i < 0 || s < prev_s || (s == prev_s && i32(e) > prev_i);
      if (after && (best < 0 || s > best_s)) { best = i32(e); best_s = s; }
    }
    // Only NaN scores leave nothing to pick; expert 0 keeps the ids in range.
    if (best < 0) { best = 0; best_s = score(base, 0u, mx, total); }
    ids[t * p.k + j] = best;
    let pj = prob(logits[base + u32(best)], mx, total);
    weights[t * p.k + j] = pj;
    picked += pj;
    prev_s = best_s;
    prev_i = best;
  }
  // At least the smallest normal f16 (Backend.moeRoute's MIN_ROUTE_SHARE, as llama.cpp clamps).
  let denominator = select(1.0, max(picked, 6.103515625e-5), p.normalize != 0u);
  for (var j = 0u; j < p.k; j++) { weights[t * p.k + j] = weights[t * p.k + j] / denominator * p.scale; }
}
