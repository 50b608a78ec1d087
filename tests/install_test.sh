#!/bin/bash
# install_test.sh — `make install` into a temporary DESTDIR, then the library used the way
# another project would use it: examples/minrouter.c built with `pkg-config --cflags --libs
# kvidx` against the installed tree only, run against a real index (tests/testidx as its
# writer, keys from the installed kvidx-hash), and its answer checked. Also checks what was
# installed: the soname and symlinks, that only kvidx_* is exported, the header(s), kvidx.pc.
#
# Run by `make test` with MAKE, BUILD (the build tree), SAN and CC in the environment.
set -euo pipefail

: "${MAKE:=make}" "${BUILD:=build}" "${SAN:=}" "${CC:=cc}"
PREFIX=/opt/kvidx
tmp=$(mktemp -d /tmp/kvidx-install.XXXXXX)
name="t-install-$$"
fail() { echo "install_test: FAIL: $*" >&2; exit 1; }
cleanup() {
	if [ -n "${W_PID:-}" ]; then exec {W[1]}>&- 2>/dev/null || true; wait "$W_PID" 2>/dev/null || true; fi
	rm -rf "$tmp"
}
trap cleanup EXIT

"$MAKE" -s --no-print-directory install BUILD="$BUILD" SAN="$SAN" DESTDIR="$tmp" \
	PREFIX="$PREFIX" >"$tmp/install.log" 2>&1 || { cat "$tmp/install.log" >&2; fail "make install"; }
root="$tmp$PREFIX"

# Files, symlinks, soname.
for f in include/kvidx.h lib/libkvidx.a lib/libkvidx.so.1.0.0 lib/pkgconfig/kvidx.pc \
	bin/kvidx-ingestd bin/kvidx-hash bin/kvidx-route; do
	[ -e "$root/$f" ] || fail "$f not installed"
done
[ ! -e "$root/bin/kvidx-fakepod" ] || fail "kvidx-fakepod (a test double) installed in bin"
[ -f lib/kvidx_writer.h ] && { [ -e "$root/include/kvidx_writer.h" ] || fail "kvidx_writer.h not installed"; }
[ "$(readlink "$root/lib/libkvidx.so.1")" = libkvidx.so.1.0.0 ] || fail "libkvidx.so.1 link"
[ "$(readlink "$root/lib/libkvidx.so")" = libkvidx.so.1 ] || fail "libkvidx.so link"
readelf -d "$root/lib/libkvidx.so.1.0.0" | grep 'SONAME.*\[libkvidx\.so\.1\]' >/dev/null || fail "soname"

# Only the kvidx_* API is exported, each symbol in a version node (KVIDX_1.0, itself listed
# as an absolute symbol).
dyn=$(nm -D --defined-only "$root/lib/libkvidx.so.1.0.0" | awk '$2 != "A" { print $3 }')
[ -n "$dyn" ] || fail "no exported symbols"
unversioned=$(printf '%s\n' $dyn | grep -v '@@KVIDX_1\.[0-9]*$' || true)
[ -z "$unversioned" ] || fail "symbols without a version node: $(echo $unversioned)"
syms=$(printf '%s\n' $dyn | sed 's/@.*//')
bad=$(printf '%s\n' $syms | grep -v '^kvidx_' || true)
[ -z "$bad" ] || fail "exported beyond kvidx_*: $(echo $bad)"
printf '%s\n' $syms | grep -x kvidx_score_sized >/dev/null || fail "kvidx_score_sized not exported"

# pkg-config, pointed at the DESTDIR: the sysroot prefixes the .pc's paths.
export PKG_CONFIG_PATH="$root/lib/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$tmp"
[ "$(pkg-config --modversion kvidx)" = 1.0.0 ] || fail "pkg-config --modversion"
flags=$(pkg-config --cflags --libs kvidx)
case "$flags" in *"-I$root/include"*"-L$root/lib"*"-lkvidx"*) ;; *) fail "pkg-config flags: $flags" ;; esac
unset PKG_CONFIG_SYSROOT_DIR

