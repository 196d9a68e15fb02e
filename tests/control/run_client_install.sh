#!/usr/bin/env bash
# flyt-client-manager --install / --uninstall under --root: the files it writes, the
# record it keeps, that it refuses files it did not create, that ld.so.preload keeps
# other lines, Flyt's libnvidia-ml.so.1 installed only when it lies next to libcuda.so.1,
# an update over an install of the retired libcudart.so.13, and (as root, where chroot
# works) that the dynamic loader of a program linked against "NVIDIA's" driver
# libcuda.so.1 really picks Flyt's after --install and NVIDIA's again after --uninstall,
# with NVIDIA's confs and files in place.
# usage: run_client_install.sh CMGR FLYT_LIB CC
set -u
cmgr=$1 flytlib=$2 cc=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rc=0
pass() { echo "ok: $*"; }
fail() { echo "FAIL: $*"; rc=1; }
R=$tmp/root
P=/usr/local/lib/flyt
manifest=$R/var/lib/flyt/client-install.manifest
# Flyt's libcuda.so.1 alone in a folder (whatever else the build folder holds), and with a
# stand-in for Flyt's NVML beside it (an ELF file with Flyt's "flyt: " notices)
mkdir -p "$tmp/alone" "$tmp/with-nvml"
cp "$flytlib" "$tmp/alone/libcuda.so.1"
cp "$flytlib" "$tmp/with-nvml/libcuda.so.1"
{ head -c 64 "$flytlib"; printf 'flyt: NVML stand-in\n'; } > "$tmp/with-nvml/libnvidia-ml.so.1"
flytlib=$tmp/alone/libcuda.so.1

# a root with a pre-existing /etc (kept by --uninstall) and NVIDIA's loader confs: the
# driver's libcuda.so.1 in the multiarch folder (named by x86_64-linux-gnu.conf, as on
# Debian and Ubuntu), the toolkit's libraries in cuda-13.0
D=/usr/lib/x86_64-linux-gnu
mkdir -p "$R/etc/ld.so.conf.d" "$R/usr/local/cuda-13.0/lib" "$R$D"
echo "/usr/local/cuda-13.0/lib" > "$R/etc/ld.so.conf.d/zz-cuda-13-0.conf"
printf '# Multiarch support\n/usr/local/lib/x86_64-linux-gnu\n%s\n' "$D" > "$R/etc/ld.so.conf.d/x86_64-linux-gnu.conf"
echo "include /etc/ld.so.conf.d/*.conf" > "$R/etc/ld.so.conf"
snapshot() { (cd "$R" && find . -printf '%p %y %m\n' | sort; find . -type f -exec sha256sum {} + | sort) > "$1"; }
snapshot "$tmp/before"

echo "== install"
"$cmgr" --install --root "$R" --lib "$flytlib" > "$tmp/out" 2>&1 && pass "installed" || { cat "$tmp/out"; fail "install"; }
cat "$tmp/out"
cmp -s "$flytlib" "$R$P/libcuda.so.1" && pass "library copied to $P" || fail "library not copied"
[ ! -e "$R$P/libnvidia-ml.so.1" ] && pass "no NVML installed when none is next to the library" || fail "an NVML appeared"
grep -qx "$P" "$R/etc/ld.so.conf.d/00-flyt.conf" && pass "00-flyt.conf names $P" || fail "00-flyt.conf: $(cat "$R/etc/ld.so.conf.d/00-flyt.conf")"
[ -f "$manifest" ] && grep -q "^file [0-9a-f]\{64\} $P/libcuda.so.1$" "$manifest" && pass "install record kept" || fail "no manifest"
grep -q "ldconfig not run (--root)" "$tmp/out" && pass "no ldconfig with --root by default" || fail "ldconfig ran"
cmp -s <(echo /usr/local/cuda-13.0/lib) "$R/etc/ld.so.conf.d/zz-cuda-13-0.conf" && pass "NVIDIA's conf untouched" || fail "NVIDIA's conf changed"

echo "== install again (update)"
"$cmgr" --install --root "$R" --lib "$flytlib" > "$tmp/out" 2>&1 && grep -q "already installed" "$tmp/out" && pass "second install updates in place" || { cat "$tmp/out"; fail "reinstall"; }
"$cmgr" --install --root "$R" --lib "$flytlib" --prefix /opt/flyt > "$tmp/out" 2>&1
[ $? = 1 ] && grep -q "already installed with prefix $P" "$tmp/out" && pass "another prefix refused while installed" || { cat "$tmp/out"; fail "prefix change"; }

