#!/usr/bin/env bash
# The cooperative-matrix lane: a second lavapipe, from Mesa 26.x, that lists
# VK_KHR_cooperative_matrix, kept in a private prefix next to the system's Mesa.
#
# No Mesa 26 build loads on Debian 12 (they need glibc >= 2.38), so this downloads -- never
# installs -- Debian 13's mesa-vulkan-drivers from trixie-backports together with the whole
# run-time closure apt resolves for it (libc6, libstdc++6, libllvm19, the xcb/X11/wayland
# libraries, libvulkan1, ...), unpacks them with `dpkg-deb -x` into a private root, writes an
# ICD json whose library_path is absolute, and starts the command through that root's own
# dynamic loader:
#     ROOT/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 --library-path LIBS python ...
# with VK_DRIVER_FILES naming that json. Debian 13's vulkan-validationlayers (from trixie) is
# part of the closure too: Debian 12's layer predates VK_KHR_cooperative_matrix. The lane
# writes its own explicit-layer json (absolute library_path into the root) and sets
# VK_LAYER_PATH to that directory only, so the system's layer is never picked up.
# LD_LIBRARY_PATH is not used: it would leak into children (glslangValidator, compilers),
# which must keep running on the system's glibc.
# Nothing outside the lane directory is written; the system's apt state is untouched (apt
# runs with its own source list, lists, cache and an empty dpkg status).
#
# Usage:
#   ci/coopmat-lane.sh provision          download + unpack (cached), write the ICD, run the probe
#   ci/coopmat-lane.sh run CMD [ARGS...]  provision if needed, then run CMD under the lane
#   ci/coopmat-lane.sh env                print the variables and paths the lane uses
#
# CMD may be a python (e.g. .venv/bin/python -m pytest -m coopmat), a script whose shebang
# names a python (e.g. .venv/bin/pytest), or any other dynamically linked ELF program.
# Shell scripts are refused: everything they start would run outside the lane.
#
# Environment:
#   VKUMD_LANE_DIR      lane directory (default $HOME/.cache/vkumd/mesa26-lane)
#   VKUMD_LANE_MIRROR   Debian mirror (default http://deb.debian.org/debian)
#   VKUMD_LANE_SUITE    suite Mesa comes from (default trixie-backports)
#   VKUMD_LANE_MESA     exact mesa-vulkan-drivers version to pin (default: newest in suite)
#   VKUMD_LANE_REFRESH  1: refresh the package lists and re-resolve even when cached
#   VKUMD_LANE_KEYRING  keyring apt checks the trixie archive with
#                       (default /usr/share/keyrings/debian-archive-keyring.gpg)
# Exported into the command it runs (besides VK_DRIVER_FILES and VK_LAYER_PATH; a caller's
# VK_ADD_LAYER_PATH is dropped, it could shadow the lane's validation layer):
#   VKUMD_LANE_LDSO, VKUMD_LANE_LIBRARY_PATH  to start another process under the lane
#                       ("$VKUMD_LANE_LDSO" --library-path "$VKUMD_LANE_LIBRARY_PATH" BIN ...)
#
# Note for tests: under the lane sys.executable is still .venv/bin/python, so a child started
# as [sys.executable, ...] runs on the system's glibc while VK_DRIVER_FILES still names the
# lane's ICD: Vulkan fails to load in that child. Respawn Vulkan children through
# VKUMD_LANE_LDSO / VKUMD_LANE_LIBRARY_PATH instead.
set -euo pipefail

# Bump when the layout or the way the lane is put together changes: invalidates the stamp.
LANE_FORMAT=2

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
lane="${VKUMD_LANE_DIR:-${HOME:-/root}/.cache/vkumd/mesa26-lane}"
mirror="${VKUMD_LANE_MIRROR:-http://deb.debian.org/debian}"
suite="${VKUMD_LANE_SUITE:-trixie-backports}"
release="${suite%%-*}"   # trixie-backports -> trixie: the rest of the closure comes from there
keyring="${VKUMD_LANE_KEYRING:-/usr/share/keyrings/debian-archive-keyring.gpg}"
pin="${VKUMD_LANE_MESA:-}"
arch=amd64
multiarch=x86_64-linux-gnu

