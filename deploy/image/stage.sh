#!/usr/bin/env bash
# Lays out the image's root file system from built binaries: relay and agent (their
# debug information stripped), the shared libraries they load (from ldd: the glibc
# loader, libc, libm, libgcc_s), a passwd/group naming the unprivileged user strata
# (65532), and its state directory.
# No shell, no package manager, nothing else. Used by deploy/image/build.sh (and its
# test) before `buildah bud -f deploy/Containerfile`.
#
#   deploy/image/stage.sh BIN_DIR OUT_DIR      (BIN_DIR holds relay and agent)
#   STAGE_SYSROOT=/usr/aarch64-linux-gnu STAGE_TRIPLET=aarch64-linux-gnu \
#     deploy/image/stage.sh target/aarch64-unknown-linux-gnu/production OUT_DIR
set -euo pipefail
bin=${1:?usage: stage.sh BIN_DIR OUT_DIR}
out=${2:?usage: stage.sh BIN_DIR OUT_DIR}
rm -rf "$out"
mkdir -p "$out/rootfs/usr/local/bin" "$out/rootfs/etc" "$out/rootfs/var/lib/strata" "$out/rootfs/tmp"
root=$out/rootfs
# Without debug information (a test build's line tables are most of its size); the
# symbol table stays, so a panic's backtrace still names its functions.
for b in relay agent; do
    "${STAGE_TRIPLET:+$STAGE_TRIPLET-}objcopy" --strip-debug "$bin/$b" "$root/usr/local/bin/$b"
    chmod 0755 "$root/usr/local/bin/$b"
done
# Every library either binary loads, at the path the loader looks for it. A native
# build asks ldd; a cross build (STAGE_SYSROOT: the target's libraries, e.g. Debian's
# /usr/aarch64-linux-gnu for arm64) cannot run, so readelf names its loader and the
# libraries it needs, taken from the sysroot and laid out as on a Debian host of that
# architecture (/lib/<triplet>/, the loader where its interpreter path says).
if [ -z "${STAGE_SYSROOT:-}" ]; then
    for lib in $(for b in relay agent; do ldd "$bin/$b"; done |
            awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' | sort -u); do
        mkdir -p "$root$(dirname "$lib")"
        cp -L "$lib" "$root$lib"
    done
else
    triplet=${STAGE_TRIPLET:?STAGE_TRIPLET (e.g. aarch64-linux-gnu) goes with STAGE_SYSROOT}
    interp=$(readelf -l "$bin/relay" | sed -n 's/.*Requesting program interpreter: \(.*\)]/\1/p')
    [ -n "$interp" ] || { echo "$bin/relay names no program interpreter" >&2; exit 1; }
    mkdir -p "$root$(dirname "$interp")" "$root/lib/$triplet"
    cp -L "$STAGE_SYSROOT/lib/$(basename "$interp")" "$root$interp"
    for lib in $(for b in relay agent; do readelf -d "$bin/$b"; done |
            sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | sort -u); do
        [ -e "$STAGE_SYSROOT/lib/$lib" ] || { echo "$lib: not in $STAGE_SYSROOT/lib" >&2; exit 1; }
        cp -L "$STAGE_SYSROOT/lib/$lib" "$root/lib/$triplet/$lib"
    done
fi
cat >"$root/etc/passwd" <<'PASSWD'
root:x:0:0:root:/root:/sbin/nologin
strata:x:65532:65532:strata:/var/lib/strata:/sbin/nologin
PASSWD
cat >"$root/etc/group" <<'GROUP'
root:x:0:
strata:x:65532:
GROUP
# Names of parents (parentAddress) resolve through /etc/hosts and DNS.
printf 'hosts: files dns\n' >"$root/etc/nsswitch.conf"
chmod 1777 "$root/tmp"
chown -R 65532:65532 "$root/var/lib/strata" 2>/dev/null || true
cp "$(dirname "$0")/../Containerfile" "$out/Containerfile"
echo "$out"
