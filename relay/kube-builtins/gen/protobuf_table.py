#!/usr/bin/env python3
"""Generates src/protobuf_table.txt: the field table the protobuf decoder
(src/protobuf.rs) reads, for every built-in kind the root serves and every message
they reference.

Sources, at the Kubernetes version k8s-openapi's `latest` feature serves (v1_37). The
v0.37.0-beta.0 tags lack fields k8s-openapi 0.29's v1_37 has (e.g.
NodeAllocatableResourceClaimStatus.mapping), so these are the master commits after it
(the newest the mirror holds; no release-1.37 branch yet):
  kubernetes/api                     10b39a39bcee995dfe7cd5e8e7b922be5e46f1e2
  kubernetes/apimachinery            eed236ceee2c19c2753a3d93ac0631dc20750454
  kubernetes/apiextensions-apiserver 1aa2717a552ee6ca1e2a18f1f8ffccde981db923
  kubernetes/kube-aggregator         232ca687ab24bc9f9a378cba74716b5f7d6b82eb (pkg/apis/apiregistration/v1)

Field numbers and wire types come from each package's generated.proto; JSON names,
`,inline`, `omitempty` and pointer-ness come from the Go struct tags beside it
(types*.go), which is what kube-apiserver's JSON encoder reads.

Re-run (a Go-style import tree of the three repositories, k8s.io/<repo>/...):
  T=<commit above>; mkdir -p /tmp/k8sproto && cd /tmp/k8sproto
  for r in api apimachinery apiextensions-apiserver kube-aggregator; do
    mkdir -p k8s.io/$r
    git -C <clone of kubernetes/$r> archive $T | tar -x -C k8s.io/$r --wildcards '*.proto' '*.go'
  done
  python3 relay/kube-builtins/gen/protobuf_table.py /tmp/k8sproto > relay/kube-builtins/src/protobuf_table.txt

Table lines (space-separated):
  K <apiVersion> <kind> <message>          a root kind
  M <message> <how>                        how: struct, list (Go slice type, field 1
                                           `items`), or a special JSON form (time,
                                           microtime, duration, quantity, intorstring,
                                           raw, orarray, orbool, orstringarray)
  F <number> <json name|-> <type> <flags>  a field of the message above; `-` = inlined
                                           into the parent's JSON (`json:",inline"`);
                                           type: a scalar, a message, or map:<value type>
                                           (keys are strings); flags: r repeated,
                                           p pointer, o omitempty, `_` none
"""
import os
import re
import sys

# The kinds strata_kube_builtins::builtins() serves (read from src/lib.rs, where each is
# `builtin::<module::Kind>`), and the bodies of SelfSubjectAccessReview and of the
# scale subresource (and DeleteOptions, in roots()).
EXTRA = [("authorization/v1", "SelfSubjectAccessReview"), ("autoscaling/v1", "Scale")]
# k8s-openapi's module -> Go package directory.
MODULES = {
    "apiextensions": "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1",
    "apiregistration": "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1",
}


def roots():
    lib = open(os.path.join(os.path.dirname(__file__), "..", "src", "lib.rs")).read()
    out = []
    for path in re.findall(r"builtin::<([\w:]+)>", lib):
        *module, kind = path.split("::")
        godir = MODULES.get(module[0]) or "k8s.io/api/" + "/".join(module)
        out.append((godir, kind))
    # A delete's body: meta.k8s.io/v1 DeleteOptions (a client sends it in the version
    # of the resource's group; the decoder reads any of them as this one).
    return out + [("k8s.io/api/" + d, k) for d, k in EXTRA] + [
        ("k8s.io/apimachinery/pkg/apis/meta/v1", "DeleteOptions")]

META = "k8s.io.apimachinery.pkg.apis.meta.v1."
AX = "k8s.io.apiextensions_apiserver.pkg.apis.apiextensions.v1."
SPECIAL = {
    META + "Time": "time",
    META + "MicroTime": "microtime",
    META + "Duration": "duration",
    META + "FieldsV1": "raw",
    "k8s.io.apimachinery.pkg.api.resource.Quantity": "quantity",
    "k8s.io.apimachinery.pkg.util.intstr.IntOrString": "intorstring",
    "k8s.io.apimachinery.pkg.runtime.RawExtension": "raw",
    AX + "JSON": "raw",
    AX + "JSONSchemaPropsOrArray": "orarray",
    AX + "JSONSchemaPropsOrBool": "orbool",
    AX + "JSONSchemaPropsOrStringArray": "orstringarray",
}
SCALARS = {"string", "int32", "int64", "bool", "double", "float", "bytes", "uint32", "uint64"}


def openapi_name(proto):
    """k8s.io.api.apps.v1.Deployment -> io.k8s.api.apps.v1.Deployment"""
    assert proto.startswith("k8s.io."), proto
    return "io.k8s." + proto[len("k8s.io."):].replace("apiextensions_apiserver", "apiextensions-apiserver").replace("kube_aggregator", "kube-aggregator")


