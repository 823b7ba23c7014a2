#!/usr/bin/env bash
# Re-makes tests/fixtures/*.bin from the text forms beside them: each *.txt starts with
# `# <proto message> <apiVersion> <kind>`; protoc (Debian's protobuf-compiler, used only
# here, never by the build) encodes the object over Kubernetes' generated.proto files
# (a k8s.io/<repo>/... tree, see protobuf_table.py), and the result is wrapped in the
# `k8s\0` + runtime.Unknown envelope kube-apiserver and client-go use.
#   relay/kube-builtins/gen/fixtures.sh /tmp/k8sproto
set -euo pipefail
root="$1"
cd "$(dirname "$0")/../tests/fixtures"
for txt in *.txt; do
  read -r _ message api_version kind < "$txt"
  grep -v '^#' "$txt" | protoc -I "$root" --encode="$message" \
    $(cd "$root" && find k8s.io -name generated.proto | sort) 2> >(grep -v "warning: Import" >&2) > /tmp/fixture.raw
  python3 - "$api_version" "$kind" /tmp/fixture.raw "${txt%.txt}.bin" <<'PY'
import sys
def varint(n):
    out = b""
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])
def field(num, payload):
    return varint(num << 3 | 2) + varint(len(payload)) + payload
api_version, kind, raw, out = sys.argv[1:]
type_meta = field(1, api_version.encode()) + field(2, kind.encode())
unknown = field(1, type_meta) + field(2, open(raw, "rb").read()) + field(4, b"application/vnd.kubernetes.protobuf")
open(out, "wb").write(b"k8s\0" + unknown)
PY
done
ls -l *.bin
