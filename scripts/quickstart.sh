#!/usr/bin/env bash
# anedvd's main job in one command: build (release), fetch the default model if absent,
# and generate text from a prompt.
#
# Usage: scripts/quickstart.sh ["prompt"] [more anedvd run flags...]
set -euo pipefail
cd "$(dirname "$0")/.."
PROMPT=${1:-"The three primary colors are"}
shift || true
echo "quickstart: building anedvd (release) ..." >&2
cargo build --release --locked -p anedvd >&2
MODEL=$(scripts/fetch-model.sh)
exec target/release/anedvd run --model "$MODEL" --prompt "$PROMPT" "$@"
