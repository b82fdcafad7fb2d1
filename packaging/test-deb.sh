#!/usr/bin/env bash
# Tests the Debian package: builds it (from the release binary already built, if there is one),
# checks its file list and control data, installs it on this machine with dpkg -i (as root),
# runs the README's mount example through the installed mount.fuse.squashd (as a command line
# and as an fstab line), renders a man page, sources the bash completion, checks the systemd
# unit and runs the daemon under its sandbox (test-unit.sh), runs the service, then purges the
# package again, also on failure.
# Refuses to install over anything a package or an admin put where the package goes.
# Exit status: 0 when every check passed or was skipped, 1 otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."

passed=0 failed=0 skipped=0
ok() { echo "ok: $*"; passed=$((passed + 1)); }
bad() { echo "FAILED: $*" >&2; failed=$((failed + 1)); }
skip() { echo "SKIPPED: $*"; skipped=$((skipped + 1)); }
# check DESCRIPTION COMMAND...: one check, counted.
check() {
  local what=$1
  shift
  if "$@"; then ok "$what"; else bad "$what"; fi
}
finish() {
  echo "test-deb: $passed passed, $failed failed, $skipped skipped"
  [ "$failed" -eq 0 ]
}

work=$(mktemp -d /tmp/squashd-test-deb.XXXXXX)
installed=0
mnt="$work/mnt"
cleanup() {
  if declare -F unit_cleanup >/dev/null; then unit_cleanup; fi
  if mountpoint -q "$mnt" 2>/dev/null; then umount -l "$mnt" || true; fi
  if [ "$installed" -eq 1 ]; then
    dpkg --purge squashd >"$work/purge.log" 2>&1 || cat "$work/purge.log" >&2
  fi
  rm -rf "$work"
}
trap cleanup EXIT

