#!/usr/bin/env bash
# Side-by-side benchmark against llama.cpp on one GGUF, building what is
# missing first: llama.cpp from PyPI (../shared/scripts/build-llamacpp.sh,
# ~25 min once; reused afterwards) and anedvd's release binary. Then runs
# scripts/bench-vs-llamacpp.py, which interleaves llama-bench and
# `anedvd bench` and prints min/median/max and ratios.
#
#   scripts/bench-vs-llamacpp.sh MODEL [options of bench-vs-llamacpp.py]
#   e.g. scripts/bench-vs-llamacpp.sh ~/.cache/models/gemma3-270m-q4_k_m.gguf \
#            -p 128,512 -n 128 -d 0,1024 -t 2 -r 5 --rounds 3
#
# Env: LLAMACPP_DIR (default ~/.cache/llamacpp-ref), PYTHON (default python3).
set -euo pipefail
if [[ $# -lt 1 || $1 == -h || $1 == --help ]]; then
  sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'
  [[ $# -ge 1 ]] && exit 0 || exit 2
fi
model=$1; shift
root=$(cd "$(dirname "$0")/.." && pwd)
llamacpp=${LLAMACPP_DIR:-$HOME/.cache/llamacpp-ref}
if [[ ! -x $llamacpp/bin/llama-bench ]]; then
  builder=$root/../shared/scripts/build-llamacpp.sh
  [[ -x $builder ]] || { echo "no llama-bench in $llamacpp/bin and no $builder to build it" >&2; exit 1; }
  echo "building llama.cpp into $llamacpp (about 25 minutes, once)..." >&2
  "$builder" "$llamacpp"
fi
(cd "$root" && cargo build --release -q -p anedvd)
exec "${PYTHON:-python3}" "$root/scripts/bench-vs-llamacpp.py" --model "$model" \
  --llama-bench "$llamacpp/bin/llama-bench" --anedvd "$root/target/release/anedvd" "$@"