echo "== uninstall refuses a changed file, removes nothing"
cp "$R$P/libcuda.so.1" "$tmp/saved.so"
echo "tampered" >> "$R$P/libcuda.so.1"
"$cmgr" --uninstall --root "$R" > "$tmp/out" 2>&1
[ $? = 1 ] && grep -q "not the file --install wrote" "$tmp/out" && [ -f "$R/etc/ld.so.conf.d/00-flyt.conf" ] && [ -f "$manifest" ] \
  && pass "refused: $(head -1 "$tmp/out")" || { cat "$tmp/out"; fail "tampered uninstall"; }
cp "$tmp/saved.so" "$R$P/libcuda.so.1"

echo "== uninstall"
"$cmgr" --uninstall --root "$R" > "$tmp/out" 2>&1 && pass "uninstalled" || { cat "$tmp/out"; fail "uninstall"; }
cat "$tmp/out"
snapshot "$tmp/after"
diff "$tmp/before" "$tmp/after" > "$tmp/diff" && pass "the root is exactly as before (files, folders, modes)" || { cat "$tmp/diff"; fail "root differs after uninstall"; }
"$cmgr" --uninstall --root "$R" > "$tmp/out" 2>&1
[ $? = 1 ] && grep -q "no install record" "$tmp/out" && pass "uninstall without a record: $(cat "$tmp/out")" || { cat "$tmp/out"; fail "second uninstall"; }

echo "== files it did not create"
echo "/somewhere/else" > "$R/etc/ld.so.conf.d/00-flyt.conf"
"$cmgr" --install --root "$R" --lib "$flytlib" > "$tmp/out" 2>&1
[ $? = 1 ] && grep -q "was not installed by flyt-client-manager" "$tmp/out" && grep -qx /somewhere/else "$R/etc/ld.so.conf.d/00-flyt.conf" \
  && pass "a foreign 00-flyt.conf is not overwritten" || { cat "$tmp/out"; fail "foreign conf"; }
rm "$R/etc/ld.so.conf.d/00-flyt.conf"
echo "not a library" > "$tmp/fake.so"
"$cmgr" --install --root "$R" --lib "$tmp/fake.so" > "$tmp/out" 2>&1
[ $? = 1 ] && grep -q "is not Flyt's client library" "$tmp/out" && pass "a file that is not Flyt's library refused" || { cat "$tmp/out"; fail "fake lib"; }
snapshot "$tmp/after"
diff -q "$tmp/before" "$tmp/after" > /dev/null && pass "refused installs changed nothing" || fail "a refused install left files"

echo "== --preload keeps the lines of others"
printf '/opt/other/libhook.so\n' > "$R/etc/ld.so.preload"
snapshot "$tmp/before-preload"
"$cmgr" --install --root "$R" --lib "$flytlib" --preload > "$tmp/out" 2>&1 || { cat "$tmp/out"; fail "preload install"; }
[ "$(cat "$R/etc/ld.so.preload")" = "$(printf '/opt/other/libhook.so\n%s/libcuda.so.1' $P)" ] && pass "ld.so.preload: the other line, then Flyt's" || fail "preload content: $(cat "$R/etc/ld.so.preload")"
"$cmgr" --uninstall --root "$R" > "$tmp/out" 2>&1 || { cat "$tmp/out"; fail "preload uninstall"; }
snapshot "$tmp/after"
diff "$tmp/before-preload" "$tmp/after" && pass "uninstall left ld.so.preload exactly as it was" || fail "preload not restored"
echo "== uninstall restores ld.so.preload exactly: mode, owner, a last line without newline"
printf '/opt/other/libhook.so\n/opt/more/libx.so' > "$R/etc/ld.so.preload"
chmod 600 "$R/etc/ld.so.preload"; chown 4321:4322 "$R/etc/ld.so.preload" 2>/dev/null || true
preload_state() { stat -c '%a %u:%g' "$R/etc/ld.so.preload"; sha256sum < "$R/etc/ld.so.preload"; }
before=$(preload_state)
"$cmgr" --install --root "$R" --lib "$flytlib" --preload > "$tmp/out" 2>&1 || { cat "$tmp/out"; fail "preload install (0600)"; }
[ "$(cat "$R/etc/ld.so.preload")" = "$(printf '/opt/other/libhook.so\n/opt/more/libx.so\n%s/libcuda.so.1' $P)" ] \
  && pass "Flyt's line after the others, on its own line" || fail "preload content: $(cat "$R/etc/ld.so.preload")"
