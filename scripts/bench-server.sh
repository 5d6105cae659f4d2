#!/usr/bin/env bash
# Server load benchmark: for each --parallel value, starts `anedvd serve` on
# MODEL, runs tests/server/load.py (N concurrent streaming chat clients for a
# bounded time), stops the server, and prints one JSON line per setting plus
# the throughput ratio of each setting to the first. With --llama-server PATH
# the same load also runs against llama.cpp's llama-server (same model,
# threads, slots, greedy), right after ours for each setting.
#
#   scripts/bench-server.sh MODEL [--parallel 1,8] [--clients 16] [--seconds 20]
#                           [--max-tokens 64] [--threads 2] [--port 8093]
#                           [--llama-server ~/.cache/llamacpp-ref/bin/llama-server]
#
# Needs a release build (target/release/anedvd) and python with `openai`
# (tests/server/requirements.txt); PYTHON overrides the interpreter.
set -euo pipefail

usage() { sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }
[[ $# -ge 1 ]] || usage 2
[[ $1 == -h || $1 == --help ]] && usage 0
model=$1; shift
parallel=1,8 clients=16 seconds=20 max_tokens=64 threads=2 port=8093 llama_server=""
while [[ $# -gt 0 ]]; do
  case $1 in
    --parallel) parallel=$2; shift 2 ;;
    --clients) clients=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --max-tokens) max_tokens=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --port) port=$2; shift 2 ;;
    --llama-server) llama_server=$2; shift 2 ;;
    -h|--help) usage 0 ;;
    *) echo "unknown option: $1" >&2; usage 2 ;;
  esac
done
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$root/target/release/anedvd
python=${PYTHON:-python3}
[[ -x $bin ]] || { echo "no release build at $bin: run cargo build --release -p anedvd" >&2; exit 1; }
[[ -f $model ]] || { echo "model not found: $model" >&2; exit 1; }

# serve NAME CMD...: starts a server, runs the load, stops it; prints the
# load's JSON line and sets $tps.
serve() {
  local name=$1; shift
  "$@" >/dev/null 2>&1 &
  local pid=$!
  trap "kill $pid 2>/dev/null || true" EXIT
  for _ in $(seq 1 600); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
    kill -0 $pid 2>/dev/null || { echo "$name exited during start-up" >&2; exit 1; }
    sleep 0.1
  done
  line=$("$python" "$root/tests/server/load.py" --base-url "http://127.0.0.1:$port" \
    --clients "$clients" --seconds "$seconds" --max-tokens "$max_tokens" --pid "$pid")
  kill -INT $pid; wait $pid 2>/dev/null || true
  tps=$("$python" -c 'import json,sys; print(json.loads(sys.argv[1])["aggregate_tok_s"])' "$line")
}

ratio() { "$python" -c 'import sys; print(f"{float(sys.argv[1]) / float(sys.argv[2]):.2f}")' "$1" "$2"; }

first="" llama_first=""
for p in ${parallel//,/ }; do
  serve anedvd "$bin" serve --model "$model" --port "$port" --parallel "$p" -t "$threads" \
    --temp 0 --queue "$clients"
  ours=$tps
  first=${first:-$ours}
  echo "anedvd parallel=$p ratio_to_first=$(ratio "$ours" "$first")x $line"
  if [[ -n $llama_server ]]; then
    # llama-server's -c is shared by its slots: 512 positions each.
    serve llama-server "$llama_server" -m "$model" --port "$port" -np "$p" -t "$threads" \
      -c $((512 * p)) --temp 0 --log-disable
    llama_first=${llama_first:-$tps}
    echo "llama-server parallel=$p ratio_to_first=$(ratio "$tps" "$llama_first")x $line"
    echo "parallel=$p anedvd/llama-server = $(ratio "$ours" "$tps")x"
  fi
done
