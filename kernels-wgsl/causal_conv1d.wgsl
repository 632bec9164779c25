// Depthwise causal convolution with SiLU over each sequence's rows (Backend.causalConv1d), or with
// GATED LFM2's short convolution (Backend.shortConv): x [n, 3C] holds each row's B, C and x, the
// convolution (no activation) runs over B ⊙ x and its output is gated by C.
// Without GATED, bias [C] is added to each sum before SiLU where has_bias is 1 (Mamba-2's; the binding
// is then any buffer). x [n, C], w [C, K], state [slots, K - 1, C] (read and written in place), seqs [numSeqs, 4] =
// (first row, row count, slot, fresh), y [n, C]. One invocation per (sequence, channel): it keeps the
// channel's window of the last K - 1 inputs in registers (the slot's, or zeros when fresh), walks the
// sequence's rows in order, and finally writes the window back to the slot. K is at most MAX_K
// (the host refuses more); a sequence whose rows or slot are out of range is skipped (the host
// checks uploaded tables first).
const MAX_K = 8u;
struct P { n: u32, channels: u32, kernel: u32, slots: u32, num_seqs: u32, has_bias: u32, _b: u32, _c: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<f32>;
@group(0) @binding(3) var<storage, read_write> state: array<f32>;
@group(0) @binding(4) var<storage, read> seqs: array<i32>;
@group(0) @binding(5) var<storage, read_write> dst: array<f32>;
@group(0) @binding(6) var<storage, read> bias: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let g = (wid.x + wid.y * nwg.x) * 64u + lid;
  let C = p.channels;
  if (g >= p.num_seqs * C) { return; }
  let s = g / C;
  let c = g % C;
  let first = seqs[s * 4u];
  let count = seqs[s * 4u + 1u];
  let slot = seqs[s * 4u + 2u];
  let fresh = seqs[s * 4u + 3u] != 0;
  if (first < 0 || count < 1 || u32(first) + u32(count) > p.n || slot < 0 || u32(slot) >= p.slots) { return; }
  let past = p.kernel - 1u;
  let base = u32(slot) * past * C + c;
  var win: array<f32, MAX_K>;
  var wk: array<f32, MAX_K>;
  for (var j = 0u; j < past; j += 1u) {
    win[j] = select(state[base + j * C], 0.0, fresh);
  }
  for (var j = 0u; j < p.kernel; j += 1u) { wk[j] = w[c * p.kernel + j]; }
  let newest = wk[past];
  let b = select(0.0, bias[c], p.has_bias != 0u);
  for (var t = 0u; t < u32(count); t += 1u) {
    let at = (u32(first) + t) * C + c;
#if ${GATED}
    let row = (u32(first) + t) * 3u * C + c;
    let xv = x[row] * x[row + 2u * C];
#else
    let xv = x[at];
#endif
    var acc = newest * xv;
    for (var j = 0u; j < past; j += 1u) { acc += wk[j] * win[j]; }
#if ${GATED}
    dst[at] = x[row + C] * acc;
#else
    acc += b;
    dst[at] = acc / (1.0 + exp(-acc));
#endif
    for (var j = 1u; j < past; j += 1u) { win[j - 1u] = win[j]; }
    win[past - 1u] = xv;
  }
  for (var j = 0u; j < past; j += 1u) { state[base + j * C] = win[j]; }
}