[ "$(stat -c '%a %u:%g' "$R/etc/ld.so.preload")" = "$(head -1 <<<"$before")" ] \
  && pass "install kept its mode and owner ($(head -1 <<<"$before"))" || fail "install changed mode/owner: $(stat -c '%a %u:%g' "$R/etc/ld.so.preload")"
"$cmgr" --uninstall --root "$R" > "$tmp/out" 2>&1 || { cat "$tmp/out"; fail "preload uninstall (0600)"; }
[ "$(preload_state)" = "$before" ] && pass "uninstall left ld.so.preload byte for byte, mode and owner as they were" \
  || fail "preload not restored: $(preload_state) vs $before"
rm "$R/etc/ld.so.preload"
"$cmgr" --install --root "$R" --lib "$flytlib" --preload > /dev/null 2>&1 && [ -f "$R/etc/ld.so.preload" ] || fail "preload file not made"
"$cmgr" --uninstall --root "$R" > /dev/null 2>&1 && [ ! -e "$R/etc/ld.so.preload" ] && pass "an ld.so.preload it made is removed" || fail "made preload file left"

echo "== Flyt's NVML next to the library goes too; an update without it removes it"
snapshot "$tmp/before-nvml"
"$cmgr" --install --root "$R" --lib "$tmp/with-nvml/libcuda.so.1" > "$tmp/out" 2>&1 || { cat "$tmp/out"; fail "install with NVML"; }
cmp -s "$tmp/with-nvml/libnvidia-ml.so.1" "$R$P/libnvidia-ml.so.1" && cmp -s "$flytlib" "$R$P/libcuda.so.1" \
  && pass "libcuda.so.1 and libnvidia-ml.so.1 copied to $P" || { cat "$tmp/out"; fail "NVML not copied"; }
grep -q "^file [0-9a-f]\{64\} $P/libnvidia-ml.so.1$" "$manifest" && pass "the NVML is in the install record" || fail "NVML not recorded"
"$cmgr" --install --root "$R" --lib "$flytlib" > "$tmp/out" 2>&1 || { cat "$tmp/out"; fail "update without NVML"; }
[ ! -e "$R$P/libnvidia-ml.so.1" ] && ! grep -q "libnvidia-ml" "$manifest" && [ -f "$R$P/libcuda.so.1" ] \
  && pass "an update with no NVML next to the library removes the one installed before: $(grep 'earlier install' "$tmp/out")" \
  || { cat "$tmp/out"; fail "stale NVML left"; }
"$cmgr" --install --root "$R" --lib "$tmp/with-nvml/libcuda.so.1" > "$tmp/out" 2>&1 && [ -f "$R$P/libnvidia-ml.so.1" ] \
  && pass "and an update with it puts it back" || { cat "$tmp/out"; fail "NVML not put back"; }
"$cmgr" --uninstall --root "$R" > "$tmp/out" 2>&1 || { cat "$tmp/out"; fail "uninstall with NVML"; }
snapshot "$tmp/after"
diff "$tmp/before-nvml" "$tmp/after" && pass "uninstall removed both libraries: the root is as before" || fail "root differs after uninstall with NVML"
mkdir -p "$tmp/other-nvml" && cp "$flytlib" "$tmp/other-nvml/libcuda.so.1"
{ head -c 64 "$flytlib"; echo "NVIDIA Management Library"; } > "$tmp/other-nvml/libnvidia-ml.so.1"
"$cmgr" --install --root "$R" --lib "$tmp/other-nvml/libcuda.so.1" > "$tmp/out" 2>&1 && grep -q "is not Flyt's NVML; not installing it" "$tmp/out" \
  && [ ! -e "$R$P/libnvidia-ml.so.1" ] && [ -f "$R$P/libcuda.so.1" ] \
  && pass "an NVML that is not Flyt's is left out, the driver installed: $(grep 'not Flyt' "$tmp/out")" || { cat "$tmp/out"; fail "foreign NVML"; }
