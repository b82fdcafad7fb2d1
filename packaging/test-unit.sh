# Checks of the installed systemd unit, sourced by test-deb.sh once the package is installed
# (it uses test-deb.sh's ok/bad/skip/check counters and its $work directory).
#
# 1. What systemd reads in the unit, offline (`systemd-analyze security --offline`, no manager
#    needed): IP allowed for the http(s)/s3 images the config documents, no module loading by
#    the daemon itself, hence erofs pulled in as fuse is; TasksMax set.
# 2. Its effect: `squashd serve` run under the unit's sandbox serves a config with a local image
#    on the FUSE path, one on the kernel path and one over HTTP from nginx on 127.0.0.1, through
#    a disk cache. With systemd as PID 1 the sandbox is the unit's own [Service] settings, given
#    to `systemd-run -p`; without it, what can be applied by hand is: the capability bounding
#    set and no_new_privs (setpriv), TasksMax (a pids cgroup with pids.max, as systemd sets it),
#    LimitNOFILE and UMask. The rest (seccomp filters, address families, device cgroup) needs
#    systemd and is reported as skipped.

unit=/usr/lib/systemd/system/squashd.service
# What a failure half-way leaves running, for test-deb.sh's cleanup (unit_cleanup).
unit_pids="" unit_cgroup="" unit_transient=""
unit_cleanup() {
  if [ -n "$unit_transient" ] && [ -d /run/systemd/system ]; then
    systemctl stop "$unit_transient" 2>/dev/null || true
  fi
  local pid
  for pid in $unit_pids; do kill "$pid" 2>/dev/null || true; done
  for pid in $unit_pids; do wait "$pid" 2>/dev/null || true; done
  awk -v under="$work/unit/" 'index($2, under) == 1 { print $2 }' /proc/mounts |
    while read -r m; do umount -l "$m" || true; done
  if [ -n "$unit_cgroup" ]; then rmdir "$unit_cgroup" 2>/dev/null || true; fi
  unit_pids="" unit_cgroup="" unit_transient=""
}
# unit_value KEY: the value of the unit's KEY= line (the unit assigns each once).
unit_value() { sed -n "s/^$1=//p" "$unit" | tail -n 1; }

# --- 1. the unit as systemd reads it --------------------------------------------------------
if systemd-analyze security --offline=true --json=short "$unit" >"$work/security.json" 2>"$work/security.err"; then
  # exposed SETTING: systemd reports SETTING as not restricted ("set":false).
  exposed() { grep -qF "\"set\":false,\"name\":\"$1\"" "$work/security.json"; }
  restricted() { grep -qF "\"set\":true,\"name\":\"$1\"" "$work/security.json"; }
  check "systemd reads the unit as allowing AF_INET and AF_INET6 (http://, https://, s3:// images)" \
    exposed 'RestrictAddressFamilies=~AF_(INET|INET6)'
  check "systemd reads the unit as denying no IP address (IPAddressDeny= unset)" exposed 'IPAddressDeny='
  loads_no_module() {
    restricted 'CapabilityBoundingSet=~CAP_SYS_MODULE' && restricted 'SystemCallFilter=~@module'
  }
  check "the daemon cannot load kernel modules under the unit (no CAP_SYS_MODULE, no @module)" \
    loads_no_module
else
  skip "systemd-analyze security --offline cannot read the unit here: $(head -c 200 "$work/security.err")"
fi
check "so the unit pulls in erofs as it pulls in fuse (Wants= and After= modprobe@erofs.service)" \
  bash -c "grep -qx 'Wants=modprobe@erofs.service' '$unit' && grep -qx 'After=modprobe@erofs.service' '$unit'"
tasks_max=$(unit_value TasksMax)
check "the unit sets TasksMax (${tasks_max:-none})" test -n "$tasks_max"

