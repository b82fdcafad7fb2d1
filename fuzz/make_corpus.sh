#!/usr/bin/env bash
# Rebuilds the fuzz seed corpus: small real images made by mksquashfs, one per compressor and
# per format variant, so the fuzzer starts from every structure the format has.
# Usage: fuzz/make_corpus.sh   (needs mksquashfs 4.x with all six compressors, setfattr, mkfifo)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="$here/corpus/open_walk_read"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
src="$work/tree"
mkdir -p "$src/dir/sub" "$src/empty" "$src/big"
printf 'hello\n' > "$src/small"
head -c 5000 /dev/zero | tr '\0' 'a' > "$src/two_blocks"        # a block and a tail at -b 4096
: > "$src/zero"
head -c 300 /dev/urandom > "$src/dir/random"                     # does not compress
truncate -s 20000 "$src/dir/sparse"                              # holes: sparse blocks
printf 'x' | dd of="$src/dir/sparse" bs=1 seek=9000 conv=notrunc status=none
ln "$src/small" "$src/dir/sub/hardlink"
ln -s small "$src/link"
ln -s "$(head -c 300 /dev/zero | tr '\0' 'l')" "$src/dir/longlink"
mkfifo "$src/dir/fifo"
setfattr -n user.a -v one "$src/small" 2>/dev/null || true
setfattr -n user.b -v one "$src/dir/random" 2>/dev/null || true  # shared value: out of line
setfattr -n trusted.t -v two "$src/dir" 2>/dev/null || true
# Enough long names that the listing outgrows a metadata block: an extended directory with an
# index, which lookup uses.
for i in $(seq 1 200); do : > "$src/big/entry-with-a-rather-long-name-number-$i"; done
touch -h -d @1000000000 $(find "$src")
rm -rf "$out"
mkdir -p "$out"
mk() { # name, mksquashfs options...
    local name="$1"
    shift
    mksquashfs "$src" "$out/$name.sqfs" -quiet -no-progress -b 4096 -mkfs-time 0 \
        -p "chr c 644 0 0 1 5" -p "blk b 600 7 8 259 70000" -p "sock i 755 1 2 s" "$@" >/dev/null 2>&1 || { echo "mksquashfs $name failed" >&2; exit 1; }
}
for comp in gzip lzma lzo xz lz4 zstd; do
    mk "$comp" -comp "$comp"
done
mk gzip-opts -comp gzip -Xcompression-level 1 -Xwindow-size 10
mk xz-bcj -comp xz -Xbcj x86,arm
mk lz4-hc -comp lz4 -Xhc
mk zstd-opts -comp zstd -Xcompression-level 3
mk lzo-999 -comp lzo -Xalgorithm lzo1x_999
mk uncompressed -comp gzip -noI -noD -noF -noX
mk no-fragments -comp zstd -no-fragments
mk always-fragments -comp zstd -always-use-fragments
mk exportable -comp lz4 -exports
mk no-exports -comp lz4 -no-exports
mk no-xattrs -comp gzip -no-xattrs
mk no-duplicates -comp gzip -no-duplicates
du -sh "$out"

# Seeds of the `locate` target: containers holding the gzip image. A SIF file made by siftool
# (go install github.com/apptainer/sif/v2/cmd/siftool@latest) with a definition file, the
# primary system partition and a data partition; a type-2 AppImage from /bin/true.
loc="$here/corpus/locate"
rm -rf "$loc"
mkdir -p "$loc"
siftool="$(command -v siftool || echo "$HOME/go/bin/siftool")"
if [ -x "$siftool" ]; then
    printf 'Bootstrap: scratch\n' > "$work/def"
    "$siftool" new "$loc/two-partitions.sif"
    "$siftool" add "$loc/two-partitions.sif" "$work/def" --datatype 1
    "$siftool" add "$loc/two-partitions.sif" "$out/gzip.sqfs" --datatype 4 --parttype 2 --partfs 1 --partarch 2
    "$siftool" add "$loc/two-partitions.sif" "$out/gzip.sqfs" --datatype 4 --parttype 3 --partfs 1 --partarch 4
else
    echo "siftool is not installed: no SIF seed" >&2
fi
{ head -c 8 /bin/true; printf 'AI\002'; tail -c +12 /bin/true; cat "$out/gzip.sqfs"; } > "$loc/true.AppImage"
du -sh "$loc"
