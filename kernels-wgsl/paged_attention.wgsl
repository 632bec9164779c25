// Paged causal attention with GQA over a ragged batch, online softmax (flash-decoding style).
// One workgroup of 64 per (query token, HPG query heads of one KV group): each key and value row
// is read once for the HPG heads that share it. Keys are visited in tiles of 64: thread j scores
// key j of the tile for every head; after each head's tile max, thread j turns its scores into
// weights; then the value sums: with VEC (head_dim a power of two from 8 to 256) the threads form
// 256/head_dim key groups of head_dim/4 lanes, each lane summing 4 dims (a vec4) over its group's
// keys, the groups' partial sums added at the end; otherwise thread t accumulates output dims t,
// t+64, ... (DPT of them: head_dim <= 64·DPT) over every key. Both for every head. Each head's
// tile max and weight sum are taken over segments of 8 keys by the first 8·HPG threads, then over
// the segments by every thread.
// Used for decode (one row per sequence) and for prefill chunks over a cached prefix alike.
// With SPLIT (split-KV, flash-decoding's second half: few rows, long contexts) each row's keys are
// cut into `splits` spans of `span` positions (the last open-ended), one workgroup each; a span's
// unnormalised sums, max and weight sum go to dst as partials, which attention_combine.wgsl merges.
// With a sliding window (window > 0) a row visits only its last `window` positions; with SINKS a
// per-head logit starts the online softmax as a key with no value (it joins the denominator only).
// With F16 the caches hold halves, widened to f32 as they are read; with F8, f8_e4m3 blocks of 32
// values (9 words: a power-of-two scale, then four E4M3 codes a word; a head's row is whole blocks),
// decoded four values at a time.
const WG = 64u;
const DPT = ${DPT}u;
const HPG = ${HPG}u;
#if ${VEC}
// Vector value sums (head_dim = 4·64/KG): the 64 threads form KG key groups of LANES lanes; lane
// k of group g sums dims 4k … 4k+3 of keys g, g+KG, …; the groups' partial sums meet at the end.
const KG = ${KG}u;
const LANES = WG / KG;
#endif
struct P {
  n: u32, heads: u32, kv_heads: u32, head_dim: u32,
  block_size: u32, max_blocks: u32, num_blocks: u32, scale: f32,
  window: u32, splits: u32, span: u32,
  // Scores s become softcap · tanh(s / softcap) (Gemma 2); 0: none.
  softcap: f32,
}
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> q: array<f32>;
#if ${WORDS}
// f16 caches: two halves per u32 word (head_dim is even, so a head's row starts on a word); f8_e4m3 ones blocks of 9 words.
@group(0) @binding(2) var<storage, read> kc: array<u32>;
@group(0) @binding(3) var<storage, read> vc: array<u32>;
#else
@group(0) @binding(2) var<storage, read> kc: array<f32>;
@group(0) @binding(3) var<storage, read> vc: array<f32>;
#endif
@group(0) @binding(4) var<storage, read> tseq: array<i32>;
@group(0) @binding(5) var<storage, read> tpos: array<i32>;
@group(0) @binding(6) var<storage, read> tables: array<i32>;
@group(0) @binding(7) var<storage, read_write> dst: array<f32>;
#if ${SINKS}
@group(0) @binding(8) var<storage, read> sinks: array<f32>;
#endif

#if ${F8}
// Four E4M3 codes of a word, low byte first, as f32 (exponent-0 codes are subnormals m · 2^-9).
fn e4m3x4(w: u32) -> vec4<f32> {
  let c = (vec4<u32>(w) >> vec4<u32>(0u, 8u, 16u, 24u)) & vec4<u32>(255u);
  let normal = bitcast<vec4<f32>>(((c & vec4<u32>(127u)) << vec4<u32>(20u)) + vec4<u32>(120u << 23u));
  let mag = select(normal, vec4<f32>(c & vec4<u32>(7u)) * 0.001953125, (c & vec4<u32>(120u)) == vec4<u32>(0u));
  return select(mag, -mag, (c & vec4<u32>(128u)) != vec4<u32>(0u));
}
// Values i … i+3 (i a multiple of 4) of the key and of the value cache.
fn k4(i: u32) -> vec4<f32> {
  let b = (i / 32u) * 9u;
  return e4m3x4(kc[b + 1u + (i % 32u) / 4u]) * bitcast<f32>(kc[b]);
}
fn v4(i: u32) -> vec4<f32> {
  let b = (i / 32u) * 9u;
  return e4m3x4(vc[b + 1u + (i % 32u) / 4u]) * bitcast<f32>(vc[b]);
}
#endif