# --- 2. squashd serve under the unit's sandbox --------------------------------------------
sandbox_test() {
  local dir="$work/unit" src nginx_pid="" port="" serve_pid="" cgroup="" launcher=() line cap
  src="$dir/src"
  mkdir -p "$src/d" "$dir/m-fuse" "$dir/m-kernel" "$dir/m-http" "$dir/www" "$dir/nginx"
  head -c 3000000 /dev/urandom >"$src/d/random.bin"
  echo "served under the unit's sandbox" >"$src/hello.txt"
  mksquashfs "$src" "$dir/www/image.sqfs" -noappend -quiet >/dev/null

  # nginx on 127.0.0.1 serves the image with Range (python's http.server has no Range).
  if command -v nginx >/dev/null || [ -x /usr/sbin/nginx ]; then
    local nginx_bin
    nginx_bin=$(command -v nginx || echo /usr/sbin/nginx)
    for _ in 1 2 3 4 5; do
      port=$((20000 + RANDOM % 40000))
      cat >"$dir/nginx/nginx.conf" <<EOF
daemon off;
master_process off;
worker_processes 1;
pid "$dir/nginx/nginx.pid";
error_log "$dir/nginx/error.log" warn;
events { worker_connections 64; }
http {
    access_log off;
    client_body_temp_path "$dir/nginx";
    proxy_temp_path "$dir/nginx";
    fastcgi_temp_path "$dir/nginx";
    uwsgi_temp_path "$dir/nginx";
    scgi_temp_path "$dir/nginx";
    server { listen 127.0.0.1:$port; root "$dir/www"; }
}
EOF
      "$nginx_bin" -p "$dir/nginx" -c "$dir/nginx/nginx.conf" -e "$dir/nginx/error.log" &
      nginx_pid=$!
      unit_pids+=" $nginx_pid"
      for _ in $(seq 50); do
        (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
        kill -0 "$nginx_pid" 2>/dev/null || break
        sleep 0.1
      done
      if kill -0 "$nginx_pid" 2>/dev/null; then break; fi
      nginx_pid="" port=""
    done
  fi

  {
    echo "socket = \"$dir/control.sock\""
    echo "disk_cache = \"$dir/cache\""
    printf '[[image]]\npath = "%s"\nmountpoint = "%s"\noptions = "fuse"\n' "$dir/www/image.sqfs" "$dir/m-fuse"
  } >"$dir/serve.toml"
  local kernel=0 http=0
  if grep -qw erofs /proc/filesystems; then
    kernel=1
    printf '[[image]]\npath = "%s"\nmountpoint = "%s"\noptions = "allow_other,kernel"\n' "$dir/www/image.sqfs" "$dir/m-kernel" >>"$dir/serve.toml"
  else
    skip "the kernel path under the unit: this kernel has no EROFS loaded (modprobe@erofs would load it)"
  fi
  if [ -n "$port" ]; then
    http=1
    printf '[[image]]\npath = "%s"\nmountpoint = "%s"\noptions = "fuse"\n' "http://127.0.0.1:$port/image.sqfs" "$dir/m-http" >>"$dir/serve.toml"
  else
    skip "an http:// image under the unit: nginx is not installed or would not start (apt-get install nginx-light)"
  fi

  local transient="squashd-unit-test-$$"
  unit_transient=$transient
  if [ -d /run/systemd/system ]; then
    # The unit's own [Service] settings, but for how it starts and restarts.
    local props=()
    while IFS= read -r line; do
      props+=(-p "$line")
    done < <(sed -n '/^\[Service\]/,/^\[/{/^[A-Z][A-Za-z]*=/p}' "$unit" |
      grep -vE '^(Type|ExecStart|ExecReload|Restart|RestartSec|RuntimeDirectory|RuntimeDirectoryMode)=')
    launcher=(systemd-run --quiet --collect --unit="$transient" -p Type=notify "${props[@]}" --)
  else
    skip "RestrictAddressFamilies=, SystemCallFilter=, DevicePolicy=, DeviceAllow=, MemoryDenyWriteExecute=, RestrictNamespaces= and the like: systemd applies them (seccomp, the device cgroup) and it is not PID 1 here; the capabilities, TasksMax, LimitNOFILE and UMask are applied by hand instead"
    if ! command -v setpriv >/dev/null; then
      skip "the unit's sandbox by hand: setpriv (util-linux) is missing"
      unit_cleanup
      return
    fi
    # CapabilityBoundingSet=CAP_A CAP_B -> setpriv's -all,+a,+b.
    local bounding="-all"
    for cap in $(unit_value CapabilityBoundingSet); do
      cap=${cap#CAP_}
      bounding+=",+${cap,,}"
    done
    local no_new_privs=()
    [ "$(unit_value NoNewPrivileges)" = yes ] && no_new_privs=(--no-new-privs)
    # TasksMax is the pids controller's pids.max of the service's cgroup.
    local pids_root=""
    if [ -w /sys/fs/cgroup/pids ]; then
      pids_root=/sys/fs/cgroup/pids
    elif grep -qw pids /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null; then
      pids_root=/sys/fs/cgroup
    fi
    if [ -n "$pids_root" ] && [ -n "$tasks_max" ] && mkdir "$pids_root/$transient" 2>/dev/null; then
      cgroup="$pids_root/$transient"
      unit_cgroup=$cgroup
      echo "$tasks_max" >"$cgroup/pids.max"
    else
      skip "TasksMax by hand: the unit sets none, or no pids cgroup can be made here"
    fi
    launcher=(bash -c '[ -z "$1" ] || echo $$ >"$1/cgroup.procs"; umask "$2"; ulimit -n "$3"; shift 3; exec "$@"'
      sandbox "$cgroup" "$(unit_value UMask)" "$(unit_value LimitNOFILE)"
      setpriv --bounding-set="$bounding" --inh-caps=-all "${no_new_privs[@]}" --)
  fi

  if [ -d /run/systemd/system ]; then
    # Type=notify: systemd-run returns once the daemon said READY=1 (or failed).
    check "systemd-run with the unit's settings starts squashd serve" \
      "${launcher[@]}" /usr/bin/squashd serve --config "$dir/serve.toml"
  else
    "${launcher[@]}" /usr/bin/squashd serve --config "$dir/serve.toml" 2>"$dir/serve.log" &
    serve_pid=$!
    unit_pids+=" $serve_pid"
  fi
  local want=$((1 + kernel + http)) up=0
  for _ in $(seq 100); do
    up=$(grep -c " $dir/m-" /proc/mounts || true)
    [ "$up" -ge "$want" ] && break
    sleep 0.1
  done
  check "under the unit's sandbox, squashd serve attaches all $want images of the config" \
    test "$up" -ge "$want"
  [ "$up" -ge "$want" ] || cat "$dir/serve.log" >&2 2>/dev/null || true
  check "squashd status answers it" bash -c "/usr/bin/squashd status --socket '$dir/control.sock' >/dev/null"
  check "the FUSE path reads the source's bytes" cmp -s "$src/d/random.bin" "$dir/m-fuse/d/random.bin"
  if [ "$kernel" -eq 1 ]; then
    check "the kernel path is taken (erofs in /proc/mounts) and reads the source's bytes" \
      bash -c "grep -q '^[^ ]* $dir/m-kernel erofs ' /proc/mounts && cmp -s '$src/d/random.bin' '$dir/m-kernel/d/random.bin'"
  fi
  if [ "$http" -eq 1 ]; then
    check "the http:// image reads the source's bytes" \
      bash -c "cmp -s '$src/d/random.bin' '$dir/m-http/d/random.bin' && cmp -s '$src/hello.txt' '$dir/m-http/hello.txt'"
    check "its disk cache is private to the daemon's user (0700)" test "$(stat -c %a "$dir/cache" 2>/dev/null)" = 700
  fi
  local daemon_pid
  daemon_pid=$(/usr/bin/squashd status --socket "$dir/control.sock" --json 2>/dev/null |
    sed -n 's/.*"pid": *\([0-9]*\).*/\1/p' | head -n 1)
  if [ -n "$daemon_pid" ] && command -v capsh >/dev/null; then
    # The unit's capabilities as capsh names them: CAP_SYS_ADMIN -> cap_sys_admin, sorted.
    local want_caps have_caps
    want_caps=$(for cap in $(unit_value CapabilityBoundingSet); do echo "${cap,,}"; done | sort | paste -sd,)
    have_caps=$(capsh --decode="$(sed -n 's/^CapEff:\t//p' "/proc/$daemon_pid/status")" |
      sed 's/.*=//' | tr , '\n' | sort | paste -sd,)
    check "the daemon's effective capabilities are the unit's bounding set ($have_caps)" \
      test "$have_caps" = "$want_caps"
    check "it runs with no_new_privs and umask $(unit_value UMask), as the unit says" \
      bash -c "grep -qx 'NoNewPrivs:.1' /proc/$daemon_pid/status && grep -qx 'Umask:.$(unit_value UMask)' /proc/$daemon_pid/status"
  else
    skip "the daemon's capabilities: capsh is missing or the daemon's pid unknown"
  fi
  if [ -n "$cgroup" ]; then
    check "the daemon runs in the pids cgroup standing for TasksMax=$tasks_max ($(cat "$cgroup/pids.current") tasks for $want images, after reading each)" \
      grep -qx "${daemon_pid:-none}" "$cgroup/cgroup.procs"
  elif [ -n "$daemon_pid" ]; then
    ok "the daemon runs $(ls "/proc/$daemon_pid/task" | wc -l) tasks for $want images (TasksMax=$tasks_max)"
  fi

  if [ -d /run/systemd/system ]; then
    check "systemctl stop $transient" systemctl stop "$transient"
  else
    kill "$serve_pid"
    check "squashd serve under the unit's sandbox exits 0 on SIGTERM" wait "$serve_pid"
  fi
  check "and leaves none of its mounts" bash -c "! grep -q ' $dir/m-' /proc/mounts"
  unit_cleanup
}
if ! command -v mksquashfs >/dev/null; then
  skip "the unit's sandbox: mksquashfs is missing (apt-get install squashfs-tools)"
elif [ ! -c /dev/fuse ]; then
  skip "the unit's sandbox: no /dev/fuse"
else
  sandbox_test
fi
