#!/usr/bin/env bash
# Builds the Strata OCI image with Debian's buildah (no daemon: vfs storage, chroot
# isolation) and checks it: relay --version and agent --version run inside it, it runs
# as 65532:65532 with relay as its entrypoint, and it holds no shell. Prints the size.
#
#   deploy/image/build.sh [TAG]         (default localhost/strata:<version>)
#   STRATA_ARCHES="amd64 arm64" deploy/image/build.sh
#                                       a multi-arch manifest list TAG over TAG-amd64 and
#                                       TAG-arm64; arm64 is cross-compiled with Debian's
#                                       gcc-aarch64-linux-gnu and checked under
#                                       qemu-aarch64-static (both installed if missing)
# Env: PROFILE (production), CARGO_TARGET_DIR, STRATA_ARCHES (the host's architecture by
# default), STRATA_IMAGE_ARCHIVE (also save as oci-archive to this path), STRATA_BIN_DIR
# (take the host architecture's relay and agent from this directory, built already,
# instead of building them: CI passes its test build's), STRATA_BIN_DIR_ARM64 (the same
# for arm64), STRATA_BUILD_ONLY=1 (build the binaries of STRATA_ARCHES, print where, and
# stop), STRATA_IMAGE_REMOVE=1 (remove the images from buildah's storage once checked).
set -euo pipefail
# The binaries are built inside $(...): a failing build must fail it too.
shopt -s inherit_errexit
cd "$(dirname "$0")/../.."
sudo=""; if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
need() { # need COMMAND DEBIAN-PACKAGE...
    command -v "$1" >/dev/null 2>&1 && return
    $sudo apt-get update -qq
    $sudo apt-get install -y -qq "${@:2}" >/dev/null
}
[ "${STRATA_BUILD_ONLY:-0}" = 1 ] || need buildah buildah
profile=${PROFILE:-production}
target=${CARGO_TARGET_DIR:-target}
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | sed -n 1p)
tag=${1:-localhost/strata:$version}
host_arch=$(dpkg --print-architecture 2>/dev/null || echo amd64)
read -r -a arches <<<"${STRATA_ARCHES:-$host_arch}"
dir=$profile; [ "$profile" = dev ] && dir=debug
b="buildah --storage-driver vfs"
stages=(); ctrs=(); mounts=()
cleanup() {
    for m in "${mounts[@]}"; do $b umount "$m" >/dev/null 2>&1 || true; done
    for c in "${ctrs[@]}"; do $b rm "$c" >/dev/null 2>&1 || true; done
    for s in "${stages[@]}"; do rm -rf "$s"; done
}
trap cleanup EXIT
fail() { echo "image check failed: $*" >&2; exit 1; }

# The binaries of one architecture: the host's from STRATA_BIN_DIR or a native build,
# another's from a cross build (its linker and C compiler: Debian's cross gcc).
binaries() { # binaries ARCH -> prints the directory holding relay and agent
    local arch=$1 triple gnu
    if [ "$arch" = "$host_arch" ]; then
        if [ -n "${STRATA_BIN_DIR:-}" ]; then echo "$STRATA_BIN_DIR"; return; fi
        # The whole workspace, under the profile that ships (Cargo.toml: production,
        # cargo's release defaults; the README's first command builds faster, for the demo).
        cargo build --profile "$profile" --workspace --bins >&2
        echo "$target/$dir"
        return
    fi
    case $arch in
        arm64) triple=aarch64-unknown-linux-gnu; gnu=aarch64-linux-gnu
               if [ -n "${STRATA_BIN_DIR_ARM64:-}" ]; then echo "$STRATA_BIN_DIR_ARM64"; return; fi ;;
        *) echo "architecture $arch: only amd64 and arm64 are built" >&2; exit 1 ;;
    esac
    need "$gnu-gcc" "gcc-$gnu" "libc6-dev-${arch}-cross" >&2
    rustup target list --installed | grep -qx "$triple" || rustup target add "$triple" >&2
    local var
    var=$(echo "$triple" | tr 'a-z-' 'A-Z_')
    # jemalloc cannot ask a cross build's host for the page size and would assume 4 KiB;
    # arm64 kernels run with 4, 16 or 64 KiB pages, and one built for 64 works on all.
    env "CARGO_TARGET_${var}_LINKER=$gnu-gcc" "CC_${triple//-/_}=$gnu-gcc" \
        "AR_${triple//-/_}=$gnu-ar" JEMALLOC_SYS_WITH_LG_PAGE=16 \
        cargo build --profile "$profile" --target "$triple" -p strata-relay -p strata-agent --bins >&2
    echo "$target/$triple/$dir"
}