"$cmgr" --uninstall --root "$R" > /dev/null 2>&1 || fail "uninstall after the foreign NVML"
mkdir -p "$R$P" && echo "someone else's" > "$R$P/libnvidia-ml.so.1"
"$cmgr" --install --root "$R" --lib "$tmp/with-nvml/libcuda.so.1" > "$tmp/out" 2>&1
[ $? = 1 ] && grep -q "libnvidia-ml.so.1 exists and was not installed by flyt-client-manager" "$tmp/out" && grep -qx "someone else's" "$R$P/libnvidia-ml.so.1" \
  && [ ! -e "$R$P/libcuda.so.1" ] && pass "a foreign libnvidia-ml.so.1 in the prefix is not overwritten" || { cat "$tmp/out"; fail "foreign NVML in the prefix"; }
rm -r "$R/usr/local/lib/flyt" && rmdir "$R/usr/local/lib"
snapshot "$tmp/after"
diff "$tmp/before-nvml" "$tmp/after" && pass "the root is as before" || fail "root differs after the NVML checks"

echo "== an update over an install of the retired libcudart.so.13 client (with --preload)"
# what flyt-client-manager --install --preload wrote when the client was libcudart.so.13
printf '/opt/other/libhook.so\n' > "$R/etc/ld.so.preload"
snapshot "$tmp/before-legacy"
mkdir -p "$R$P" "$R/var/lib/flyt"
cp "$flytlib" "$R$P/libcudart.so.13"
printf '# old\n%s\n' "$P" > "$R/etc/ld.so.conf.d/00-flyt.conf"
printf '%s/libcudart.so.13\n' "$P" >> "$R/etc/ld.so.preload"
{ printf '# flyt-client-manager --install: what it created\nversion 1\nprefix %s\npreload 1\npreload-file-created 0\n' "$P"
  for d in /usr/local/lib $P /var /var/lib /var/lib/flyt; do echo "dir $d"; done
  echo "file $(sha256sum < "$R$P/libcudart.so.13" | cut -c1-64) $P/libcudart.so.13"
  echo "file $(sha256sum < "$R/etc/ld.so.conf.d/00-flyt.conf" | cut -c1-64) /etc/ld.so.conf.d/00-flyt.conf"
} > "$manifest"
"$cmgr" --install --root "$R" --lib "$flytlib" --preload > "$tmp/out" 2>&1 || { cat "$tmp/out"; fail "update over libcudart.so.13"; }
[ ! -e "$R$P/libcudart.so.13" ] && [ -f "$R$P/libcuda.so.1" ] && ! grep -q libcudart "$manifest" \
  && pass "the old libcudart.so.13 is removed and unrecorded, libcuda.so.1 installed" || { cat "$tmp/out"; fail "old client left: $(ls "$R$P")"; }
[ "$(cat "$R/etc/ld.so.preload")" = "$(printf '/opt/other/libhook.so\n%s/libcuda.so.1' $P)" ] \
  && pass "ld.so.preload: its libcudart.so.13 line replaced by libcuda.so.1, the other line kept" || fail "preload after update: $(cat "$R/etc/ld.so.preload")"
"$cmgr" --uninstall --root "$R" > "$tmp/out" 2>&1 || { cat "$tmp/out"; fail "uninstall after the update"; }
snapshot "$tmp/after"
diff "$tmp/before-legacy" "$tmp/after" && pass "uninstall after the update: the root as before the old install" || fail "root differs after the update's uninstall"
# the same old install, uninstalled by this version
mkdir -p "$R$P" "$R/var/lib/flyt"
cp "$flytlib" "$R$P/libcudart.so.13"
printf '# old\n%s\n' "$P" > "$R/etc/ld.so.conf.d/00-flyt.conf"
printf '%s/libcudart.so.13\n' "$P" >> "$R/etc/ld.so.preload"
{ printf 'version 1\nprefix %s\npreload 1\npreload-file-created 0\n' "$P"
  for d in /usr/local/lib $P /var /var/lib /var/lib/flyt; do echo "dir $d"; done
  echo "file $(sha256sum < "$R$P/libcudart.so.13" | cut -c1-64) $P/libcudart.so.13"
  echo "file $(sha256sum < "$R/etc/ld.so.conf.d/00-flyt.conf" | cut -c1-64) /etc/ld.so.conf.d/00-flyt.conf"
} > "$manifest"
"$cmgr" --uninstall --root "$R" > "$tmp/out" 2>&1 || { cat "$tmp/out"; fail "uninstall of the old install"; }
snapshot "$tmp/after"
diff "$tmp/before-legacy" "$tmp/after" && pass "an old libcudart.so.13 install is uninstalled exactly, its preload line too" || fail "old install not undone"
rm "$R/etc/ld.so.preload"

