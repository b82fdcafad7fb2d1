#!/usr/bin/env bash
# squashd's main job on an example image it builds itself: mount it, read it, show what it did.
#
#   ./demo.sh [SOURCE_DIR]     (default: /usr/share/doc, or this repository if that is missing)
#
# Installs what it needs (Debian packages via scripts/setup.sh), builds squashd, packs SOURCE_DIR
# into a zstd SquashFS image, mounts it with `squashd serve` (so `squashd status` can show the
# caches at work), walks and reads it twice, checks every byte against the source, mounts it again
# through the kernel path (as root), from inside an AppImage and from inside a SIF file (found
# without an offset), shows the counters and unmounts.
set -euo pipefail
cd "$(dirname "$0")"
repo=$(pwd)

bash scripts/setup.sh
echo "== building squashd (release)"
cargo build --release -q -p squashd
squashd="$repo/target/release/squashd"

src=${1:-/usr/share/doc}
[ -d "$src" ] || src="$repo"
work=$(mktemp -d /tmp/squashd-demo.XXXXXX)
daemon=""
cleanup() {
  [ -n "$daemon" ] && kill "$daemon" 2>/dev/null && wait "$daemon" 2>/dev/null
  mountpoint -q "$work/mnt" 2>/dev/null && fusermount3 -u "$work/mnt" 2>/dev/null
  mountpoint -q "$work/kmnt" 2>/dev/null && umount -l "$work/kmnt" 2>/dev/null
  for m in "$work"/mnt-*; do
    if mountpoint -q "$m" 2>/dev/null; then fusermount3 -u "$m" 2>/dev/null || true; fi
  done
  rm -rf "$work"
}
trap cleanup EXIT

echo "== packing $src into an example image"
mksquashfs "$src" "$work/example.sqfs" -comp zstd -quiet -no-progress -noappend
"$squashd" info "$work/example.sqfs"

echo
echo "== mounting it with squashd serve (one daemon, one cache budget for all its images)"
mkdir "$work/mnt"
cat > "$work/serve.toml" <<EOF
socket = "$work/control.sock"
cache = "256MiB"
[[image]]
path = "$work/example.sqfs"
mountpoint = "$work/mnt"
EOF
"$squashd" serve --config "$work/serve.toml" 2> "$work/serve.log" &
daemon=$!
export SQUASHD_SOCKET="$work/control.sock"
for _ in $(seq 1 200); do
  "$squashd" status >/dev/null 2>&1 && mountpoint -q "$work/mnt" && break
  sleep 0.05
done
mountpoint -q "$work/mnt" || { cat "$work/serve.log"; echo "demo: the mount did not come up" >&2; exit 1; }
grep "$work/mnt" /proc/mounts

walk() {
  local start end
  start=$(date +%s%N)
  find "$work/mnt" -type f -print0 | xargs -0 -r -P 4 -n 64 cat > /dev/null
  end=$(date +%s%N)
  echo "$(( (end - start) / 1000000 )) ms"
}
echo
echo "== walking and reading every file: first time (cold) $(walk)"
echo "== walking and reading every file: again (kernel caches warm) $(walk)"

echo
echo "== checking every file's contents and every symlink against the source (diff -r)"
if diff -r --no-dereference "$src" "$work/mnt" > "$work/diff.txt" 2>&1; then
  echo "identical: $(find "$work/mnt" | wc -l) entries, $(du -sh --apparent-size "$work/mnt" | cut -f1) of data"
else
  head -20 "$work/diff.txt"
  echo "demo: the mount differs from the source" >&2
  exit 1
fi

if [ "$(id -u)" -eq 0 ] && { grep -qw erofs /proc/filesystems 2>/dev/null || modprobe -q erofs 2>/dev/null; }; then
  echo
  echo "== the same image on the kernel path: its metadata translated to EROFS, walks never reach squashd"
  mkdir "$work/kmnt"
  "$squashd" attach "$work/example.sqfs" "$work/kmnt" -o kernel
  grep "$work/kmnt" /proc/mounts
  start=$(date +%s%N)
  find "$work/kmnt" -type f -print0 | xargs -0 -r -P 4 -n 64 cat > /dev/null
  end=$(date +%s%N)
  echo "== walking and reading every file: $(( (end - start) / 1000000 )) ms"
  if ! diff -r --no-dereference "$src" "$work/kmnt" > "$work/kdiff.txt" 2>&1; then
    head -20 "$work/kdiff.txt"
    echo "demo: the kernel-path mount differs from the source" >&2
    exit 1
  fi
  echo "identical to the source as well"
else
  echo
  echo "== (the kernel path needs root and EROFS: skipped)"
fi

echo
echo "== the same image inside an AppImage and an Apptainer SIF file, mounted without an offset"
# An AppImage (type 2) is an ELF runtime marked "AI\x02" at byte 8 with the image appended.
cp /bin/true "$work/example.AppImage"
printf 'AI\002' | dd of="$work/example.AppImage" bs=1 seek=8 conv=notrunc status=none
cat "$work/example.sqfs" >> "$work/example.AppImage"
containers=("$work/example.AppImage")
siftool=$(command -v siftool || echo "$HOME/go/bin/siftool")
if [ -x "$siftool" ]; then
  "$siftool" new "$work/example.sif" >/dev/null
  "$siftool" add "$work/example.sif" "$work/example.sqfs" \
    --datatype 4 --parttype 2 --partfs 1 --partarch 2 >/dev/null  # the primary system partition
  containers+=("$work/example.sif")
else
  echo "(no siftool, so no SIF file: go install github.com/apptainer/sif/v2/cmd/siftool@v2.25.0)"
fi
for container in "${containers[@]}"; do
  name=$(basename "$container")
  mkdir "$work/mnt-$name"
  "$squashd" info "$container" | grep -E '^(container|offset)'
  "$squashd" attach "$container" "$work/mnt-$name" -o fuse
  if ! diff -r --no-dereference "$src" "$work/mnt-$name" > "$work/cdiff.txt" 2>&1; then
    head -20 "$work/cdiff.txt"
    echo "demo: the mount of $name differs from the source" >&2
    exit 1
  fi
  echo "$name mounted on $work/mnt-$name: identical to the source"
done

echo
echo "== what squashd did (squashd status)"
"$squashd" status

echo
echo "== unmounting (SIGTERM to the daemon)"
kill "$daemon"
wait "$daemon" || true
daemon=""
mountpoint -q "$work/mnt" && { echo "demo: still mounted" >&2; exit 1; }
[ -d "$work/kmnt" ] && mountpoint -q "$work/kmnt" && { echo "demo: the kernel-path mount is still there" >&2; exit 1; }
for m in "$work"/mnt-*; do
  if mountpoint -q "$m"; then echo "demo: $m is still mounted" >&2; exit 1; fi
done
echo "done: unmounted cleanly"
