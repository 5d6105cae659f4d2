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
# For every family directory under tests/fixtures/models, every lowering
# variant (fused, split, and resident on the e5rt path) at width 32 is emitted: fp16 weights from the F32
# GGUF and from the Hugging Face directory, and compressed weights
# (`--ane-weights int8|lut4 --ane-path e5rt`) from the F32 GGUF; lut6 and lut8
# for the first family (LUT_ALL_BITS_FAMILY) only. Then every program is
# checked, and the check's self-test (mutated programs must be rejected) runs
# once: its fp16 set on the first fp16 directory, its int8/lut sets on the
# first directory of each compressed format. A family the CLI refuses to lower
# fails the run unless it is listed in EXPECTED_REFUSALS (none today: the ANE
# backend lowers every fixture family).
set -euo pipefail
cd "$(dirname "$0")/.."
ANEDVD=${1:-target/debug/anedvd}
PYTHON=${2:-python3}
WIDTH=32
FIXTURES=tests/fixtures/models
# "family: text its refusal must contain", one per line.
EXPECTED_REFUSALS=""
# The resident variant (e5rt; attention and the KV cache, or a short
# convolution and its cache, inside, two layers per program, caches of 64
# positions) holds every family: attention and short-convolution layers,
# a dense FFN or a mixture of experts (a group ends after each, the routed
# experts on the host), Gemma 4's per-layer inputs and shared K/V. A family
# listed here would be expected refused by name ("… in the resident
# variant").
RESIDENT_ARGS="--ane-layers-per-program 2 --ane-context 64"
RESIDENT_REFUSED=""

if [ ! -x "$ANEDVD" ]; then
  echo "check-mil-coremltools: $ANEDVD is not an executable (build it: cargo build -p anedvd)" >&2
  exit 2
fi
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# Compressed formats emitted for every family, and for LUT_ALL_BITS_FAMILY
# (the first family) only.
COMPRESSED="int8 lut4"
COMPRESSED_FIRST_ONLY="lut6 lut8"

dirs=()
emit_failures=0
skipped=()
families=0
# first_<format>: the first directory of each weight format, for the
# self-test (plain variables and "$@", no associative or empty arrays, so the
# script also runs under macOS's bash 3.2 with set -u).
for weights in fp16 $COMPRESSED $COMPRESSED_FIRST_ONLY; do printf -v "first_$weights" '%s' ""; done
# emit FAMILY SOURCE MODEL VARIANT WEIGHTS
emit() {
  local fam=$1 source=$2 model=$3 variant=$4 weights=$5
  local out="$TMP/$fam-$source-$variant-$weights" first="first_$5"
  set --
  if [ "$weights" != fp16 ]; then set -- --ane-weights "$weights"; fi
  if [ "$weights" != fp16 ] || [ "$variant" = resident ]; then set -- "$@" --ane-path e5rt; fi
  if [ "$variant" = resident ]; then set -- "$@" $RESIDENT_ARGS; fi
  if "$ANEDVD" kernels --model "$model" --emit "$out" --variant "$variant" --width "$WIDTH" "$@" \
      >"$TMP/emit.log" 2>&1; then
    dirs+=("$out")
    [ -n "${!first}" ] || printf -v "$first" '%s' "$out"
    return
  fi
  local expected
  expected=$(printf '%s\n' "$EXPECTED_REFUSALS" | sed -n "s/^$fam: //p")
  if [ "$variant" = resident ] && printf '%s\n' $RESIDENT_REFUSED | grep -qx -- "$fam"; then
    expected="in the resident variant"
  fi
  if [ -n "$expected" ] && grep -qF -- "$expected" "$TMP/emit.log"; then
    skipped+=("$fam/$source/$variant/$weights")
    echo "skip $fam ($source, $variant, $weights): refused as expected: $(tail -n 1 "$TMP/emit.log")"
  else
    emit_failures=$((emit_failures + 1))
    echo "FAIL $fam ($source, $variant, $weights): anedvd kernels --emit failed:"
    sed 's/^/    /' "$TMP/emit.log"
  fi
}
for fam_dir in "$FIXTURES"/*/; do
  fam=$(basename "$fam_dir")
  [ -f "$fam_dir/config.json" ] || continue
  families=$((families + 1))
  formats=$COMPRESSED
  if [ "$families" -eq 1 ]; then formats="$formats $COMPRESSED_FIRST_ONLY"; fi
  for variant in fused split resident; do
    emit "$fam" gguf "$fam_dir/model-f32.gguf" "$variant" fp16
    emit "$fam" hf "$fam_dir" "$variant" fp16
    for weights in $formats; do
      emit "$fam" gguf "$fam_dir/model-f32.gguf" "$variant" "$weights"
    done
  done
done
echo "emitted ${#dirs[@]} program directories from $families fixture families (W $WIDTH; fp16 from GGUF and HF, $COMPRESSED from GGUF, $COMPRESSED_FIRST_ONLY for the first family), ${#skipped[@]} refused as expected, $emit_failures failed"
if [ "$families" -eq 0 ] || [ "${#dirs[@]}" -eq 0 ]; then
  echo "check-mil-coremltools: nothing was emitted" >&2
  exit 1
fi

status=0
"$PYTHON" scripts/check-mil-coremltools.py "${dirs[@]}" || status=1
self_test_dirs=()
for weights in fp16 $COMPRESSED $COMPRESSED_FIRST_ONLY; do
  first="first_$weights"
  if [ -n "${!first}" ]; then
    self_test_dirs+=("${!first}")
  else
    echo "FAIL no $weights directory was emitted for the self-test"
    status=1
  fi
done
if [ -n "$first_fp16" ]; then
  "$PYTHON" scripts/check-mil-coremltools.py --self-test "${self_test_dirs[@]}" || status=1
fi
if [ "$emit_failures" -ne 0 ]; then status=1; fi
if [ "$status" -eq 0 ]; then
  echo "check-mil-coremltools: ok"
else
  echo "check-mil-coremltools: FAILED" >&2
fi
exit "$status"
