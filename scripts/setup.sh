#!/usr/bin/env bash
# Installs what squashd's tests, demo and benchmarks need on a Debian machine. Idempotent: skips
# apt when everything is already there.
set -euo pipefail
packages=(squashfs-tools cryptsetup-bin openssl libssl-dev fuse3 libfuse3-dev pkg-config fio attr squashfuse hyperfine python3-matplotlib erofs-utils dpkg-dev man-db nginx-light curl httpdirfs python3-venv)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# The S3-compatible server of the remote-image tests: s3s-fs from crates.io, built once into
# ~/.cargo/bin (about 3.5 CPU-minutes). 0.14.1 is the last release that builds with Rust 1.95.
if ! command -v s3s-fs >/dev/null && ! [ -x "${CARGO_HOME:-$HOME/.cargo}/bin/s3s-fs" ]; then
  echo "setup: installing s3s-fs (cargo install)"
  cargo install --quiet --locked s3s-fs --version 0.14.1 --features binary
fi
# siftool (Apptainer's SIF tool), for the demo's SIF file and the SIF tests' cross-check: from the
# Go module proxy when Go is installed; without it both say so and go on.
gobin="$(go env GOPATH 2>/dev/null || echo "$HOME/go")/bin"
if command -v go >/dev/null && ! command -v siftool >/dev/null && ! [ -x "$gobin/siftool" ]; then
  echo "setup: installing siftool (go install)"
  go install github.com/apptainer/sif/v2/cmd/siftool@v2.25.0 ||
    echo "setup: siftool did not install; the SIF cross-checks will be skipped"
fi
