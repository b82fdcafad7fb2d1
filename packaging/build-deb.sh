#!/usr/bin/env bash
# Builds the Debian package of squashd into target/debian/ and prints its path on the last
# line of output. What goes in it: [package.metadata.deb] in crates/squashd/Cargo.toml.
#
#   packaging/build-deb.sh               build the release binary, then the package
#   packaging/build-deb.sh --no-build    package the release binary already built
#   packaging/build-deb.sh -- ARGS       pass ARGS to cargo-deb (e.g. --maintainer "NAME <MAIL>")
#
# Needs cargo-deb (installed with `cargo install` on first use: a few minutes) and
# dpkg-dev (dpkg-shlibdeps finds the libraries the binary links).
set -euo pipefail
cd "$(dirname "$0")/.."

# The cargo-deb this was written and tested against; the metadata uses features of 3.x.
cargo_deb_version=3.8.0

# usage CODE: the comment above, on stdout for --help (0), on stderr for a mistake (2).
usage() {
  if [ "$1" -eq 0 ]; then sed -n '2,10s/^# \{0,1\}//p' "$0"; else sed -n '2,10s/^# \{0,1\}//p' "$0" >&2; fi
  exit "$1"
}

build=1
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --no-build) build=0 ;;
    --) shift; extra=("$@"); break ;;
    -h | --help) usage 0 ;;
    *) echo "build-deb.sh: unknown argument $1" >&2; usage 2 ;;
  esac
  shift
done

if ! cargo deb --version 2>/dev/null | grep -q "^cargo-deb 3\."; then
  echo "build-deb.sh: installing cargo-deb $cargo_deb_version (once)" >&2
  cargo install cargo-deb --locked --version "$cargo_deb_version" >&2
fi
if ! command -v dpkg-shlibdeps >/dev/null; then
  echo "build-deb.sh: dpkg-shlibdeps is missing: apt-get install dpkg-dev" >&2
  exit 1
fi

# Where cargo puts its output (CARGO_TARGET_DIR, a config's build.target-dir, or target/).
target_dir=$(cargo metadata --format-version 1 --no-deps |
  sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
binary="$target_dir/release/squashd"

if [ "$build" -eq 1 ]; then
  cargo build --release --locked -p squashd >&2
elif [ ! -x "$binary" ]; then
  echo "build-deb.sh: $binary is missing: build it (cargo build --release -p squashd) or drop --no-build" >&2
  exit 1
fi

# Man pages and completions, from the clap definitions of the binary being packaged.
assets="$target_dir/release/squashd-assets"
rm -rf "$assets"
"$binary" generate-assets "$assets" >/dev/null
# Debian policy: man pages gzipped; -n leaves out the name and time, so builds are identical.
gzip -9n "$assets"/man/*.1

# --no-build: built above (or before), so both modes package the same file. --no-strip: the
# release profile already leaves out debug info and keeps symbols on purpose (perf names
# functions with them; see the workspace Cargo.toml).
deb=$(cargo deb -p squashd --no-build --no-strip --output "$target_dir/debian/" "${extra[@]}" | tail -n 1)
if [ ! -f "$deb" ]; then
  echo "build-deb.sh: cargo-deb did not report a package (got: $deb)" >&2
  exit 1
fi
echo "$deb"
