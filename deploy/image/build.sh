#!/usr/bin/env bash
# Builds the Strata OCI image with Debian's buildah (no daemon: vfs storage, chroot
# isolation) and checks it: relay --version and agent --version run inside it, it runs
# as 65532:65532 with relay as its entrypoint, and it holds no shell. Prints the size.
#
#   deploy/image/build.sh [TAG]         (default localhost/strata:<version>)
# Env: PROFILE (production), CARGO_TARGET_DIR, STRATA_IMAGE_ARCHIVE (also save as
# oci-archive to this path), STRATA_BIN_DIR (take relay and agent from this directory,
# built already, instead of building them: CI passes its test build's).
set -euo pipefail
cd "$(dirname "$0")/../.."
if ! command -v buildah >/dev/null 2>&1; then
    sudo=""; if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
    $sudo apt-get update -qq
    $sudo apt-get install -y -qq buildah >/dev/null
fi
profile=${PROFILE:-production}
target=${CARGO_TARGET_DIR:-target}
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | sed -n 1p)
tag=${1:-localhost/strata:$version}
if [ -n "${STRATA_BIN_DIR:-}" ]; then
    bin_dir=$STRATA_BIN_DIR
    for b in relay agent; do
        [ -x "$bin_dir/$b" ] || { echo "STRATA_BIN_DIR=$bin_dir holds no $b" >&2; exit 1; }
    done
else
    # The whole workspace, under the profile that ships (Cargo.toml: production,
    # cargo's release defaults; the README's first command builds faster, for the demo).
    cargo build --profile "$profile" --workspace --bins
    dir=$profile; [ "$profile" = dev ] && dir=debug
    bin_dir=$target/$dir
fi
stage=$(mktemp -d)
b="buildah --storage-driver vfs"
ctr=""
cleanup() { [ -n "$ctr" ] && $b rm "$ctr" >/dev/null; rm -rf "$stage"; }
trap cleanup EXIT
deploy/image/stage.sh "$bin_dir" "$stage" >/dev/null
$b bud --quiet --isolation chroot -t "$tag" "$stage" >/dev/null
ctr=$($b from --quiet "$tag")
fail() { echo "image check failed: $*" >&2; exit 1; }
out=$($b run --isolation chroot "$ctr" -- /usr/local/bin/relay --version)
[ "$out" = "relay $version" ] || fail "relay --version said '$out'"
out=$($b run --isolation chroot "$ctr" -- /usr/local/bin/agent --version)
[ "$out" = "agent $version" ] || fail "agent --version said '$out'"
config=$($b inspect --format '{{.OCIv1.Config.User}} {{.OCIv1.Config.Entrypoint}}' "$tag")
[ "$config" = "65532:65532 [/usr/local/bin/relay]" ] || fail "user and entrypoint: $config"
if $b run --isolation chroot "$ctr" -- /bin/sh -c true >/dev/null 2>&1; then fail "a shell runs in the image"; fi
if [ -n "${STRATA_IMAGE_ARCHIVE:-}" ]; then
    $b push --quiet "$tag" "oci-archive:$STRATA_IMAGE_ARCHIVE:$tag"
fi
echo "image $tag: relay and agent $version run inside as 65532:65532; size $($b images --format '{{.Size}}' "$tag")"
