// Paged causal attention with GQA over a ragged batch, online softmax (flash-decoding style).
// One workgroup of 64 per (query token, query head). Keys are visited in tiles of 64: thread j
// scores key j of the tile; after the tile max, thread j turns its score into a weight; then
// thread t accumulates output dims t, t+64, ... (DPT of them: head_dim <= 64·DPT).
// Used for decode (one row per sequence) and for prefill chunks over a cached prefix alike.
// With a sliding window (window > 0) a row visits only its last `window` positions; with SINKS a
// per-head logit starts the online softmax as a key with no value (it joins the denominator only).
// With F16 the caches hold halves, widened to f32 as they are read.
const WG = 64u;
const DPT = ${DPT}u;
struct P {
  n: u32, heads: u32, kv_heads: u32, head_dim: u32,
  block_size: u32, max_blocks: u32, num_blocks: u32, scale: f32,
  window: u32,
}
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> q: array<f32>;
#if ${F16}
// f16 caches: two halves per u32 word (head_dim is even, so a head's row starts on a word).
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

var<workgroup> qs: array<f32, 576>; // MAX_HEAD_DIM in ops-attention.ts
var<workgroup> sc: array<f32, 64>;
var<workgroup> kbase: array<u32, 64>;
var<workgroup> ctx_shared: u32;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let g = wid.x + wid.y * nwg.x;
  if (g >= p.n * p.heads) { return; }
  let t = g / p.heads;
  let h = g % p.heads;
  let kvh = h / (p.heads / p.kv_heads);
  let seq = u32(tseq[t]);
  let qb = g * p.head_dim;
  for (var d = lid; d < p.head_dim; d += WG) { qs[d] = q[qb + d] * p.scale; }
  if (lid == 0u) { ctx_shared = u32(tpos[t] + 1); }
  // The context length comes from a storage buffer; loading it this way makes it workgroup-uniform.
  let ctx = workgroupUniformLoad(&ctx_shared);
  let row = p.kv_heads * p.head_dim;
#if ${SINKS}
  var m = sinks[h];
  var l = 1.0;
#else
  var m = -3.0e38;
  var l = 0.0;
#endif
  var acc: array<f32, DPT>;
  for (var i = 0u; i < DPT; i += 1u) { acc[i] = 0.0; }
  var first = 0u;
  if (p.window > 0u && ctx > p.window) { first = ctx - p.window; }
  for (var start = first; start < ctx; start += WG) {
    let key = start + lid;
    var s = -3.0e38;
    if (key < ctx) {
      let blk = u32(tables[seq * p.max_blocks + key / p.block_size]);
      let base = ((blk * p.block_size + key % p.block_size) * p.kv_heads + kvh) * p.head_dim;
      kbase[lid] = base;
      var dotv = 0.0;
#if ${F16}
      for (var d = 0u; d < p.head_dim; d += 2u) {
        let kk = unpack2x16float(kc[(base + d) / 2u]);
        dotv += qs[d] * kk.x + qs[d + 1u] * kk.y;
      }
#else
      for (var d = 0u; d < p.head_dim; d += 1u) { dotv += qs[d] * kc[base + d]; }
#endif
      s = dotv;
    }
    sc[lid] = s;
    workgroupBarrier();
    var tmax = m;
    let count = min(WG, ctx - start);
    for (var j = 0u; j < count; j += 1u) { tmax = max(tmax, sc[j]); }
    workgroupBarrier();
    if (key < ctx) { sc[lid] = exp(s - tmax); }
    workgroupBarrier();
    let corr = exp(m - tmax);
    l *= corr;
    for (var i = 0u; i < DPT; i += 1u) { acc[i] *= corr; }
    for (var j = 0u; j < count; j += 1u) {
      let w = sc[j];
      l += w;
      let vb = kbase[j];
      for (var i = 0u; i < DPT; i += 1u) {
        let d = lid + i * WG;
#if ${F16}
        if (d < p.head_dim) {
          let vv = unpack2x16float(vc[(vb + d) / 2u]);
          acc[i] += w * select(vv.x, vv.y, (d & 1u) == 1u);
        }
#else
        if (d < p.head_dim) { acc[i] += w * vc[vb + d]; }
#endif
      }
    }
    m = tmax;
    workgroupBarrier();
  }
  let inv = 1.0 / l;
  for (var i = 0u; i < DPT; i += 1u) {
    let d = lid + i * WG;
    if (d < p.head_dim) { dst[qb + d] = acc[i] * inv; }
  }
}
