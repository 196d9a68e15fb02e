#!/usr/bin/env bash
# The data plane (client, server, NVML, tools and what they share: common,
# protocol, transport) never includes or builds anything of the control
# plane (src/control): what both planes use lives in src/common.
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
[ $rc -eq 0 ] && echo "ok: nothing under $data_plane includes or builds src/control"
exit $rc