# One architecture's image, built and checked; prints its size.
image() { # image ARCH TAG BIN_DIR
    local arch=$1 itag=$2 bin_dir=$3 stage ctr out config mnt gnu=""
    for x in relay agent; do
        [ -x "$bin_dir/$x" ] || { echo "$bin_dir holds no $x" >&2; exit 1; }
    done
    stage=$(mktemp -d); stages+=("$stage")
    if [ "$arch" = "$host_arch" ]; then
        deploy/image/stage.sh "$bin_dir" "$stage" >/dev/null
    else
        case $arch in arm64) gnu=aarch64-linux-gnu ;; esac
        STAGE_SYSROOT=/usr/$gnu STAGE_TRIPLET=$gnu deploy/image/stage.sh "$bin_dir" "$stage" >/dev/null
    fi
    $b bud --quiet --isolation chroot --arch "$arch" -t "$itag" "$stage" >/dev/null
    ctr=$($b from --quiet --arch "$arch" "$itag"); ctrs+=("$ctr")
    # Run a command inside the image: chroot isolation on the host's architecture; on
    # another, the image's own loader and libraries under qemu-user.
    inside() {
        if [ "$arch" = "$host_arch" ]; then
            $b run --isolation chroot "$ctr" -- "$@"
        else
            need "qemu-${gnu%%-*}-static" qemu-user-static
            mnt=$($b mount "$ctr"); mounts+=("$ctr")
            "qemu-${gnu%%-*}-static" -L "$mnt" "$mnt$1" "${@:2}"
        fi
    }
    out=$(inside /usr/local/bin/relay --version)
    [ "$out" = "relay $version" ] || fail "$arch: relay --version said '$out'"
    out=$(inside /usr/local/bin/agent --version)
    [ "$out" = "agent $version" ] || fail "$arch: agent --version said '$out'"
    config=$($b inspect --format '{{.OCIv1.Config.User}} {{.OCIv1.Config.Entrypoint}} {{.OCIv1.Architecture}}' "$itag")
    [ "$config" = "65532:65532 [/usr/local/bin/relay] $arch" ] || fail "user, entrypoint and architecture: $config"
    if [ "$arch" = "$host_arch" ] && $b run --isolation chroot "$ctr" -- /bin/sh -c true >/dev/null 2>&1; then
        fail "a shell runs in the image"
    fi
    [ ! -e "$stage/rootfs/bin/sh" ] || fail "$arch: the image holds /bin/sh"
    echo "image $itag ($arch): relay and agent $version run inside as 65532:65532; size $($b images --format '{{.Size}}' "$itag")"
}

if [ "${STRATA_BUILD_ONLY:-0}" = 1 ]; then
    # An assignment, not an argument: a failing build stops the script (set -e).
    for arch in "${arches[@]}"; do dir_of=$(binaries "$arch"); echo "$arch: $dir_of"; done
    exit 0
fi
if [ "${#arches[@]}" -eq 1 ]; then
    dir_of=$(binaries "${arches[0]}")
    image "${arches[0]}" "$tag" "$dir_of"
    built=("$tag")
    archive_push() { $b push --quiet "$tag" "oci-archive:$1:$tag"; }
else
    # One image per architecture, then a manifest list naming them all under TAG.
    built=()
    for arch in "${arches[@]}"; do
        dir_of=$(binaries "$arch")
        image "$arch" "$tag-$arch" "$dir_of"
        built+=("$tag-$arch")
    done
    $b manifest rm "$tag" >/dev/null 2>&1 || true
    $b manifest create "$tag" >/dev/null
    for t in "${built[@]}"; do $b manifest add "$tag" "$t" >/dev/null; done
    listed=$($b manifest inspect "$tag" | grep -c '"architecture"')
    [ "$listed" -eq "${#arches[@]}" ] || fail "manifest $tag lists $listed architectures, not ${#arches[@]}"
    echo "manifest $tag: ${arches[*]}"
    archive_push() { $b manifest push --quiet --all "$tag" "oci-archive:$1:$tag"; }
fi
if [ -n "${STRATA_IMAGE_ARCHIVE:-}" ]; then
    archive_push "$STRATA_IMAGE_ARCHIVE"
fi
if [ "${STRATA_IMAGE_REMOVE:-0}" = 1 ]; then
    cleanup; mounts=(); ctrs=(); stages=()
    [ "${#arches[@]}" -eq 1 ] || $b manifest rm "$tag" >/dev/null
    for t in "${built[@]}"; do $b rmi "$t" >/dev/null; done
fi
