#!/usr/bin/env bash
# Serving throughput and latency with one engine against --workers 2 (in-process and in threads),
# on the reference backend under Node: the same synthetic agent sessions as
# docs/results/bench-serve-stories260K.md, RUNS times per configuration on a fresh server each.
# Worker processes over TCP (`worker --listen`) are started for the "tcp" configuration.
#   bash scripts/bench-cluster.sh [RUNS] [CONFIG-REGEX] > out.md
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS="${1:-3}"
ONLY="${2:-.}"
PORT=8141
BENCH=(--trace synthetic --sessions 8 --turns 4 --length-scale 0.05 --output-scale 0.25 --time-scale 0.5 --ignore-eos --max-requests 32 --slo-ttft-ms 1000 --slo-itl-ms 100)
configs=(
  "one engine|"
  "2 workers, in-process|--workers 2"
  "2 workers, threads|--workers 2 --transport threads"
  "2 workers, threads, Dynamo's KV-aware router|--workers 2 --transport threads --router kv-aware"
  "2 worker processes over TCP|--transport tcp --worker-addrs 127.0.0.1:9151,127.0.0.1:9152"
)
echo "| configuration | run | req/s | output tok/s | TTFT P50 ms | TTFT P95 ms | E2E mean ms | prefix hit | roles at the end |"
echo "|---|---|---|---|---|---|---|---|---|"
for c in "${configs[@]}"; do
  name="${c%%|*}"; flags="${c#*|}"
  [[ "$name" =~ $ONLY ]] || continue
  for r in $(seq 1 "$RUNS"); do
    wpids=()
    if [[ "$flags" == *tcp* ]]; then
      for wp in 9151 9152; do
        node --import tsx src/cli/worker.ts --listen "127.0.0.1:$wp" 2>/tmp/bench-cluster-worker.log &
        wpids+=($!)
      done
      for _ in $(seq 1 100); do grep -q "listening" /tmp/bench-cluster-worker.log 2>/dev/null && break; sleep 0.2; done
      sleep 1
    fi
    # shellcheck disable=SC2086
    node --import tsx src/cli/serve.ts --port "$PORT" --backend reference $flags 2>/tmp/bench-cluster-serve.log &
    pid=$!
    for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$PORT/v1/models" >/dev/null && break; sleep 0.2; done
    kill -0 "$pid" 2>/dev/null || { echo "server did not start: $(cat /tmp/bench-cluster-serve.log)" >&2; exit 1; }
    node --import tsx scripts/bench-serve.ts --url "http://127.0.0.1:$PORT" "${BENCH[@]}" --json /tmp/bench-cluster.json >/dev/null 2>&1
    roles=$(curl -sf "http://127.0.0.1:$PORT/metrics" | grep -E '^evolving:worker_role\{.*\} 1$' | sed -E 's/.*role="([a-z]+)".*/\1/' | paste -sd, -)
    kill "$pid"; wait "$pid" 2>/dev/null || true
    for w in "${wpids[@]}"; do kill "$w"; wait "$w" 2>/dev/null || true; done
    node -e '
      const r = JSON.parse(require("fs").readFileSync("/tmp/bench-cluster.json", "utf8")).report;
      const f = (x, d = 1) => x.toFixed(d);
      console.log(`| ${process.argv[1]} | ${process.argv[2]} | ${f(r.requestThroughput, 2)} | ${f(r.outputTokThroughput)} | ${f(r.ttftMs.p50)} | ${f(r.ttftMs.p95)} | ${f(r.e2eMs.mean)} | ${f(100 * r.prefixHitRate)}% | ${process.argv[3]} |`);
    ' "$name" "$r" "$roles"
  done
done
