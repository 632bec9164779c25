// Groups the rows of an expert matmul by expert, for the tiled kernel (matmul_experts_tiled): a
// counting sort of the rows by ids[r], then a list of tiles (expert, first sorted row, rows ≤
// tile_rows). tiles[0] holds the number of tiles; tile t is tiles[1 + 3t .. 3 + 3t]. Rows of one
// expert land in any order (atomics): each row's result is computed alone, so order cannot change it.
// One workgroup; experts ≤ 1024 (the caller falls back to the GEMV kernel beyond).
struct P { rows: u32, experts: u32, tile_rows: u32, _pad: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> ids: array<i32>;
@group(0) @binding(2) var<storage, read_write> perm: array<u32>;
@group(0) @binding(3) var<storage, read_write> tiles: array<u32>;
var<workgroup> counts: array<atomic<u32>, 1024>;
var<workgroup> starts: array<u32, 1024>;

fn expert_of(r: u32) -> u32 { return u32(clamp(ids[r], 0, i32(p.experts) - 1)); }

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32) {
  for (var e = lid; e < p.experts; e += 256u) { atomicStore(&counts[e], 0u); }
  workgroupBarrier();
  for (var r = lid; r < p.rows; r += 256u) { atomicAdd(&counts[expert_of(r)], 1u); }
  workgroupBarrier();
  if (lid == 0u) {
    var start = 0u;
    var t = 0u;
    for (var e = 0u; e < p.experts; e++) {
      let c = atomicLoad(&counts[e]);
      starts[e] = start;
      for (var i = 0u; i < c; i += p.tile_rows) {
        tiles[1u + 3u * t] = e;
        tiles[2u + 3u * t] = start + i;
        tiles[3u + 3u * t] = min(p.tile_rows, c - i);
        t++;
      }
      start += c;
      atomicStore(&counts[e], 0u); // now the expert's scatter cursor
    }
    tiles[0] = t;
  }
  workgroupBarrier();
  for (var r = lid; r < p.rows; r += 256u) {
    let e = expert_of(r);
    perm[starts[e] + atomicAdd(&counts[e], 1u)] = r;
  }
}
