#!/usr/bin/env bash
# Builds the anedvd.forge Python package into a venv and runs its API checks
# and every example, each checking itself against numpy in float64.
# Needs: python3 with venv, cargo; installs maturin, numpy, scikit-learn.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="${FORGE_VENV:-$here/../target/forge-venv}"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install -q -r "$here/requirements-examples.txt"
"$venv/bin/pip" install -q "$here"
cd "$here"
for f in tests/test_api.py examples/*.py; do
    echo "== $f"
    "$venv/bin/python" "$f"
done
