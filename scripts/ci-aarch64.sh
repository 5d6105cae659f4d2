#!/usr/bin/env bash
# The aarch64 lane of CI (issue 18): the kernel crates' tests (every NEON
# kernel against its scalar twin, the decoder on tiny models) built for
# aarch64-unknown-linux-gnu and run under qemu-aarch64, and the workspace
# type-checked for aarch64-apple-darwin (the ANE's machines). The crates that
# pull in ring (anedvd-hub, and the CLI above it) are left out of the darwin
# check: ring's build script needs Apple's C toolchain.
#
# Needs: rustup targets aarch64-unknown-linux-gnu and aarch64-apple-darwin,
# Debian's qemu-user, gcc-aarch64-linux-gnu and libc6-dev-arm64-cross.
# `--install` installs them first (CI does).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--install" ]; then
  rustup target add aarch64-unknown-linux-gnu aarch64-apple-darwin
  if ! command -v qemu-aarch64 >/dev/null || ! command -v aarch64-linux-gnu-gcc >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq qemu-user gcc-aarch64-linux-gnu libc6-dev-arm64-cross >/dev/null
  fi
fi
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -L /usr/aarch64-linux-gnu"
# Release: the tests run under emulation, where debug builds are slow.
cargo test --release --target aarch64-unknown-linux-gnu -p anedvd-cpu -p anedvd-quant
cargo check --target aarch64-apple-darwin --workspace --all-targets --exclude anedvd-hub --exclude anedvd
echo "ci-aarch64: ok"
