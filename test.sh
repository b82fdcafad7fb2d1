#!/usr/bin/env bash
# Runs every test of squashd: formatting, lints, unit and integration tests (real mksquashfs
# images, real unsquashfs, real FUSE mounts where /dev/fuse is usable).
set -euo pipefail
cd "$(dirname "$0")"
bash scripts/setup.sh
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --release -- -D warnings
cargo test --workspace --release
# Hostile images and the fuzz seed corpus (at offsets up to near u64::MAX) again with overflow
# checks on: arithmetic on values an image claims must not overflow, and release builds wrap.
cargo test -p squashd-core --profile hardened --test hostile
# The Python package: built once with maturin into a venv under target/, then its pytest suite.
bash python/test.sh
# The Debian package, from the release binary built above: contents, dpkg -i, the README's
# mount example through mount.fuse.squashd, man, completions, the unit; purged afterwards.
bash packaging/test-deb.sh
