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
# A GPT disk image with the gzip image in a root-x86-64 partition after a Linux data
# partition, as a Discoverable Disk Image holds it (written here from the UEFI layout: header
# at LBA 1, 128 entries from LBA 2, CRC32s).
python3 - "$out/gzip.sqfs" "$loc/root.gpt" <<'PY'
import struct, sys, uuid, zlib
image = open(sys.argv[1], "rb").read()
sectors = (len(image) + 511) // 512
disk = bytearray((34 + 8 + sectors + 34) * 512)
def entry(kind, first, last, name):
    e = uuid.UUID(kind).bytes_le + uuid.uuid5(uuid.NAMESPACE_OID, name).bytes_le
    e += struct.pack("<QQQ", first, last, 0) + name.encode("utf-16-le").ljust(72, b"\0")
    return e
table = entry("0fc63daf-8483-4772-8e79-3d69d8477de4", 34, 41, "data")
table += entry("4f68bce3-e8cd-4db1-96e7-fbcaf984b709", 42, 41 + sectors, "root-x86-64")
table = table.ljust(128 * 128, b"\0")
header = bytearray(struct.pack("<8sIIIIQQQQ16sQIII", b"EFI PART", 0x10000, 92, 0, 0, 1,
    len(disk) // 512 - 1, 34, len(disk) // 512 - 34, bytes(16), 2, 128, 128, zlib.crc32(table)))
header[16:20] = struct.pack("<I", zlib.crc32(header))
disk[512:512 + 92] = header
disk[1024:1024 + len(table)] = table
disk[42 * 512:42 * 512 + len(image)] = image
open(sys.argv[2], "wb").write(disk)
PY
du -sh "$loc"

# Seeds of the `verity` target: [root hash][data length][data][hash device] of a small tree
# made by veritysetup (512-byte blocks, with its superblock), when cryptsetup-bin is installed.
ver="$here/corpus/verity"
rm -rf "$ver"
mkdir -p "$ver"
if command -v veritysetup >/dev/null; then
    head -c 4096 "$out/gzip.sqfs" > "$work/vdata"
    root=$(veritysetup format --data-block-size=512 --hash-block-size=512 "$work/vdata" "$work/vhash" |
        awk '/Root hash/ {print $3}')
    { printf '%s' "$root" | xxd -r -p; printf '\000\020'; cat "$work/vdata" "$work/vhash"; } > "$ver/gzip-4k"
else
    echo "veritysetup is not installed: no verity seed" >&2
fi