# --- build -------------------------------------------------------------------------------------
target_dir=$(cargo metadata --format-version 1 --no-deps |
  sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
build_args=()
[ -x "$target_dir/release/squashd" ] && build_args=(--no-build)
deb=$(packaging/build-deb.sh "${build_args[@]}" | tail -n 1)
if [ ! -f "$deb" ]; then
  bad "build-deb.sh made a package (it said: $deb)"
  finish
  exit 1
fi
ok "built $deb"
binary="$target_dir/release/squashd"

# --- what is in it -----------------------------------------------------------------------------
dpkg-deb -c "$deb" >"$work/contents"
has() { grep -qE "$1" "$work/contents"; }
check "the binary, executable, in /usr/bin" has '^-rwxr-xr-x .* \./usr/bin/squashd$'
check "the mount(8) helper links to it" has '^l.* \./usr/sbin/mount\.fuse\.squashd -> \.\./bin/squashd$'
check "the systemd unit" has ' \./usr/lib/systemd/system/squashd\.service$'
check "the config in /etc" has ' \./etc/squashd/serve\.toml$'
check "the example config" has ' \./usr/share/doc/squashd/examples/serve\.example\.toml$'
check "bash completion" has ' \./usr/share/bash-completion/completions/squashd$'
check "zsh completion" has ' \./usr/share/zsh/vendor-completions/_squashd$'
check "fish completion" has ' \./usr/share/fish/vendor_completions\.d/squashd\.fish$'
# One page per subcommand that `squashd --help` lists (read from the help, not the generator).
subcommands=$("$binary" --help | sed -n '/^Commands:/,/^$/p' | awk 'NR > 1 && $1 != "help" && NF { print $1 }')
missing=""
for sub in squashd $(printf 'squashd-%s ' $subcommands); do
  has " \./usr/share/man/man1/$sub\.1\.gz$" || missing+=" $sub"
done
check "a gzipped man page for squashd and each of its $(echo $subcommands | wc -w) subcommands${missing:+ (missing:$missing)}" test -z "$missing"
check "no page for a hidden subcommand" bash -c "! grep -qE 'squashd-(walk|generate-assets)' '$work/contents'"

dpkg-deb -f "$deb" Package Version Depends >"$work/control"
version=$("$binary" --version | awk '{ print $2 }')
check "control: package squashd, version $version" grep -qx "Version: $version-1" "$work/control"
check "control: depends on fuse3" grep -qE '^Depends:.*\bfuse3\b' "$work/control"
check "control: depends on libc6" grep -qE '^Depends:.*\blibc6\b' "$work/control"
dpkg-deb -e "$deb" "$work/control.d"
check "serve.toml is a conffile" grep -qx /etc/squashd/serve.toml "$work/control.d/conffiles"
check "postinst enables the unit" grep -q 'deb-systemd-helper enable squashd.service' "$work/control.d/postinst"
check "prerm stops the unit on removal only" grep -q 'stop squashd.service' "$work/control.d/prerm"

# --- installed ---------------------------------------------------------------------------------
if [ "$(id -u)" -ne 0 ]; then
  skip "installing the package needs root"
  finish
  exit
fi
if dpkg-query -W -f='${Status}' squashd 2>/dev/null | grep -q "installed"; then
  skip "a squashd package is installed already; not replacing it"
  finish
  exit
fi
for path in /usr/bin/squashd /usr/sbin/mount.fuse.squashd /sbin/mount.fuse.squashd /etc/squashd \
  /usr/lib/systemd/system/squashd.service /etc/systemd/system/squashd.service; do
  if [ -e "$path" ] || [ -L "$path" ]; then
    skip "$path exists; not installing the package over it"
    finish
    exit
  fi
done
installed=1
if ! dpkg -i "$deb" >"$work/install.log" 2>&1; then
  cat "$work/install.log" >&2
  bad "dpkg -i $deb"
  finish
  exit 1
fi
ok "dpkg -i"
check "squashd --version of the installed binary" bash -c "/usr/bin/squashd --version | grep -qx 'squashd $version'"

# The README's example: mount -t fuse.squashd IMAGE DIR -o allow_other, and the fstab line.
if ! command -v mksquashfs >/dev/null; then
  skip "mount example: mksquashfs is missing (apt-get install squashfs-tools)"
elif [ ! -c /dev/fuse ]; then
  skip "mount example: no /dev/fuse"
else
  src="$work/src"
  mkdir -p "$src/dir" "$mnt"
  head -c 3000000 /dev/urandom >"$src/dir/random.bin"
  echo "hello from a squashd package test" >"$src/hello.txt"
  ln -s dir/random.bin "$src/link"
  mksquashfs "$src" "$work/image.sqfs" -noappend -quiet >/dev/null
  check "mount.fuse.squashd is the installed squashd" \
    test "$(readlink -f /sbin/mount.fuse.squashd)" = /usr/bin/squashd
  if mount -t fuse.squashd "$work/image.sqfs" "$mnt" -o allow_other; then
    ok "mount -t fuse.squashd IMAGE DIR -o allow_other"
    # As root with allow_other, squashd takes the kernel path where the kernel has it.
    check "the mount is read-only, by FUSE or by the kernel's EROFS" \
      grep -qE "^[^ ]+ $mnt (fuse\.squashd|erofs) ro," /proc/mounts
    check "a file read through the mount equals the source" cmp -s "$src/dir/random.bin" "$mnt/dir/random.bin"
    check "the whole tree equals the source" diff -r --no-dereference "$src" "$mnt"
    check "umount" umount "$mnt"
  else
    bad "mount -t fuse.squashd IMAGE DIR -o allow_other"
  fi
  # The README's fstab line, with `fuse` so that this one takes the FUSE path.
  echo "$work/image.sqfs $mnt fuse.squashd ro,allow_other,fuse,nofail 0 0" >"$work/fstab"
  if mount -T "$work/fstab" "$mnt"; then
    check "mounted from an fstab line by FUSE" grep -q "^$work/image.sqfs $mnt fuse.squashd ro," /proc/mounts
    check "it reads the source's bytes" cmp -s "$src/hello.txt" "$mnt/hello.txt"
    check "umount (fstab)" umount "$mnt"
  else
    bad "mount from the fstab line"
  fi
fi

# Man pages where man looks for them, rendered.
if command -v man >/dev/null; then
  check "man finds squashd-mount(1) where it is installed" \
    bash -c "man -w squashd-mount | grep -qx /usr/share/man/man1/squashd-mount.1.gz"
  MANWIDTH=100 man -l /usr/share/man/man1/squashd-mount.1.gz >"$work/man.txt" 2>"$work/man.err" || true
  check "man -l renders squashd-mount(1) with its options, without warnings" \
    bash -c "grep -q -- '--ready-fd' '$work/man.txt' && grep -q 'metadata_cache=SIZE' '$work/man.txt' && ! test -s '$work/man.err'"
else
  skip "man pages: man is missing (apt-get install man-db)"
fi

# Completions: bash offers the subcommands; zsh and fish parse their files where installed.
check "bash completion sources and completes \`squashd mo\` to mount" bash -c '
  source /usr/share/bash-completion/completions/squashd &&
  complete -p squashd >/dev/null &&
  COMP_WORDS=(squashd mo) COMP_CWORD=1 && _squashd squashd mo squashd &&
  [ "${COMPREPLY[*]}" = mount ]'
for shell in zsh fish; do
  file=$( [ $shell = zsh ] && echo /usr/share/zsh/vendor-completions/_squashd ||
    echo /usr/share/fish/vendor_completions.d/squashd.fish)
  if command -v $shell >/dev/null; then
    check "$shell completion parses" $shell -n "$file"
  else
    skip "$shell completion: $shell is not installed"
  fi
done

# The service. systemd-analyze verify checks the unit as installed (ExecStart resolves to the
# installed binary, the man page it names exists) without systemd running.
if command -v systemd-analyze >/dev/null; then
  # --man=no: man is checked above; here it would drop privileges to a user `man` that
  # minimal systems (containers) lack.
  check "systemd-analyze verify squashd.service" \
    systemd-analyze verify --man=no /usr/lib/systemd/system/squashd.service
else
  skip "systemd-analyze is missing"
fi
# The unit as systemd reads it, and squashd serve under its sandbox (packaging/test-unit.sh).
source packaging/test-unit.sh
if [ -d /run/systemd/system ]; then
  check "systemctl start squashd" systemctl start squashd
  check "squashd status answers the service" bash -c "squashd status >/dev/null"
  check "systemctl stop squashd" systemctl stop squashd
else
  skip "systemctl start squashd: systemd is not PID 1 here; running the unit's command by hand instead"
  # ExecStart with the installed config, on a socket of its own.
  squashd serve --config /etc/squashd/serve.toml --socket "$work/control.sock" 2>"$work/serve.log" &
  serve=$!
  for _ in $(seq 50); do [ -S "$work/control.sock" ] && break; sleep 0.1; done
  check "squashd serve with the installed /etc/squashd/serve.toml answers status" \
    bash -c "squashd status --socket '$work/control.sock' >/dev/null"
  kill "$serve"
  check "squashd serve exits 0 on SIGTERM" wait "$serve"
fi

check "dpkg --purge squashd" bash -c "dpkg --purge squashd >'$work/purge.log' 2>&1"
installed=0
check "purge removes the binary, the helper link and /etc/squashd" \
  bash -c '! [ -e /usr/bin/squashd ] && ! [ -L /usr/sbin/mount.fuse.squashd ] && ! [ -e /etc/squashd ]'
finish