aptdir="$lane/apt"
debs="$lane/debs"
root="$lane/root"
icd="$lane/lvp_icd.x86_64.json"
layerdir="$lane/explicit_layer.d"
layer_json="$layerdir/VkLayer_khronos_validation.json"
layer_lib="$root/usr/lib/$multiarch/libVkLayer_khronos_validation.so"
stamp="$lane/stamp"
libpath="$root/usr/lib/$multiarch:$root/lib/$multiarch"
ldso="$root/usr/lib/$multiarch/ld-linux-x86-64.so.2"

say() { printf 'coopmat-lane: %s\n' "$*" >&2; }
die() { printf 'coopmat-lane: ERROR: %s\n' "$*" >&2; exit 1; }

# What the lane asks apt for; apt adds everything these depend on.
wanted() {
  if [ -n "$pin" ]; then echo "mesa-vulkan-drivers=$pin"; else echo "mesa-vulkan-drivers/$suite"; fi
  # Named explicitly so that they come from the same release even if an old copy would do.
  echo libc6 libstdc++6 libgcc-s1 libvulkan1
  # Khronos validation from the same release (Debian 12's 1.3.239 predates the extension).
  echo vulkan-validationlayers
}

apt_opts() {
  printf '%s\n' \
    -o "Dir::Etc::SourceList=$aptdir/sources.list" \
    -o "Dir::Etc::SourceParts=/dev/null" \
    -o "Dir::Etc::Preferences=/dev/null" \
    -o "Dir::Etc::PreferencesParts=/dev/null" \
    -o "Dir::State=$aptdir/state" \
    -o "Dir::State::Lists=$aptdir/lists" \
    -o "Dir::State::status=$aptdir/state/status" \
    -o "Dir::Cache=$aptdir/cache" \
    -o "Dir::Cache::pkgcache=" \
    -o "Dir::Cache::srcpkgcache=" \
    -o "APT::Architecture=$arch" \
    -o "APT::Architectures=$arch" \
    -o "APT::Default-Release=" \
    -o "APT::Install-Recommends=false" \
    -o "APT::Install-Suggests=false" \
    -o "APT::Sandbox::User=root" \
    -o "Debug::NoLocking=true" \
    -o "Acquire::Languages=none" \
    -o "Acquire::Retries=3"
}

apt_run() {  # apt_run apt-get|apt-cache ARGS...
  local tool=$1; shift
  local opts; mapfile -t opts < <(apt_opts)
  "$tool" "${opts[@]}" "$@"
}

check_host() {
  [ "$(uname -m)" = x86_64 ] || die "the lane is built for x86_64, this is $(uname -m)"
  # lavapipe's cooperative-matrix path needs AVX (see DESIGN.md).
  grep -qw avx /proc/cpuinfo || die "this CPU has no AVX: Mesa 26's lavapipe lists no cooperative matrix without it"
}

