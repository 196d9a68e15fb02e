#!/usr/bin/env bash
# The data plane (client, server, NVML, tools and what they share: common,
# protocol, transport) never includes or builds anything of the control
# plane (src/control): what both planes use lives in src/common. And the
# shared libraries are layered: common includes nothing of the others,
# protocol nothing but itself, transport only itself and common.
# usage: check_layering.sh SOURCE_DIR
set -u
src=$1/src
rc=0
data_plane="client server nvml tools common protocol transport"
control_headers=$(cd "$src/control" && find . -name '*.h' -printf '%f\n' | sort -u)
for dir in $data_plane; do
  [ -d "$src/$dir" ] || continue
  while IFS= read -r line; do
    file=${line%%:*}
    header=$(sed -n 's/.*#include "\([^"]*\)".*/\1/p' <<<"${line#*:}")
    if grep -qx "$(basename "$header")" <<<"$control_headers" &&
       [ ! -e "$(dirname "$file")/$header" ] && ! find "$src" -path "$src/control" -prune -o \
         -name "$(basename "$header")" -print | grep -q .; then
      echo "FAIL: $file includes $header, which only src/control has"; rc=1
    fi
  done < <(grep -rn '#include "' "$src/$dir" --include='*.c' --include='*.h')
  if grep -rn "src/control\|control/common" "$src/$dir" --include=CMakeLists.txt --include='*.cmake' >/dev/null; then
    echo "FAIL: src/$dir's build uses files of src/control:"
    grep -rn "src/control\|control/common" "$src/$dir" --include=CMakeLists.txt --include='*.cmake'
    rc=1
  fi
done
# No include by a path into src/control either ("../control/common/x.h").
if grep -rnE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"[^"]*control/' \
     $(for d in $data_plane; do [ -d "$src/$d" ] && echo "$src/$d"; done) \
     --include='*.c' --include='*.h'; then
  echo "FAIL: the lines above include files of src/control by path"; rc=1
fi

# The shared libraries are layered: common includes only itself, protocol
# only itself, transport itself and common. Every quoted include of theirs
# must be a file of a folder they may use.
check_uses() { # DIR ALLOWED-DIRS...
  local dir=$1; shift
  while IFS= read -r line; do
    local file=${line%%:*} header found=""
    header=$(sed -n 's/.*#include "\([^"]*\)".*/\1/p' <<<"${line#*:}")
    for ok in "$@"; do
      [ -e "$src/$ok/$header" ] && found=1
    done
    if [ -z "$found" ]; then
      echo "FAIL: $file includes $header, which is not in src/{$(IFS=,; echo "$*")}"; rc=1
    fi
  done < <(grep -rn '^[[:space:]]*#[[:space:]]*include "' "$src/$dir" --include='*.c' --include='*.h')
}
check_uses common common
check_uses protocol protocol
check_uses transport transport common

[ $rc -eq 0 ] && echo "ok: nothing under $data_plane includes or builds src/control;" \
  "common, protocol and transport include only what their layer may"
exit $rc
