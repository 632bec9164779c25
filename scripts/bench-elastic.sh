#!/usr/bin/env bash
# Workers joining and leaving a serving cluster through NATS (`serve --nats`, `worker --nats`), on the
# reference backend under Node, with the synthetic agent sessions of scripts/bench-cluster.sh. Per run:
#   1. one worker: the load, measured;
#   2. a second worker is started: seconds from its launch until the server has it in the rotation
#      (its join: process start, model load, greeting, NATS announcement);
#   3. two workers: the same load, measured;
#   4. the same load again, and 3 s into it the first worker gets SIGTERM: it announces that it leaves,
#      is drained and exits; the load's failed requests are what the leave cost.
#   bash scripts/bench-elastic.sh [RUNS] > out.md
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS="${1:-3}"
PORT=8161
BENCH=(--trace synthetic --sessions 8 --turns 4 --length-scale 0.05 --output-scale 0.25 --time-scale 0.5 --ignore-eos --max-requests 32 --slo-ttft-ms 1000 --slo-itl-ms 100)
NATS_BIN=$(command -v nats-server || echo /usr/sbin/nats-server)
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$tmp"; }
trap cleanup EXIT

workers_in_rotation() { curl -sf "http://127.0.0.1:$PORT/metrics" | grep -cE '^evolving:worker_draining\{.*\} 0$' || true; }
wait_workers() { # N TIMEOUT_S
  for _ in $(seq 1 $(( $2 * 20 ))); do [ "$(workers_in_rotation)" = "$1" ] && return 0; sleep 0.05; done
  echo "timed out waiting for $1 workers" >&2; return 1
}
bench() { # JSON_OUT
  node --import tsx scripts/bench-serve.ts --url "http://127.0.0.1:$PORT" "${BENCH[@]}" --json "$1" >/dev/null 2>&1
}
row() { # NAME RUN JSON EXTRA
  node -e '
    const r = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8")).report;
    const f = (x, d = 1) => x.toFixed(d);
    console.log(`| ${process.argv[2]} | ${process.argv[3]} | ${r.succeeded}/${r.requests} | ${r.failed} | ${f(r.requestThroughput, 2)} | ${f(r.ttftMs.p50)} | ${f(r.ttftMs.p95)} | ${f(r.e2eMs.mean)} | ${process.argv[4]} |`);
  ' "$3" "$1" "$2" "$4"
}

echo "| phase | run | ok | failed | req/s | TTFT P50 ms | TTFT P95 ms | E2E mean ms | notes |"
echo "|---|---|---|---|---|---|---|---|---|"
for r in $(seq 1 "$RUNS"); do
  "$NATS_BIN" -a 127.0.0.1 -p -1 2>"$tmp/nats.log" & pids+=($!)
  for _ in $(seq 1 100); do grep -q "Listening for client" "$tmp/nats.log" && break; sleep 0.05; done
  nats="nats://$(sed -nE 's/.*Listening for client connections on (\S+).*/\1/p' "$tmp/nats.log")"
  node --import tsx src/cli/serve.ts --port "$PORT" --backend reference --nats "$nats" --drain-timeout 60 2>"$tmp/serve.log" & serve=$!; pids+=($serve)
  for _ in $(seq 1 200); do curl -sf "http://127.0.0.1:$PORT/v1/models" >/dev/null && break; sleep 0.1; done
  node --import tsx src/cli/worker.ts --listen 127.0.0.1:0 --nats "$nats" --id w-a 2>"$tmp/wa.log" & wa=$!; pids+=($wa)
  wait_workers 1 60
  bench "$tmp/one.json"; row "1 worker" "$r" "$tmp/one.json" ""
  t0=$(date +%s.%N)
  node --import tsx src/cli/worker.ts --listen 127.0.0.1:0 --nats "$nats" --id w-b 2>"$tmp/wb.log" & wb=$!; pids+=($wb)
  wait_workers 2 60
  join=$(echo "$(date +%s.%N) - $t0" | bc)
  bench "$tmp/two.json"; row "2 workers (w-b joined)" "$r" "$tmp/two.json" "w-b in rotation $(printf %.2f "$join") s after launch"
  bench "$tmp/leave.json" & b=$!
  sleep 3
  kill -TERM "$wa"
  wait "$b"
  wait "$wa" && code=0 || code=$?
  row "2 → 1 (w-a leaves 3 s in)" "$r" "$tmp/leave.json" "w-a exited $code; $(workers_in_rotation) worker(s) left"
  for p in "$wb" "$serve" "${pids[0]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  pids=()
done