# Build the router from outside the tree: only the installed header and library are visible.
cp examples/minrouter.c "$tmp/"
sanflags=${SAN:+-fsanitize=$SAN}
(cd "$tmp" && PKG_CONFIG_SYSROOT_DIR="$tmp" "$CC" -std=c11 -Wall -Werror $sanflags -o minrouter \
	minrouter.c $(PKG_CONFIG_SYSROOT_DIR="$tmp" pkg-config --cflags --libs kvidx)) ||
	fail "minrouter does not build against the installed tree"
readelf -d "$tmp/minrouter" | grep 'NEEDED.*\[libkvidx\.so\.1\]' >/dev/null || fail "minrouter does not need libkvidx.so.1"
export LD_LIBRARY_PATH="$root/lib"
ldd "$tmp/minrouter" | grep "libkvidx.so.1 => $root/lib/" >/dev/null || fail "minrouter does not load the installed library"

# A real index: two pods; a holds all 3 blocks on the GPU; b block 0 on the GPU and blocks
# 0-1 on the CPU, and a prediction for block 2.
coproc W { "$BUILD/bin/testidx" write "$name"; }
W_PID=$W_PID
send() { echo "$*" >&"${W[1]}"; read -r reply <&"${W[0]}" || fail "writer gone after: $*"; \
	case "$reply" in error*) fail "writer: $* -> $reply" ;; esac; }
read -r reply <&"${W[0]}"; [ "$reply" = ready ] || fail "writer: $reply"
mapfile -t k < <("$root/bin/kvidx-hash" --model m $(seq 1 48))
[ "${#k[@]}" = 3 ] || fail "kvidx-hash printed ${#k[@]} keys"
send pod 10.0.0.1:8000 m; a=${reply#pod }
send pod 10.0.0.2:8000 m; b=${reply#pod }
send store "$a" gpu "${k[@]}"
send store "$b" gpu "${k[0]}"
send store "$b" cpu "${k[0]}" "${k[1]}"
send spec "$b" 60000 "${k[2]}"

out=$("$tmp/minrouter" "$name" m $(seq 1 50)) || fail "minrouter failed"
expect="10.0.0.1:8000 blocks=3 spec=0 gpu=3 cpu=0 disk=0 spec_run=0 score=3.000
10.0.0.2:8000 blocks=3 spec=1 gpu=1 cpu=2 disk=0 spec_run=0 score=2.800
best 10.0.0.1:8000"
[ "$out" = "$expect" ] || fail "minrouter printed:
$out
expected:
$expect"
# Another model's prompt shares no key: no pod holds its block 0.
[ "$("$tmp/minrouter" "$name" other $(seq 1 48))" = "best -" ] || fail "other model matched"

# The Python binding, as `pip install .` builds it on a machine with the library installed:
# from a copy of lib/python, finding the library through pkg-config only (no network, no
# build isolation: Debian's setuptools). Without SAN (an ASan library cannot be loaded into
# an uninstrumented interpreter) and where Debian's pip exists.
py=/usr/bin/python3
if [ -z "$SAN" ] && "$py" -m pip --version >/dev/null 2>&1; then
	cp -r lib/python "$tmp/pysrc"
	(cd "$tmp/pysrc" && PKG_CONFIG_SYSROOT_DIR="$tmp" "$py" -m pip install -q --no-cache-dir --no-index \
		--no-build-isolation --no-deps --target "$tmp/site" . >"$tmp/pip.log" 2>&1) ||
		{ cat "$tmp/pip.log" >&2; fail "pip install . against the installed library"; }
	got=$(cd "$tmp" && PYTHONPATH="$tmp/site" "$py" -c '
import sys, kvidx
assert kvidx.__file__.startswith(sys.argv[2]), kvidx.__file__
r = kvidx.Reader(sys.argv[1])
best = max(r.score(r.keys(list(range(1, 51)), "m")), key=lambda s: (s.score, -s.index))
print(best.pod, best.blocks, best.gpu_run)' "$name" "$tmp/site") || fail "the pip-installed module failed"
	[ "$got" = "10.0.0.1:8000 3 3" ] || fail "pip-installed module printed: $got"
	ldd "$tmp/site"/kvidx*.so | grep "libkvidx.so.1 => $root/lib/" >/dev/null ||
		fail "the pip-installed module does not load the installed library"
	echo "install_test: pip install . ok"
fi
echo "install_test: ok (installed in a DESTDIR, minrouter built with pkg-config, routed)"