var<workgroup> qs: array<f32, 2048>; // HPG · head_dim <= MAX_GROUP_QUERY in ops-attention.ts
var<workgroup> sc: array<f32, WG * HPG>; // head hh's score (then weight) of key j at hh·64 + j
var<workgroup> kbase: array<u32, 64>;
const SEG = 8u; // keys per segment of a tile
const SEGS = 8u; // segments per tile (SEG · SEGS = WG)
var<workgroup> part_max: array<f32, SEGS * HPG>;
var<workgroup> part_sum: array<f32, SEGS * HPG>;
var<workgroup> ctx_shared: u32;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
#if ${SPLIT}
  let split = (wid.x + wid.y * nwg.x) % p.splits;
  let g = (wid.x + wid.y * nwg.x) / p.splits;
#else
  let g = wid.x + wid.y * nwg.x;
#endif
  let chunks = p.heads / HPG;
  if (g >= p.n * chunks) { return; }
  let t = g / chunks;
  let h0 = (g % chunks) * HPG;
  let kvh = h0 / (p.heads / p.kv_heads);
  let seq = u32(tseq[t]);
  let hd = p.head_dim;
  // The HPG heads' query rows lie next to each other, and so do their output rows.
  let qb = (t * p.heads + h0) * hd;
  for (var d = lid; d < HPG * hd; d += WG) { qs[d] = q[qb + d] * p.scale; }
  if (lid == 0u) { ctx_shared = u32(tpos[t] + 1); }
  // The context length comes from a storage buffer; loading it this way makes it workgroup-uniform.
  let ctx = workgroupUniformLoad(&ctx_shared);
  var m: array<f32, HPG>;
  var l: array<f32, HPG>;
  for (var hh = 0u; hh < HPG; hh += 1u) {
#if ${SINKS}
    m[hh] = sinks[h0 + hh];
    l[hh] = 1.0;
#else
    m[hh] = -3.0e38;
    l[hh] = 0.0;
#endif
  }
#if ${VEC}
  var acc4: array<vec4<f32>, HPG>; // head hh's dims 4·lane … 4·lane+3 over this thread's keys
  for (var hh = 0u; hh < HPG; hh += 1u) { acc4[hh] = vec4<f32>(0.0); }
  let kg = lid / LANES;
  let d0 = (lid % LANES) * 4u;
#else
  var acc: array<f32, HPG * DPT>; // head hh's dim lid + i·64 at hh·DPT + i
  for (var i = 0u; i < HPG * DPT; i += 1u) { acc[i] = 0.0; }
#endif
  var first = 0u;
  if (p.window > 0u && ctx > p.window) { first = ctx - p.window; }
  var end = ctx;
#if ${SPLIT}
  // This workgroup's span of the row's keys; the last takes the rest, so a short maxContext loses nothing.
  first = min(ctx, first + split * p.span);
  if (split + 1u < p.splits) { end = min(ctx, first + p.span); }