refresh_lists() {
  local need=${VKUMD_LANE_REFRESH:-0}
  mkdir -p "$aptdir/lists/partial" "$aptdir/cache/archives/partial" "$aptdir/state"
  : > "$aptdir/state/status.new"; mv -f "$aptdir/state/status.new" "$aptdir/state/status"
  local sources
  sources=$(printf 'deb [arch=%s signed-by=%s] %s %s main\n' \
    "$arch" "$keyring" "$mirror" "$release" "$arch" "$keyring" "$mirror" "$suite")
  if [ "$suite" = "$release" ]; then sources=$(printf '%s\n' "$sources" | head -n1); fi
  if [ ! -f "$aptdir/sources.list" ] || [ "$(cat "$aptdir/sources.list")" != "$sources" ]; then
    printf '%s\n' "$sources" > "$aptdir/sources.list"
    need=1
  fi
  if ! ls "$aptdir/lists/"*_Packages >/dev/null 2>&1; then need=1; fi
  [ "$need" = 1 ] || return 0
  [ -r "$keyring" ] || die "no keyring at $keyring (apt-get install debian-archive-keyring, or set VKUMD_LANE_KEYRING)"
  say "refreshing package lists for $(sort -u <<<"$release"$'\n'"$suite" | tr '\n' ' ')from $mirror (private apt state in $aptdir)"
  if ! apt_run apt-get -q update >"$aptdir/update.log" 2>&1 ||
     grep -qE '^(W|E): .*(NO_PUBKEY|not signed|Failed to fetch|could not be verified)' "$aptdir/update.log"; then
    cat "$aptdir/update.log" >&2
    die "apt-get update for $release/$suite failed (network? keyring without the Debian 13 keys? -- Debian 12's debian-archive-keyring >= 2023.3 has them)"
  fi
}

# Prints "package=version" lines: the closure apt resolves for an empty system.
resolve() {
  local out
  # shellcheck disable=SC2046
  if ! out=$(apt_run apt-get -s -q install $(wanted) 2>&1); then
    printf '%s\n' "$out" >&2
    die "apt could not resolve $(wanted | tr '\n' ' ')"
  fi
  printf '%s\n' "$out" | awk '/^Inst /{v=$3; gsub(/[()]/,"",v); print $2"="v}' | sort
}

lane_ok() {  # the unpacked lane is whole and matches the stamp
  [ -f "$stamp" ] && [ -x "$ldso" ] && [ -f "$icd" ] &&
    [ -f "$root/usr/lib/$multiarch/libvulkan_lvp.so" ] && [ -f "$layer_lib" ] &&
    [ "$(head -n1 "$stamp")" = "format=$LANE_FORMAT" ]
}

write_icd() {
  local lib="$root/usr/lib/$multiarch/libvulkan_lvp.so" api
  [ -f "$lib" ] || die "the unpacked mesa-vulkan-drivers has no $lib"
  # Keep the api_version Debian's own json declares; only the library path changes.
  api=$(sed -n 's/.*"api_version" *: *"\([^"]*\)".*/\1/p' "$root/usr/share/vulkan/icd.d/lvp_icd.json" 2>/dev/null | head -n1)
  cat > "$icd.new" <<EOF
{
    "ICD": {
        "api_version": "${api:-1.4.0}",
        "library_path": "$lib"
    },
    "file_format_version": "1.0.1"
}
EOF
  mv -f "$icd.new" "$icd"
}

# The lane's own explicit-layer directory: Debian 13's validation json with library_path
# rewritten to the absolute path of the unpacked .so (Debian's names it without a path).
write_layer() {
  local src="$root/usr/share/vulkan/explicit_layer.d/VkLayer_khronos_validation.json"
  [ -f "$layer_lib" ] || die "the unpacked vulkan-validationlayers has no $layer_lib"
  [ -f "$src" ] || die "the unpacked vulkan-validationlayers has no $src"
  mkdir -p "$layerdir"
  sed 's|"library_path" *: *"[^"]*"|"library_path": "'"$layer_lib"'"|' "$src" > "$layer_json.new"
  grep -q "\"library_path\": \"$layer_lib\"" "$layer_json.new" ||
    die "could not rewrite library_path in $src"
  mv -f "$layer_json.new" "$layer_json"
}

