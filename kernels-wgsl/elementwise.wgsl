// Binary elementwise ops on f32: add (a + b), silu_mul (silu(a) * b), gelu_mul (gelu(a) * b, tanh
// approximation), or GPT-OSS's clamped SwiGLU (g = min(a, limit), u = clamp(b, -limit, limit):
// g * sigmoid(alpha * g) * (u + 1)); and three unary, soft-capping (alpha · tanh(a / alpha)),
// max(a, 0)² (Nemotron-H's activation) and gelu(a) (a vision tower's); b unread.
struct P { n: u32, alpha: f32, limit: f32, _c: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> dst: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let i = (wid.x + wid.y * nwg.x) * 256u + lid;
  if (i >= p.n) { return; }
  let x = a[i];
#if ${OP_ADD}
  dst[i] = x + b[i];
#elif ${OP_GELU}
  // 0.5·x·(1 + tanh(y)) is x·sigmoid(2y): no tanh of a large argument (NaN on some drivers).
  let y2 = 1.5957691216057308 * (x + 0.044715 * x * x * x);
  dst[i] = x / (1.0 + exp(-y2)) * b[i];
#elif ${OP_SOFTCAP}
  // tanh(y) = 1 - 2 / (exp(2y) + 1), y clamped: no tanh of a large argument (NaN on some drivers).
  let y = clamp(x / p.alpha, -15.0, 15.0);
  dst[i] = p.alpha * (1.0 - 2.0 / (exp(2.0 * y) + 1.0));
#elif ${OP_GELU1}
  let y2 = 1.5957691216057308 * (x + 0.044715 * x * x * x);
  dst[i] = x / (1.0 + exp(-y2));
#elif ${OP_RELU2}
  let r = max(x, 0.0);
  dst[i] = r * r;
#elif ${OP_OAI}
  let g = min(x, p.limit);
  let u = clamp(b[i], -p.limit, p.limit);
  dst[i] = g / (1.0 + exp(-p.alpha * g)) * (u + 1.0);
#else
  dst[i] = x / (1.0 + exp(-x)) * b[i];
#endif
}
