#!/usr/bin/env bash
# Every MIL program the ANE backend emits for the tiny fixture models, checked
# with coremltools' own op definitions (scripts/check-mil-coremltools.py,
# docs/mil-validity.md). Builds nothing: pass the anedvd binary.
#
#   scripts/check-mil-coremltools.sh [ANEDVD] [PYTHON]
#
# ANEDVD defaults to target/debug/anedvd, PYTHON to python3; PYTHON needs
# scripts/requirements-coremltools.txt (coremltools 9.0, numpy).
#
# For every family directory under tests/fixtures/models, both lowering
# variants (fused, split) at width 32 are emitted from the F32 GGUF and from
# the Hugging Face directory; then every program is checked, and the check's
# self-test (mutated programs must be rejected) runs once. A family the CLI
# refuses to lower fails the run unless it is listed in EXPECTED_REFUSALS
# (none today: the ANE backend lowers every fixture family).
set -euo pipefail
cd "$(dirname "$0")/.."
ANEDVD=${1:-target/debug/anedvd}
PYTHON=${2:-python3}
WIDTH=32
FIXTURES=tests/fixtures/models
# "family: text its refusal must contain", one per line.
EXPECTED_REFUSALS=""

if [ ! -x "$ANEDVD" ]; then
  echo "check-mil-coremltools: $ANEDVD is not an executable (build it: cargo build -p anedvd)" >&2
  exit 2
fi
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

dirs=()
emit_failures=0
skipped=()
families=0
for fam_dir in "$FIXTURES"/*/; do
  fam=$(basename "$fam_dir")
  [ -f "$fam_dir/config.json" ] || continue
  families=$((families + 1))
  for source in gguf hf; do
    if [ "$source" = gguf ]; then model="$fam_dir/model-f32.gguf"; else model="$fam_dir"; fi
    for variant in fused split; do
      out="$TMP/$fam-$source-$variant"
      if "$ANEDVD" kernels --model "$model" --emit "$out" --variant "$variant" --width "$WIDTH" \
          >"$TMP/emit.log" 2>&1; then
        dirs+=("$out")
        continue
      fi
      expected=$(printf '%s\n' "$EXPECTED_REFUSALS" | sed -n "s/^$fam: //p")
      if [ -n "$expected" ] && grep -qF -- "$expected" "$TMP/emit.log"; then
        skipped+=("$fam/$source/$variant")
        echo "skip $fam ($source, $variant): refused as expected: $(tail -n 1 "$TMP/emit.log")"
      else
        emit_failures=$((emit_failures + 1))
        echo "FAIL $fam ($source, $variant): anedvd kernels --emit failed:"
        sed 's/^/    /' "$TMP/emit.log"
      fi
    done
  done
done
echo "emitted ${#dirs[@]} program directories from $families fixture families (W $WIDTH), ${#skipped[@]} refused as expected, $emit_failures failed"
if [ "$families" -eq 0 ] || [ "${#dirs[@]}" -eq 0 ]; then
  echo "check-mil-coremltools: nothing was emitted" >&2
  exit 1
fi

status=0
"$PYTHON" scripts/check-mil-coremltools.py "${dirs[@]}" || status=1
"$PYTHON" scripts/check-mil-coremltools.py --self-test "${dirs[0]}" || status=1
if [ "$emit_failures" -ne 0 ]; then status=1; fi
if [ "$status" -eq 0 ]; then
  echo "check-mil-coremltools: ok"
else
  echo "check-mil-coremltools: FAILED" >&2
fi
exit "$status"
