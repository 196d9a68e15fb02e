#!/usr/bin/env bash
# flyt-client-manager --install / --uninstall under --root: the files it writes, the
# record it keeps, that it refuses files it did not create, that ld.so.preload keeps
# other lines, and (as root, where chroot works) that the dynamic loader of a program
# linked against "NVIDIA's" libcudart.so.13 really picks Flyt's after --install and
# NVIDIA's again after --uninstall, with NVIDIA's conf and files in place.
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

# a root with a pre-existing /etc (kept by --uninstall) and NVIDIA's loader conf
mkdir -p "$R/etc/ld.so.conf.d" "$R/usr/local/cuda-13.0/lib"
echo "/usr/local/cuda-13.0/lib" > "$R/etc/ld.so.conf.d/zz-cuda-13-0.conf"
echo "include /etc/ld.so.conf.d/*.conf" > "$R/etc/ld.so.conf"
snapshot() { (cd "$R" && find . -printf '%p %y %m\n' | sort; find . -type f -exec sha256sum {} + | sort) > "$1"; }
snapshot "$tmp/before"

echo "== install"
"$cmgr" --install --root "$R" --lib "$flytlib" > "$tmp/out" 2>&1 && pass "installed" || { cat "$tmp/out"; fail "install"; }
cat "$tmp/out"
cmp -s "$flytlib" "$R$P/libcudart.so.13" && pass "library copied to $P" || fail "library not copied"
grep -qx "$P" "$R/etc/ld.so.conf.d/00-flyt.conf" && pass "00-flyt.conf names $P" || fail "00-flyt.conf: $(cat "$R/etc/ld.so.conf.d/00-flyt.conf")"
[ -f "$manifest" ] && grep -q "^file [0-9a-f]\{64\} $P/libcudart.so.13$" "$manifest" && pass "install record kept" || fail "no manifest"
grep -q "ldconfig not run (--root)" "$tmp/out" && pass "no ldconfig with --root by default" || fail "ldconfig ran"
cmp -s <(echo /usr/local/cuda-13.0/lib) "$R/etc/ld.so.conf.d/zz-cuda-13-0.conf" && pass "NVIDIA's conf untouched" || fail "NVIDIA's conf changed"

echo "== install again (update)"
"$cmgr" --install --root "$R" --lib "$flytlib" > "$tmp/out" 2>&1 && grep -q "already installed" "$tmp/out" && pass "second install updates in place" || { cat "$tmp/out"; fail "reinstall"; }
"$cmgr" --install --root "$R" --lib "$flytlib" --prefix /opt/flyt > "$tmp/out" 2>&1
[ $? = 1 ] && grep -q "already installed with prefix $P" "$tmp/out" && pass "another prefix refused while installed" || { cat "$tmp/out"; fail "prefix change"; }

echo "== uninstall refuses a changed file, removes nothing"
cp "$R$P/libcudart.so.13" "$tmp/saved.so"
echo "tampered" >> "$R$P/libcudart.so.13"
"$cmgr" --uninstall --root "$R" > "$tmp/out" 2>&1
[ $? = 1 ] && grep -q "not the file --install wrote" "$tmp/out" && [ -f "$R/etc/ld.so.conf.d/00-flyt.conf" ] && [ -f "$manifest" ] \
  && pass "refused: $(head -1 "$tmp/out")" || { cat "$tmp/out"; fail "tampered uninstall"; }
cp "$tmp/saved.so" "$R$P/libcudart.so.13"

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
[ "$(cat "$R/etc/ld.so.preload")" = "$(printf '/opt/other/libhook.so\n%s/libcudart.so.13' $P)" ] && pass "ld.so.preload: the other line, then Flyt's" || fail "preload content: $(cat "$R/etc/ld.so.preload")"
"$cmgr" --uninstall --root "$R" > "$tmp/out" 2>&1 || { cat "$tmp/out"; fail "preload uninstall"; }
snapshot "$tmp/after"
diff "$tmp/before-preload" "$tmp/after" && pass "uninstall left ld.so.preload exactly as it was" || fail "preload not restored"
rm "$R/etc/ld.so.preload"
"$cmgr" --install --root "$R" --lib "$flytlib" --preload > /dev/null 2>&1 && [ -f "$R/etc/ld.so.preload" ] || fail "preload file not made"
"$cmgr" --uninstall --root "$R" > /dev/null 2>&1 && [ ! -e "$R/etc/ld.so.preload" ] && pass "an ld.so.preload it made is removed" || fail "made preload file left"

echo "== the loader's choice (ldconfig -r and chroot)"
if [ "$(id -u)" != 0 ] || ! command -v ldconfig > /dev/null || ! chroot / true 2> /dev/null; then
  echo "skipped: needs root, ldconfig and chroot"
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
"$cc" -shared -fPIC -DWHO='"nvidia"' -Wl,-soname,libcudart.so.13 -o "$R/usr/local/cuda-13.0/lib/libcudart.so.13.0.96" "$tmp/lib.c" &&
ln -s libcudart.so.13.0.96 "$R/usr/local/cuda-13.0/lib/libcudart.so.13" &&
"$cc" -shared -fPIC -DWHO='"flyt"' -Wl,-soname,libcudart.so.13 -o "$tmp/flyt-fake.so" "$tmp/lib.c" &&
"$cc" -o "$R/app" "$tmp/app.c" -L"$R/usr/local/cuda-13.0/lib" -l:libcudart.so.13 || { fail "cannot build the fake libraries"; exit $rc; }
# the loader and libc inside the root, at their own paths
for f in $(ldd "$R/app" | grep -o '/[^ ]*' | grep -v cuda); do
  mkdir -p "$R$(dirname "$f")"; cp -L "$f" "$R$f"
done
ldconfig -r "$R" && [ "$(chroot "$R" /app)" = nvidia ] && pass "before: the program loads NVIDIA's libcudart.so.13" || fail "before: $(chroot "$R" /app 2>&1)"
"$cmgr" --install --root "$R" --lib "$tmp/flyt-fake.so" --ldconfig > "$tmp/out" 2>&1 || { cat "$tmp/out"; fail "install --ldconfig"; }
grep -q "the loader cache now resolves libcudart.so.13 to $P/libcudart.so.13" "$tmp/out" && pass "install checked the cache: $(grep resolves "$tmp/out")" || { cat "$tmp/out"; fail "cache check"; }
[ "$(chroot "$R" /app)" = flyt ] && pass "after --install: the same program loads Flyt's (ld.so.conf.d order wins in the cache)" || fail "after install: $(chroot "$R" /app 2>&1)"
ldconfig -p -C "$R/etc/ld.so.cache" | grep "libcudart.so.13 " | sed 's/^/   cache: /'
"$cmgr" --uninstall --root "$R" --ldconfig > "$tmp/out" 2>&1 || { cat "$tmp/out"; fail "uninstall --ldconfig"; }
[ "$(chroot "$R" /app)" = nvidia ] && pass "after --uninstall: NVIDIA's again" || fail "after uninstall: $(chroot "$R" /app 2>&1)"
[ -f "$R/usr/local/cuda-13.0/lib/libcudart.so.13.0.96" ] && pass "NVIDIA's library untouched" || fail "NVIDIA's library gone"
exit $rc
