#!/usr/bin/env bash
# Runs llama.cpp's own server test suite (tools/server/tests, llama.cpp b11312 as
# vendored in llama-cpp-python 0.3.36) against `anedvd serve`, through
# llama-server-shim (llama-server's flags -> anedvd's).
#
# Usage: scripts/llamacpp-server-tests/run.sh [--no-build] [TEST_FILE...] [-- PYTEST_ARGS...]
#   TEST_FILE: e.g. test_completion.py or unit/test_completion.py::test_foo
#   default: the files that apply to anedvd (APPLY below); "all" = APPLY + OTHER.
#
# Environment:
#   WORK                scratch dir (default /tmp/lcpp-tests): sdist, extracted tests, venv, results
#   ANEDVD_LCPP_MODEL   model for every hub model the presets ask for
#                       (default ~/.cache/models/gemma3-270m-q4_k_m.gguf, fetched if absent)
#   ANEDVD_BIN          anedvd binary (default target/release/anedvd, built unless --no-build)
#   ANEDVD_LCPP_THREADS -t for anedvd (default: all cores)
#   PORT                port for the servers (the suite's utils.py reads it; default 8080)
#   RESULTS             results dir (default $WORK/results)
#   PYTEST_TIMEOUT      per-test timeout in seconds via pytest-timeout (default 300)
#
# Writes $RESULTS (default $WORK/results)/junit-<file>.xml, $WORK/results/log-<file>.txt and
# $WORK/results/summary.tsv (file, passed, failed, errors, skipped).
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
WORK=${WORK:-/tmp/lcpp-tests}
VER=0.3.36
SDIST_NAME=llama_cpp_python-$VER.tar.gz
TESTS_SUB=llama_cpp_python-$VER/vendor/llama.cpp/tools/server/tests
TESTS=$WORK/$TESTS_SUB

APPLY=(test_basic.py test_completion.py test_chat_completion.py test_tokenize.py
       test_ignore_eos.py test_compat_anthropic.py test_tool_call.py test_metrics.py
       test_security.py test_stream.py test_template.py test_ctx_shift.py
       test_kv_keep_only_active.py test_proxy.py test_embedding.py test_compat_oai_responses.py)
OTHER=(test_infill.py test_rerank.py
       test_lora.py test_vision_api.py test_router.py test_mcp_servers.py test_speculative.py
       test_slot_save.py test_sleep.py test_compat_gcp.py test_tools_builtin.py)

BUILD=1
FILES=()
PYARGS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --no-build) BUILD=0 ;;
    --) shift; PYARGS=("$@"); break ;;
    all) FILES+=("${APPLY[@]}" "${OTHER[@]}") ;;
    other) FILES+=("${OTHER[@]}") ;;
    *) FILES+=("$1") ;;
  esac
  shift
done
[ ${#FILES[@]} -eq 0 ] && FILES=("${APPLY[@]}")

mkdir -p "$WORK"
# 1. the test suite
if [ ! -f "$TESTS/utils.py" ]; then
  SDIST=""
  for c in "$WORK/sdist/$SDIST_NAME" "/tmp/lcpp/sdist/$SDIST_NAME"; do [ -f "$c" ] && SDIST=$c && break; done
  if [ -z "$SDIST" ]; then
    mkdir -p "$WORK/sdist"
    python3 -m pip download --no-deps --no-binary llama-cpp-python "llama-cpp-python==$VER" -d "$WORK/sdist" || exit 1
    SDIST=$WORK/sdist/$SDIST_NAME
  fi
  tar -xzf "$SDIST" -C "$WORK" "$TESTS_SUB/" || exit 1
fi
# the chat templates the tests give with --chat-template-file (../../../models/templates)
TEMPLATES_SUB=llama_cpp_python-$VER/vendor/llama.cpp/models/templates
if [ ! -d "$WORK/$TEMPLATES_SUB" ]; then
  SDIST=""
  for c in "$WORK/sdist/$SDIST_NAME" "/tmp/lcpp/sdist/$SDIST_NAME"; do [ -f "$c" ] && SDIST=$c && break; done
  [ -n "$SDIST" ] && tar -xzf "$SDIST" -C "$WORK" "$TEMPLATES_SUB/"
fi

# 2. the venv (requirements.txt's packages, plus pytest-timeout so a hang fails one test)
VENV=$WORK/venv
if [ ! -x "$VENV/bin/pytest" ] || ! "$VENV/bin/python" -c "import pytest_timeout, openai, aiohttp, prometheus_client, wget, filelock" 2>/dev/null; then
  python3 -m venv "$VENV" || exit 1
  "$VENV/bin/pip" install -q pytest pytest-xdist pytest-timeout aiohttp filelock numpy openai \
    prometheus-client requests wget jsonschema || exit 1
fi

# 3. anedvd and the model
export ANEDVD_BIN=${ANEDVD_BIN:-$REPO/target/release/anedvd}
if [ "$BUILD" = 1 ]; then
  (cd "$REPO" && cargo build --release -p anedvd) || { echo "build failed" >&2; exit 1; }
fi
export ANEDVD_LCPP_MODEL=${ANEDVD_LCPP_MODEL:-$HOME/.cache/models/gemma3-270m-q4_k_m.gguf}
if [ ! -f "$ANEDVD_LCPP_MODEL" ]; then
  bash "$REPO/scripts/fetch-model.sh" "$ANEDVD_LCPP_MODEL" 2>/dev/null \
    || bash /work/shared/scripts/fetch-gemma3-270m.sh "$ANEDVD_LCPP_MODEL" || exit 1
fi

# 4. pytest, one file at a time (one junit file and log each)
export LLAMA_SERVER_BIN_PATH=$HERE/llama-server-shim
export PYTHONPATH=$TESTS:$HERE${PYTHONPATH:+:$PYTHONPATH}
RES=${RESULTS:-$WORK/results}
mkdir -p "$RES"
cd "$TESTS" || exit 1
mkdir -p tmp
printf 'file\tpassed\tfailed\terrors\tskipped\n' > "$RES/summary.tsv"
for f in "${FILES[@]}"; do
  case "$f" in unit/*) t=$f ;; *) t=unit/$f ;; esac
  name=$(basename "${t%%::*}" .py)
  echo "=== $t"
  "$VENV/bin/pytest" -p anedvd_lcpp_plugin -o cache_dir="$WORK/.pytest_cache" \
    --timeout="${PYTEST_TIMEOUT:-300}" -rfE -q --junitxml="$RES/junit-$name.xml" \
    "$t" "${PYARGS[@]}" > "$RES/log-$name.txt" 2>&1
  tail -n 1 "$RES/log-$name.txt"
  "$VENV/bin/python" - "$RES/junit-$name.xml" "$name" >> "$RES/summary.tsv" <<'EOF'
import sys, xml.etree.ElementTree as ET
try:
    r = ET.parse(sys.argv[1]).getroot()
    s = r if r.tag == "testsuite" else r.find("testsuite")
    t, f, e, k = (int(s.get(x, 0)) for x in ("tests", "failures", "errors", "skipped"))
    print(f"{sys.argv[2]}\t{t - f - e - k}\t{f}\t{e}\t{k}")
except Exception as ex:
    print(f"{sys.argv[2]}\t-\t-\t-\t-\t({ex})")
EOF
done
echo
column -t "$RES/summary.tsv" 2>/dev/null || cat "$RES/summary.tsv"
