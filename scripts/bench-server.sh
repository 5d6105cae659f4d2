#!/usr/bin/env bash
# Server load benchmark: for each --parallel value, starts `anedvd serve` on
# MODEL, runs tests/server/load.py (N concurrent streaming chat clients for a
# bounded time), stops the server, and prints one JSON line per setting plus
# the throughput ratio of each setting to the first.
#
#   scripts/bench-server.sh MODEL [--parallel 1,8] [--clients 16] [--seconds 20]
#                           [--max-tokens 64] [--threads 2] [--port 8093]
#
# Needs a release build (target/release/anedvd) and python with `openai`
# (tests/server/requirements.txt); PYTHON overrides the interpreter.
set -euo pipefail

usage() { sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }
[[ $# -ge 1 ]] || usage 2
[[ $1 == -h || $1 == --help ]] && usage 0
model=$1; shift
parallel=1,8 clients=16 seconds=20 max_tokens=64 threads=2 port=8093
while [[ $# -gt 0 ]]; do
  case $1 in
    --parallel) parallel=$2; shift 2 ;;
    --clients) clients=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --max-tokens) max_tokens=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --port) port=$2; shift 2 ;;
    -h|--help) usage 0 ;;
    *) echo "unknown option: $1" >&2; usage 2 ;;
  esac
done
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$root/target/release/anedvd
python=${PYTHON:-python3}
[[ -x $bin ]] || { echo "no release build at $bin: run cargo build --release -p anedvd" >&2; exit 1; }
[[ -f $model ]] || { echo "model not found: $model" >&2; exit 1; }

first=""
for p in ${parallel//,/ }; do
  "$bin" serve --model "$model" --port "$port" --parallel "$p" -t "$threads" \
    --temp 0 --queue "$clients" >/dev/null 2>&1 &
  pid=$!
  trap 'kill $pid 2>/dev/null || true' EXIT
  for _ in $(seq 1 300); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
    kill -0 $pid 2>/dev/null || { echo "server exited during start-up" >&2; exit 1; }
    sleep 0.1
  done
  line=$("$python" "$root/tests/server/load.py" --base-url "http://127.0.0.1:$port" \
    --clients "$clients" --seconds "$seconds" --max-tokens "$max_tokens" --pid "$pid")
  kill -INT $pid; wait $pid 2>/dev/null || true
  tps=$("$python" -c 'import json,sys; print(json.loads(sys.argv[1])["aggregate_tok_s"])' "$line")
  first=${first:-$tps}
  ratio=$("$python" -c 'import sys; print(f"{float(sys.argv[1]) / float(sys.argv[2]):.2f}")' "$tps" "$first")
  echo "parallel=$p ratio_to_first=${ratio}x $line"
done
