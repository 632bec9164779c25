// Row-wise sampling, the reference's algorithm (src/backend/reference/sampling.ts) without a sort.
// Tokens are ordered by a 64-bit key (order-preserving logit bits, then (2^B - 1 - index)), which is
// exactly "descending probability, ties by lower index". Each cut of that order (top-k, top-p, the
// inverse-CDF pick) is the largest key t whose prefix {key >= t} satisfies a monotone predicate, found
// bit by bit from the most significant: 32 + B passes over the row, each a workgroup reduction.
struct P { rows: u32, vocab: u32, index_bits: u32, _a: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> logits: array<f32>;
// Per row two vec4s: (temperature, topK, topP, uniform), (minP, 0, 0, 0).
@group(0) @binding(2) var<storage, read> params: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> e: array<f32>;
@group(0) @binding(4) var<storage, read_write> dst: array<i32>;

const WG = 256u;
var<workgroup> red: array<f32, 256>;
var<workgroup> kh: array<u32, 256>;
var<workgroup> kl: array<u32, 256>;
var<workgroup> prm: vec4<f32>;
var<workgroup> prm_min_p: f32;
var<workgroup> total: f32;
var<workgroup> top_logit: f32;

fn is_nan(v: f32) -> bool { return (bitcast<u32>(v) & 0x7fffffffu) > 0x7f800000u; }
fn hi_key(v: f32) -> u32 {
  // NaN orders below -inf: never the argmax while any token is not NaN (the reference's argmax); no probability.
  if (is_nan(v)) { return 0u; }
  var b = bitcast<u32>(v);
  if (b == 0x80000000u) { b = 0u; } // -0 ties with +0, as in a float comparison
  return select(b | 0x80000000u, ~b, (b & 0x80000000u) != 0u);
}
fn lo_key(c: u32) -> u32 { return ((1u << p.index_bits) - 1u) - c; }
fn key_ge(h: u32, l: u32, th: u32, tl: u32) -> bool { return h > th || (h == th && l >= tl); }

fn reduce_sum(lid: u32, v: f32) -> f32 {
  red[lid] = v;
  workgroupBarrier();
  for (var s = WG / 2u; s > 0u; s >>= 1u) {
    if (lid < s) { red[lid] += red[lid + s]; }
    workgroupBarrier();
  }
  let r = workgroupUniformLoad(&red[0]);
  return r;
}

// Sum over the row of e (or of 1 when count) for tokens whose key >= (th, tl).
fn prefix(lid: u32, base: u32, th: u32, tl: u32, count: bool) -> f32 {
  var acc = 0.0;
  for (var c = lid; c < p.vocab; c += WG) {
    if (key_ge(hi_key(logits[base + c]), lo_key(c), th, tl)) { acc += select(e[base + c], 1.0, count); }
  }
  return reduce_sum(lid, acc);
}

// Largest key t with prefix(t) >= goal (strict: > goal), searched bit by bit.
fn search(lid: u32, base: u32, goal: f32, count: bool, strict: bool) -> vec2<u32> {
  var th = 0u;
  var tl = 0u;
  for (var bit = 31i; bit >= 0i; bit -= 1i) {
    let cand = th | (1u << u32(bit));
    let v = prefix(lid, base, cand, tl, count);
    if (select(v >= goal, v > goal, strict)) { th = cand; }
  }
  for (var bit = i32(p.index_bits) - 1i; bit >= 0i; bit -= 1i) {
    let cand = tl | (1u << u32(bit));
    let v = prefix(lid, base, th, cand, count);
    if (select(v >= goal, v > goal, strict)) { tl = cand; }
  }
  return vec2<u32>(th, tl);
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let row = wid.x + wid.y * nwg.x;
  if (row >= p.rows) { return; }
  let base = row * p.vocab;
  if (lid == 0u) { prm = params[2u * row]; prm_min_p = params[2u * row + 1u].x; }
  let pr = workgroupUniformLoad(&prm);
  let min_p = workgroupUniformLoad(&prm_min_p);
  // The largest key is the argmax (lowest index among equal maxima).
  var bh = 0u;
  var bl = 0u;
  for (var c = lid; c < p.vocab; c += WG) {
    let h = hi_key(logits[base + c]);
    let l = lo_key(c);
    if (key_ge(h, l, bh, bl)) { bh = h; bl = l; }
  }
  kh[lid] = bh;
  kl[lid] = bl;
  workgroupBarrier();
  for (var s = WG / 2u; s > 0u; s >>= 1u) {
    if (lid < s && key_ge(kh[lid + s], kl[lid + s], kh[lid], kl[lid])) { kh[lid] = kh[lid + s]; kl[lid] = kl[lid + s]; }
    workgroupBarrier();
  }
  if (lid == 0u) { top_logit = logits[base + lo_key(0u) - kl[0]]; }
  let mx = workgroupUniformLoad(&top_logit);
  // Greedy, or no finite largest logit (all -inf or NaN, or a +inf; its bits say, whatever the compiler assumes): the argmax.
  if (pr.x == 0.0 || (bitcast<u32>(mx) & 0x7f800000u) == 0x7f800000u) {
    if (lid == 0u) { dst[row] = i32(lo_key(0u) - kl[0]); }
    return;
  }
  let inv_t = 1.0 / pr.x;
  // min-p: a token whose probability over the largest is below min_p has none (nor has a NaN or -inf).
  for (var c = lid; c < p.vocab; c += WG) {
    let l = logits[base + c];
    let r = exp((l - mx) * inv_t);
    e[base + c] = select(r, 0.0, r < min_p || is_nan(l) || bitcast<u32>(l) == 0xff800000u);
  }
  storageBarrier();
  workgroupBarrier();
  // Top-k cut (0 or >= vocab keeps everything: the minimum key).
  var cut = vec2<u32>(0u, 0u);
  let k = u32(pr.y);
  if (k > 0u && k < p.vocab) { cut = search(lid, base, f32(k), true, false); }
  let top_k_mass = prefix(lid, base, cut.x, cut.y, false);
  // Top-p: shortest prefix whose mass >= topP × top-k mass.
  var mass = top_k_mass;
  if (pr.z < 1.0) {
    cut = search(lid, base, pr.z * top_k_mass, false, false);
    mass = prefix(lid, base, cut.x, cut.y, false);
  }
  // Inverse CDF: first token whose cumulative mass exceeds uniform × mass.
  var pick = search(lid, base, pr.w * mass, false, true);
  if (!key_ge(pick.x, pick.y, cut.x, cut.y)) { pick = cut; }
  if (lid == 0u) { dst[row] = i32(lo_key(0u) - pick.y); }
}