#endif
  for (var start = first; start < end; start += WG) {
    let key = start + lid;
    var s: array<f32, HPG>;
    for (var hh = 0u; hh < HPG; hh += 1u) { s[hh] = -3.0e38; }
    if (key < end) {
      let blk = u32(tables[seq * p.max_blocks + key / p.block_size]);
      let base = ((blk * p.block_size + key % p.block_size) * p.kv_heads + kvh) * hd;
      kbase[lid] = base;
      for (var hh = 0u; hh < HPG; hh += 1u) { s[hh] = 0.0; }
#if ${F16}
      for (var d = 0u; d < hd; d += 2u) {
        let kk = unpack2x16float(kc[(base + d) / 2u]);
        for (var hh = 0u; hh < HPG; hh += 1u) { s[hh] += qs[hh * hd + d] * kk.x + qs[hh * hd + d + 1u] * kk.y; }
      }
#elif ${F8}
      for (var d = 0u; d < hd; d += 4u) {
        let kk = k4(base + d);
        for (var hh = 0u; hh < HPG; hh += 1u) {
          let o = hh * hd + d;
          s[hh] += qs[o] * kk.x + qs[o + 1u] * kk.y + qs[o + 2u] * kk.z + qs[o + 3u] * kk.w;
        }
      }
#else
      for (var d = 0u; d < hd; d += 1u) {
        let kk = kc[base + d];
        for (var hh = 0u; hh < HPG; hh += 1u) { s[hh] += qs[hh * hd + d] * kk; }
      }
#endif
    }
    if (p.softcap > 0.0 && key < end) {
      // tanh(y) = 1 - 2 / (exp(2y) + 1), y clamped: no tanh of a large argument (NaN on some drivers).
      for (var hh = 0u; hh < HPG; hh += 1u) {
        let y = clamp(s[hh] / p.softcap, -15.0, 15.0);
        s[hh] = p.softcap * (1.0 - 2.0 / (exp(2.0 * y) + 1.0));
      }
    }
    for (var hh = 0u; hh < HPG; hh += 1u) { sc[hh * WG + lid] = s[hh]; }
    workgroupBarrier();
    let count = min(WG, end - start);
    // The tile's max and weight sum per head in two levels: thread (hh, seg) of the first 8·HPG
    // takes keys seg·8 … seg·8+7 of head hh, instead of every thread scanning every score.
    let hs = lid / SEGS;
    let j0 = (lid % SEGS) * SEG;
    if (lid < SEGS * HPG) {
      var mx = -3.0e38;
      for (var j = j0; j < min(j0 + SEG, count); j += 1u) { mx = max(mx, sc[hs * WG + j]); }
      part_max[lid] = mx;
    }
    workgroupBarrier();
    var tmax: array<f32, HPG>;
    for (var hh = 0u; hh < HPG; hh += 1u) {
      var mx = m[hh];
      for (var k = 0u; k < SEGS; k += 1u) { mx = max(mx, part_max[hh * SEGS + k]); }
      tmax[hh] = mx;
    }
    if (lid < SEGS * HPG) {
      var sum = 0.0;
      for (var j = j0; j < min(j0 + SEG, count); j += 1u) {
        let w = exp(sc[hs * WG + j] - tmax[hs]);
        sc[hs * WG + j] = w;
        sum += w;
      }
      part_sum[lid] = sum;
    }
    workgroupBarrier();
    for (var hh = 0u; hh < HPG; hh += 1u) {
      var sum = 0.0;
      for (var k = 0u; k < SEGS; k += 1u) { sum += part_sum[hh * SEGS + k]; }
      let corr = exp(m[hh] - tmax[hh]);
      l[hh] = l[hh] * corr + sum;
#if ${VEC}
      acc4[hh] *= corr;
#else
      for (var i = 0u; i < DPT; i += 1u) { acc[hh * DPT + i] *= corr; }
#endif
    }
#if ${VEC}
    for (var j = kg; j < count; j += KG) {
      let vb = kbase[j] + d0;
#if ${F16}
      let v = vec4<f32>(unpack2x16float(vc[vb / 2u]), unpack2x16float(vc[vb / 2u + 1u]));
#elif ${F8}
      let v = v4(vb);
#else
      let v = vec4<f32>(vc[vb], vc[vb + 1u], vc[vb + 2u], vc[vb + 3u]);
#endif
      for (var hh = 0u; hh < HPG; hh += 1u) { acc4[hh] += sc[hh * WG + j] * v; }
    }
#else
    for (var j = 0u; j < count; j += 1u) {
      let vb = kbase[j];
      for (var i = 0u; i < DPT; i += 1u) {
        let d = lid + i * WG;
        if (d < hd) {
#if ${F16}
          let vv = unpack2x16float(vc[(vb + d) / 2u]);
          let v = select(vv.x, vv.y, (d & 1u) == 1u);
#elif ${F8}
          let v = v4((vb + d) & ~3u)[d & 3u];
#else
          let v = vc[vb + d];
#endif
          for (var hh = 0u; hh < HPG; hh += 1u) { acc[hh * DPT + i] += sc[hh * WG + j] * v; }
        }
      }
    }
#endif
    for (var hh = 0u; hh < HPG; hh += 1u) { m[hh] = tmax[hh]; }
    workgroupBarrier();
  }
#if ${VEC}
  // The queries are no longer needed: their buffer takes the groups' partial sums (HPG · 64 vec4).
  for (var hh = 0u; hh < HPG; hh += 1u) {
    for (var c = 0u; c < 4u; c += 1u) { qs[(hh * WG + lid) * 4u + c] = acc4[hh][c]; }
  }
  workgroupBarrier();
  for (var o = lid; o < HPG * hd; o += WG) {
    let hh = o / hd;
    let d = o % hd;
    var sum = 0.0;
    for (var g = 0u; g < KG; g += 1u) { sum += qs[(hh * WG + g * LANES + d / 4u) * 4u + (d & 3u)]; }
#if ${SPLIT}
    dst[((t * p.heads + h0 + hh) * p.splits + split) * hd + d] = sum;
#else
    dst[qb + o] = sum * (1.0 / l[hh]);
#endif
  }
#else
  for (var hh = 0u; hh < HPG; hh += 1u) {
    let inv = 1.0 / l[hh];
    for (var i = 0u; i < DPT; i += 1u) {
      let d = lid + i * WG;
#if ${SPLIT}
      if (d < hd) { dst[((t * p.heads + h0 + hh) * p.splits + split) * hd + d] = acc[hh * DPT + i]; }
#else
      if (d < hd) { dst[qb + hh * hd + d] = acc[hh * DPT + i] * inv; }
#endif
    }
  }
#endif
#if ${SPLIT}
  // Each head's running max and weight sum, after every span's sums.
  for (var hh = lid; hh < HPG; hh += WG) {
    let r = p.n * p.heads * p.splits * hd + ((t * p.heads + h0 + hh) * p.splits + split) * 2u;
    dst[r] = m[hh];
    dst[r + 1u] = l[hh];
  }
#endif
}