def parse_protos(root):
    messages = {}  # full name -> (go dir, [(label, type, name, number)])
    for dirpath, _, files in os.walk(root):
        if "generated.proto" not in files:
            continue
        text = open(os.path.join(dirpath, "generated.proto")).read()
        text = re.sub(r"//[^\n]*", "", text)
        text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
        pkg = re.search(r"^package ([\w.]+);", text, re.M).group(1)
        godir = re.search(r'option go_package = "([^"]+)"', text).group(1)
        for m in re.finditer(r"message (\w+) \{(.*?)\n\}", text, re.S):
            fields = []
            for f in re.finditer(r"(optional|repeated)?\s*(map<\s*string,\s*([.\w]+)>|[.\w]+) (\w+) = (\d+);", m.group(2)):
                label, typ, mapval, name, num = f.groups()
                if mapval:
                    typ = "map:" + resolve(mapval, pkg)
                else:
                    typ = resolve(typ, pkg)
                fields.append((label or "optional", typ, name, int(num)))
            messages[pkg + "." + m.group(1)] = (godir, fields)
    return messages


def resolve(typ, pkg):
    if typ in SCALARS:
        return typ
    if typ.startswith("."):
        return typ[1:]
    return pkg + "." + typ


def parse_go(root, godir):
    """struct name -> {protobuf number: (json name or None if inline, omitempty, pointer)};
    and the names of slice types (list wrappers)."""
    structs, slices = {}, set()
    d = os.path.join(root, godir)
    for fn in sorted(os.listdir(d)):
        if not fn.endswith(".go") or fn.endswith("_test.go") or fn.startswith("zz_") or fn.startswith("generated"):
            continue
        text = open(os.path.join(d, fn)).read()
        for s in re.finditer(r"^type (\w+) \[\]", text, re.M):
            slices.add(s.group(1))
        for s in re.finditer(r"^type (\w+) struct \{\n(.*?)^\}", text, re.S | re.M):
            fields = {}
            for line in s.group(2).splitlines():
                line = line.split("//")[0] if "`" not in line else line
                f = re.match(r"\s*(?:(\w+)\s+)?([*\[\]\w.]+)\s+`([^`]*)`", line)
                if not f:
                    continue
                name, gotype, tags = f.groups()
                pb = re.search(r'protobuf:"([^"]*)"', tags)
                if not pb or pb.group(1) == "-":
                    continue
                num = int(pb.group(1).split(",")[1])
                js = re.search(r'json:"([^"]*)"', tags)
                jparts = js.group(1).split(",") if js else [name or gotype]
                jname = jparts[0]
                inline = name is None and (jname == "" or "inline" in jparts[1:])
                if jname == "-":
                    continue
                omit = "omitempty" in jparts[1:] or "omitzero" in jparts[1:]
                fields[num] = (None if inline else (jname or name), omit, gotype.startswith("*"))
            structs[s.group(1)] = fields
    return structs, slices


def main():
    root = sys.argv[1]
    messages = parse_protos(root)
    go_cache = {}

    def go(godir):
        if godir not in go_cache:
            go_cache[godir] = parse_go(root, godir)
        return go_cache[godir]

    by_dir = {godir: full.rsplit(".", 1)[0] for full, (godir, _) in messages.items()}

    def group_of(godir):
        for fn in ("register.go", "doc.go"):
            path = os.path.join(root, godir, fn)
            g = os.path.exists(path) and re.search(
                r'(?:\+groupName=|GroupName = ")([\w.]*)', open(path).read())
            if g:
                return g.group(1)
        sys.exit(f"no group name in {godir}")

    out = [l for l in [
        "# Generated by relay/kube-builtins/gen/protobuf_table.py from Kubernetes' (1.37)",
        "# generated.proto and types.go; do not edit (see the script for the format).",
    ]]
    todo, seen = [], set()
    for godir, kind in roots():
        full = by_dir[godir] + "." + kind
        assert full in messages, full
        group, version = group_of(godir), godir.rsplit("/", 1)[1]
        api_version = f"{group}/{version}" if group else version
        out.append(f"K {api_version} {kind} {openapi_name(full)}")
        todo.append(full)
    while todo:
        full = todo.pop(0)
        if full in seen:
            continue
        seen.add(full)
        godir, fields = messages[full]
        short = full.rsplit(".", 1)[1]
        structs, slices = go(godir)
        how = SPECIAL.get(full) or ("list" if short in slices else "struct")
        out.append(f"M {openapi_name(full)} {how}")
        if how in ("time", "microtime", "duration", "quantity", "intorstring", "raw"):
            continue
        tags = structs.get(short, {})
        for label, typ, name, num in fields:
            if how == "struct":
                if num not in tags:
                    sys.exit(f"{full}: proto field {name} = {num} has no Go field")
                jname, omit, ptr = tags[num]
            else:
                jname, omit, ptr = name, True, False
            flags = ("r" if label == "repeated" else "") + ("p" if ptr else "") + ("o" if omit else "")
            target = typ[4:] if typ.startswith("map:") else typ
            if target not in SCALARS:
                todo.append(target)
                typ = ("map:" if typ.startswith("map:") else "") + openapi_name(target)
            out.append(f"F {num} {jname if jname is not None else '-'} {typ} {flags or '_'}")
    print("\n".join(out))


if __name__ == "__main__":
    main()
