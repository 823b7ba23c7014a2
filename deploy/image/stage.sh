#!/usr/bin/env bash
# Lays out the image's root file system from built binaries: relay and agent (their
# debug information stripped), the shared libraries they load (from ldd: the glibc
# loader, libc, libm, libgcc_s), a passwd/group naming the unprivileged user strata
# (65532), and its state directory.
# No shell, no package manager, nothing else. Used by deploy/image/build.sh (and its
# test) before `buildah bud -f deploy/Containerfile`.
#
#   deploy/image/stage.sh BIN_DIR OUT_DIR      (BIN_DIR holds relay and agent)
set -euo pipefail
bin=${1:?usage: stage.sh BIN_DIR OUT_DIR}
out=${2:?usage: stage.sh BIN_DIR OUT_DIR}
rm -rf "$out"
mkdir -p "$out/rootfs/usr/local/bin" "$out/rootfs/etc" "$out/rootfs/var/lib/strata" "$out/rootfs/tmp"
root=$out/rootfs
# Without debug information (a test build's line tables are most of its size); the
# symbol table stays, so a panic's backtrace still names its functions.
for b in relay agent; do
    objcopy --strip-debug "$bin/$b" "$root/usr/local/bin/$b"
    chmod 0755 "$root/usr/local/bin/$b"
done
# Every library either binary loads, at the path the loader looks for it.
for lib in $(for b in relay agent; do ldd "$bin/$b"; done |
        awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' | sort -u); do
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
done
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
