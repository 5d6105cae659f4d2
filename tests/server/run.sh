#!/usr/bin/env bash
# Python SDK tests of `anedvd serve` over a real socket: builds the binary,
# starts the server on a free loopback port with the tiny qwen2 fixture, runs
# pytest on tests/server, stops the server. Needs the packages in
# tests/server/requirements.txt (pip install -r tests/server/requirements.txt);
# the WebUI step also needs apt packages chromium and chromium-driver. Ends
# with a SIGTERM graceful-shutdown check (tests/server/sigterm_check.py).
# Env: PYTHON (default: python3), ANEDVD_BIN (skip the build, use this binary).
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
if ! "$PY" -c "import openai, anthropic, pytest" 2>/dev/null; then
  echo "tests/server/run.sh: $PY lacks openai/anthropic/pytest; pip install -r tests/server/requirements.txt" >&2
  exit 1
fi
if [ -z "${ANEDVD_BIN:-}" ]; then
  cargo build -q -p anedvd
  ANEDVD_BIN=target/debug/anedvd
fi
PORT=$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
LOG=$(mktemp)
KEY=sdk-test-key
"$ANEDVD_BIN" serve --model tests/fixtures/models/qwen2/model-f32.gguf --port "$PORT" \
  --api-key "$KEY" --parallel 2 --max-seq 256 --max-body 65536 --temp 0 --seed 1 -t 1 --shutdown-grace 1 >"$LOG" 2>&1 &
PID=$!
cleanup() {
  kill -TERM "$PID" 2>/dev/null || true
  wait "$PID" 2>/dev/null || true
  rm -f "$LOG"
}
trap cleanup EXIT
for _ in $(seq 1 300); do
  if "$PY" -c "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:$PORT/health').status == 200 else 1)" 2>/dev/null; then
    break
  fi
  if ! kill -0 "$PID" 2>/dev/null; then
    echo "server exited:" >&2; cat "$LOG" >&2; exit 1
  fi
  sleep 0.2
done
export ANEDVD_BASE_URL="http://127.0.0.1:$PORT" ANEDVD_API_KEY="$KEY"
"$PY" -m pytest -q -p no:cacheprovider tests/server --ignore=tests/server/test_structured.py || {
  status=$?; echo "--- server log ---" >&2; cat "$LOG" >&2; exit $status;
}
# Structured output and tool calls need room for the tool listing the
# template renders (the tiny tokenizer spends ~1 token per byte): a second
# server with a 2048-position context (beyond the fixture's trained 256).
PORT2=$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
LOG2=$(mktemp)
"$ANEDVD_BIN" serve --model tests/fixtures/models/qwen2/model-f32.gguf --port "$PORT2" \
  --api-key "$KEY" --parallel 2 --ctx-train 2048 --max-seq 2048 -t 1 >"$LOG2" 2>&1 &
PID2=$!
for _ in $(seq 1 300); do
  if "$PY" -c "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:$PORT2/health').status == 200 else 1)" 2>/dev/null; then
    break
  fi
  sleep 0.2
done
ANEDVD_BASE_URL="http://127.0.0.1:$PORT2" "$PY" -m pytest -q -p no:cacheprovider tests/server/test_structured.py || {
  status=$?; echo "--- server log ---" >&2; cat "$LOG2" >&2; kill "$PID2"; exit $status;
}
kill -TERM "$PID2" 2>/dev/null || true
wait "$PID2" 2>/dev/null || true
rm -f "$LOG2"
# The WebUI in headless Chromium, when Debian's chromium + chromium-driver and
# selenium are present (ANEDVD_WEBUI_TEST=1 makes their absence an error).
if [ -x /usr/bin/chromedriver ] && "$PY" -c "import selenium" 2>/dev/null; then
  "$PY" tests/server/webui_test.py || {
    status=$?; echo "--- server log ---" >&2; cat "$LOG" >&2; exit $status;
  }
elif [ "${ANEDVD_WEBUI_TEST:-0}" = 1 ]; then
  echo "tests/server/run.sh: WebUI test needs chromium, chromium-driver and selenium" >&2; exit 1
else
  echo "tests/server/run.sh: WebUI test skipped (no /usr/bin/chromedriver or selenium)"
fi
# Two replicas behind HAProxy (docs/scale-out.md), when haproxy is installed
# (ANEDVD_SCALEOUT_TEST=1 makes its absence an error).
if command -v haproxy >/dev/null; then
  "$PY" tests/server/scaleout_check.py --binary "$ANEDVD_BIN"
elif [ "${ANEDVD_SCALEOUT_TEST:-0}" = 1 ]; then
  echo "tests/server/run.sh: the scale-out test needs haproxy" >&2; exit 1
else
  echo "tests/server/run.sh: scale-out test skipped (no haproxy)"
fi
# Graceful shutdown last: SIGTERM with a stalled stream in flight; the server
# must cancel it with an error event and exit with status 0.
"$PY" tests/server/sigterm_check.py --base-url "$ANEDVD_BASE_URL" --api-key "$KEY" --pid "$PID" || {
  status=$?; echo "--- server log ---" >&2; cat "$LOG" >&2; exit $status;
}
if wait "$PID"; then
  echo "sigterm: server exited with status 0"
else
  status=$?; echo "server exited with status $status after SIGTERM" >&2; cat "$LOG" >&2; exit 1
fi