echo "== the loader's choice (ldconfig -r and chroot)"
if [ "$(id -u)" != 0 ] || ! command -v ldconfig > /dev/null || ! chroot / true 2> /dev/null; then
  echo "SKIPPED: the loader's choice needs root, ldconfig and chroot"
  [ $rc = 0 ] && exit 77   # ctest: SKIP_RETURN_CODE
  exit $rc
fi
cat > "$tmp/lib.c" <<'EOF'
const char *flyt_marker = "FLYT_SERVER"; /* what --install looks for */
const char *who(void) { return WHO; }
EOF
cat > "$tmp/app.c" <<'EOF'
#include <stdio.h>
const char *who(void);
int main(void) { printf("%s\n", who()); return 0; }
EOF
# NVIDIA's driver and NVML as the driver package puts them (real file, soname link), and
# Flyt's two libraries side by side as in BUILD/lib
mkdir -p "$tmp/fake"
"$cc" -shared -fPIC -DWHO='"nvidia"' -Wl,-soname,libcuda.so.1 -o "$R$D/libcuda.so.580.95.05" "$tmp/lib.c" &&
ln -s libcuda.so.580.95.05 "$R$D/libcuda.so.1" &&
"$cc" -shared -fPIC -DWHO='"nvidia-ml"' -Wl,-soname,libnvidia-ml.so.1 -o "$R$D/libnvidia-ml.so.580.95.05" "$tmp/lib.c" &&
ln -s libnvidia-ml.so.580.95.05 "$R$D/libnvidia-ml.so.1" &&
"$cc" -shared -fPIC -DWHO='"flyt"' -Wl,-soname,libcuda.so.1 -o "$tmp/fake/libcuda.so.1" "$tmp/lib.c" &&
"$cc" -shared -fPIC -DWHO='"flyt: nvml"' -Wl,-soname,libnvidia-ml.so.1 -o "$tmp/fake/libnvidia-ml.so.1" "$tmp/lib.c" &&
"$cc" -o "$R/app" "$tmp/app.c" -L"$R$D" -l:libcuda.so.1 || { fail "cannot build the fake libraries"; exit $rc; }
# the loader and libc inside the root, at their own paths
for f in $(ldd "$R/app" | grep -o '/[^ ]*' | grep -v cuda); do
  mkdir -p "$R$(dirname "$f")"; cp -L "$f" "$R$f"
done
ldconfig -r "$R" && [ "$(chroot "$R" /app)" = nvidia ] && pass "before: the program loads NVIDIA's libcuda.so.1" || fail "before: $(chroot "$R" /app 2>&1)"
"$cmgr" --install --root "$R" --lib "$tmp/fake/libcuda.so.1" --ldconfig > "$tmp/out" 2>&1 || { cat "$tmp/out"; fail "install --ldconfig"; }
grep -q "the loader cache now resolves libcuda.so.1 to $P/libcuda.so.1" "$tmp/out" && pass "install checked the cache: $(grep 'resolves libcuda' "$tmp/out")" || { cat "$tmp/out"; fail "cache check"; }
grep -q "the loader cache now resolves libnvidia-ml.so.1 to $P/libnvidia-ml.so.1" "$tmp/out" && pass "... and for NVML: $(grep 'resolves libnvidia' "$tmp/out")" || { cat "$tmp/out"; fail "NVML cache check"; }
[ "$(chroot "$R" /app)" = flyt ] && pass "after --install: the same program loads Flyt's (ld.so.conf.d order wins in the cache)" || fail "after install: $(chroot "$R" /app 2>&1)"
ldconfig -p -C "$R/etc/ld.so.cache" | grep -E "(libcuda|libnvidia-ml)\.so\.1 " | sed 's/^/   cache: /'
"$cmgr" --uninstall --root "$R" --ldconfig > "$tmp/out" 2>&1 || { cat "$tmp/out"; fail "uninstall --ldconfig"; }
[ "$(chroot "$R" /app)" = nvidia ] && pass "after --uninstall: NVIDIA's again" || fail "after uninstall: $(chroot "$R" /app 2>&1)"
[ -f "$R$D/libcuda.so.580.95.05" ] && [ "$(readlink "$R$D/libcuda.so.1")" = libcuda.so.580.95.05 ] && [ -f "$R$D/libnvidia-ml.so.580.95.05" ] \
  && pass "NVIDIA's libraries untouched" || fail "NVIDIA's library gone"
exit $rc