provision_files() {
  check_host
  command -v dpkg-deb >/dev/null || die "dpkg-deb not found"
  command -v apt-get >/dev/null || die "apt-get not found"
  mkdir -p "$lane"
  # Two jobs sharing one lane directory take turns (fd 9 stays open until this shell exits).
  if command -v flock >/dev/null; then
    exec 9>"$lane/.lock"
    flock -w 900 9 || die "timed out waiting for another provision of $lane (lock $lane/.lock)"
  fi
  local refresh=${VKUMD_LANE_REFRESH:-0}
  if lane_ok && [ "$refresh" != 1 ]; then
    say "cached lane in $lane (mesa $(sed -n 's/^mesa-vulkan-drivers=//p' "$stamp"), validation layer $(sed -n 's/^vulkan-validationlayers=//p' "$stamp")); VKUMD_LANE_REFRESH=1 re-resolves"
    write_icd
    write_layer
    return 0
  fi
  local t0=$SECONDS
  refresh_lists
  local closure
  closure=$(resolve)
  [ -n "$closure" ] || die "apt resolved nothing for $(wanted | tr '\n' ' ')"
  grep -q '^mesa-vulkan-drivers=' <<<"$closure" || die "apt resolved no mesa-vulkan-drivers"
  grep -q '^vulkan-validationlayers=' <<<"$closure" || die "apt resolved no vulkan-validationlayers"
  local mesa_ver
  mesa_ver=$(sed -n 's/^mesa-vulkan-drivers=//p' <<<"$closure")
  case "$mesa_ver" in
    26.*|2[7-9].*|[3-9][0-9].*) ;;
    *) die "$suite offers mesa-vulkan-drivers $mesa_ver; the lane needs Mesa >= 26 (set VKUMD_LANE_SUITE or VKUMD_LANE_MESA)" ;;
  esac
  local key
  key=$(printf 'format=%s\nmirror=%s\nsuite=%s\n%s\n' "$LANE_FORMAT" "$mirror" "$suite" "$closure")
  if lane_ok && [ "$(cat "$stamp")" = "$key" ]; then
    say "lane in $lane is current (mesa-vulkan-drivers $mesa_ver)"
    rm -rf "$aptdir/lists"
    write_icd
    write_layer
    return 0
  fi
  say "mesa-vulkan-drivers $mesa_ver: $(wc -l <<<"$closure") packages to download"

  mkdir -p "$debs"
  local -a get=()
  local pv pkg ver file
  while read -r pv; do
    pkg=${pv%%=*}; ver=${pv#*=}
    file="$debs/${pkg}_${ver//:/%3a}_"*.deb
    # shellcheck disable=SC2086
    if ! ls $file >/dev/null 2>&1; then get+=("$pv"); fi
  done <<<"$closure"
  if [ ${#get[@]} -gt 0 ]; then
    say "downloading ${#get[@]} .deb(s) into $debs"
    (cd "$debs" && apt_run apt-get -q download "${get[@]}") >&2 ||
      die "apt-get download failed for: ${get[*]}"
  else
    say "all .debs already in $debs"
  fi

  say "unpacking into $root"
  local tmp="$lane/root.new"
  rm -rf "$tmp"; mkdir -p "$tmp"
  while read -r pv; do
    pkg=${pv%%=*}; ver=${pv#*=}
    # shellcheck disable=SC2206
    local files=($debs/${pkg}_${ver//:/%3a}_*.deb)
    [ -f "${files[0]}" ] || die "missing download for $pv in $debs"
    dpkg-deb -x "${files[0]}" "$tmp"
  done <<<"$closure"
  # Debian 13 is merged-/usr; older layouts keep ld.so and libc in /lib.
  if [ ! -e "$tmp/usr/lib/$multiarch/ld-linux-x86-64.so.2" ] && [ -e "$tmp/lib/$multiarch/ld-linux-x86-64.so.2" ]; then
    ln -s "../../../lib/$multiarch/ld-linux-x86-64.so.2" "$tmp/usr/lib/$multiarch/ld-linux-x86-64.so.2"
  fi
  [ -e "$tmp/usr/lib/$multiarch/ld-linux-x86-64.so.2" ] || die "no ld-linux-x86-64.so.2 in the unpacked libc6"
  # Drop what the lane never uses: documentation, translations, man pages.
  rm -rf "$tmp/usr/share/doc" "$tmp/usr/share/man" "$tmp/usr/share/locale" "$tmp/usr/share/lintian" \
         "$tmp/usr/share/bug"
  # Only lavapipe is wanted: the GPU drivers in the same package are ~120 MB more. Mesa's
  # layers stay (the system's implicit device_select json names its .so without a path, and
  # under the lane that resolves to the lane's copy).
  local drv
  for drv in "$tmp/usr/lib/$multiarch"/libvulkan_*.so; do
    [ "${drv##*/}" = libvulkan_lvp.so ] || rm -f "$drv"
  done
  find "$tmp/usr/share/vulkan/icd.d" -name '*.json' ! -name 'lvp_icd*.json' -delete 2>/dev/null || true
  rm -rf "$root.old"
  if [ -d "$root" ]; then mv "$root" "$root.old"; fi
  mv "$tmp" "$root"
  rm -rf "$root.old"

  check_linkage
  write_icd
  write_layer
  printf '%s\n' "$key" > "$stamp.new"; mv -f "$stamp.new" "$stamp"
  # The .debs are unpacked; keeping them would only double the cache.
  rm -rf "$debs"
  # So are the package lists (20 MB); a refresh fetches them again in seconds.
  rm -rf "$aptdir/lists"
  say "lane provisioned in $((SECONDS - t0)) s: mesa-vulkan-drivers $mesa_ver, vulkan-validationlayers $(sed -n 's/^vulkan-validationlayers=//p' <<<"$closure") in $root"
}

# Every library lavapipe needs must resolve inside the lane root (else it would silently pick
# a Debian 12 copy and might not load).
check_linkage() {
  local out missing
  out=$("$ldso" --library-path "$libpath" --list "$root/usr/lib/$multiarch/libvulkan_lvp.so" 2>&1) ||
    { printf '%s\n' "$out" >&2; die "the lane's libvulkan_lvp.so does not link under its own ld.so"; }
  missing=$(printf '%s\n' "$out" | grep -E 'not found' || true)
  [ -z "$missing" ] || { printf '%s\n' "$out" >&2; die "libvulkan_lvp.so misses libraries: $missing"; }
  local llvm outside
  llvm=$(printf '%s\n' "$out" | awk '/libLLVM/{print $1" => "$3; exit}')
  say "libvulkan_lvp.so links ${llvm:-no libLLVM?}"
  outside=$(printf '%s\n' "$out" | awk -v r="$root" '$2=="=>" && index($3, r)!=1 {print $1}' | tr '\n' ' ')
  [ -z "$outside" ] || say "note: found outside the lane root: $outside"
  out=$("$ldso" --library-path "$libpath" --list "$layer_lib" 2>&1) ||
    { printf '%s\n' "$out" >&2; die "the lane's validation layer does not link under its own ld.so"; }
  missing=$(printf '%s\n' "$out" | grep -E 'not found' || true)
  [ -z "$missing" ] || { printf '%s\n' "$out" >&2; die "$layer_lib misses libraries: $missing"; }
}

# build_argv CMD ARGS...: fills the array `argv` with the command line that runs CMD under the lane.
build_argv() {
  local cmd=$1; shift
  local path real first interp
  if [[ "$cmd" == */* ]]; then path=$cmd; else path=$(command -v -- "$cmd" || true); fi
  [ -n "$path" ] && [ -e "$path" ] || die "command not found: $cmd"
  # Keep the unresolved path as argv[0]: a venv's python finds its pyvenv.cfg from it.
  [[ "$path" == /* ]] || path="$PWD/$path"
  real=$(readlink -f -- "$path")
  if head -c4 -- "$real" 2>/dev/null | grep -q 'ELF'; then
    argv=("$ldso" --library-path "$libpath" --argv0 "$path" "$real" "$@")
    return 0
  fi
  first=$(head -n1 -- "$real" 2>/dev/null || true)
  if [[ "$first" == '#!'* ]]; then
    # "#!/path/python" or "#!/usr/bin/env python3": run the interpreter under the lane.
    read -r -a interp <<<"${first#\#!}"
    if [ "${interp[0]##*/}" = env ] && [ ${#interp[@]} -ge 2 ]; then
      interp=("$(command -v -- "${interp[1]}" || echo "${interp[1]}")" "${interp[@]:2}")
    fi
    case "${interp[0]##*/}" in
      python*)
        local ireal
        ireal=$(readlink -f -- "${interp[0]}")
        argv=("$ldso" --library-path "$libpath" --argv0 "${interp[0]}" "$ireal" "${interp[@]:1}" "$path" "$@")
        return 0 ;;
    esac
  fi
  die "$cmd is neither an ELF program nor a python script; run a python or a binary (children of a shell script would leave the lane)"
}

lane_env() {
  export VK_DRIVER_FILES="$icd"
  # Older loaders read only the old name.
  export VK_ICD_FILENAMES="$icd"
  # Explicit layers come from the lane only: VK_LAYER_PATH replaces the loader's default
  # search (/usr/share/vulkan/explicit_layer.d holds Debian 12's 1.3.239 validation layer).
  # VK_ADD_LAYER_PATH would be searched first, so a caller's value is dropped.
  export VK_LAYER_PATH="$layerdir"
  if [ -n "${VK_ADD_LAYER_PATH:-}" ]; then
    say "note: ignoring VK_ADD_LAYER_PATH=$VK_ADD_LAYER_PATH under the lane"
  fi
  unset VK_ADD_LAYER_PATH
  export VKUMD_LANE_LDSO="$ldso"
  export VKUMD_LANE_LIBRARY_PATH="$libpath"
}

cmd_provision() {
  provision_files
  say "verifying with ci/coopmat_probe.py"
  local py="${VKUMD_LANE_PYTHON:-}"
  if [ -z "$py" ]; then
    if [ -x "$here/../.venv/bin/python" ]; then py="$here/../.venv/bin/python"; else py=$(command -v python3); fi
  fi
  local -a argv
  build_argv "$py" "$here/coopmat_probe.py"
  lane_env
  "${argv[@]}" || die "the probe failed under the lane (see above): the lane is not usable"
  say "lane ready: $(sed -n 's/^mesa-vulkan-drivers=/mesa-vulkan-drivers /p' "$stamp")"
}

cmd_run() {
  [ $# -ge 1 ] || die "usage: $0 run CMD [ARGS...]"
  provision_files
  local -a argv
  build_argv "$@"
  lane_env
  say "running under the lane: ${argv[*]}"
  exec "${argv[@]}"
}

cmd_env() {
  cat <<EOF
VKUMD_LANE_DIR=$lane
VKUMD_LANE_MIRROR=$mirror
VKUMD_LANE_SUITE=$suite
VKUMD_LANE_MESA=$pin
VKUMD_LANE_KEYRING=$keyring
VK_DRIVER_FILES=$icd
VK_LAYER_PATH=$layerdir
VKUMD_LANE_LDSO=$ldso
VKUMD_LANE_LIBRARY_PATH=$libpath
lane_root=$root
lane_stamp=$stamp
lane_provisioned=$(lane_ok && echo yes || echo no)
mesa_vulkan_drivers=$( [ -f "$stamp" ] && sed -n 's/^mesa-vulkan-drivers=//p' "$stamp")
vulkan_validationlayers=$( [ -f "$stamp" ] && sed -n 's/^vulkan-validationlayers=//p' "$stamp")
EOF
}

case "${1:-}" in
  provision) shift; [ $# -eq 0 ] || die "provision takes no arguments"; cmd_provision ;;
  run) shift; cmd_run "$@" ;;
  env) cmd_env ;;
  *) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
