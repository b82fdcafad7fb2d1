#!/usr/bin/env bash
# Installs what squashd's tests, demo and benchmarks need on a Debian machine. Idempotent: skips
# apt when everything is already there.
set -euo pipefail
packages=(squashfs-tools fuse3 libfuse3-dev pkg-config fio attr squashfuse hyperfine python3-matplotlib erofs-utils nginx-light curl)
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
