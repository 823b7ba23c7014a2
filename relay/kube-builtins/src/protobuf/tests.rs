use std::collections::BTreeMap;

use super::*;
use crate::builtins;
use serde_json::json;
use strata_protocol::time::civil_from_days as civil;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(format!("{FIXTURES}/{name}.bin")).expect("fixture")
}

/// Decodes `name.bin` and compares it with `name.json` (rewritten when
/// `UPDATE_FIXTURES=1`); the result also passes the kind's strict field check.
fn golden(name: &str) -> Value {
    let v = decode(&fixture(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    let path = format!("{FIXTURES}/{name}.json");
    let text = serde_json::to_string_pretty(&v).expect("json") + "\n";
    if std::env::var_os("UPDATE_FIXTURES").is_some() {
        std::fs::write(&path, &text).expect("write");
    }
    let want = std::fs::read_to_string(&path).expect("golden json");
    assert_eq!(text, want, "{name}");
    let kind = v["kind"].as_str().expect("kind");
    let b = builtins()
        .into_iter()
        .find(|b| b.kind == kind)
        .expect("builtin");
    assert_eq!(
        (b.check)(&v),
        Ok(vec![]),
        "{name}: fields its type does not know"
    );
    v
}

#[test]
fn the_table_covers_every_builtin_kind() {
    let kinds = kinds().expect("the table parses");
    for b in builtins() {
        let api_version = if b.group.is_empty() {
            b.version.to_owned()
        } else {
            format!("{}/{}", b.group, b.version)
        };
        assert!(
            kinds
                .iter()
                .any(|(v, k, _)| *v == api_version && *k == b.kind),
            "no protobuf table for {api_version} {}",
            b.kind
        );
    }
    assert!(
        kinds
            .iter()
            .any(|(_, k, _)| *k == "SelfSubjectAccessReview")
    );
    assert!(
        kinds
            .iter()
            .any(|(v, k, _)| (*v, *k) == ("autoscaling/v1", "Scale"))
    );
    assert!(
        kinds
            .iter()
            .any(|(v, k, _)| (*v, *k) == ("meta.k8s.io/v1", "DeleteOptions"))
    );
    assert_eq!(kinds.len(), builtins().len() + 3);
}

/// Every field's JSON name is a property of the message's OpenAPI schema (fields of an
/// inlined message are checked against the schema of the message that inlines it).
#[test]
fn every_field_is_a_property_of_its_schema() {
    let mut g = schemars::generate::SchemaSettings::draft2020_12().into_generator();
    for b in builtins() {
        (b.schema)(&mut g);
    }
    crate::schema_of::<k8s_openapi::api::authorization::v1::SelfSubjectAccessReview>(&mut g);
    crate::schema_of::<k8s_openapi::api::autoscaling::v1::Scale>(&mut g);
    crate::schema_of::<k8s_openapi::apimachinery::pkg::apis::meta::v1::DeleteOptions>(&mut g);
    let defs = g.definitions().clone();
    let t = table().expect("table");
    // Which message inlines which.
    let mut inlined_into: BTreeMap<usize, usize> = BTreeMap::new();
    for (id, m) in t.messages.iter().enumerate() {
        for f in &m.fields {
            if let (None, Ty::Message(child)) = (f.json, f.ty) {
                inlined_into.insert(child, id);
            }
        }
    }
    let mut missing = Vec::new();
    let mut checked = 0;
    for (id, m) in t.messages.iter().enumerate() {
        if m.how != How::Struct {
            continue;
        }
        let mut owner = id;
        while let Some(&parent) = inlined_into.get(&owner) {
            owner = parent;
        }
        let Some(def) = defs.get(t.messages[owner].name) else {
            missing.push(format!("{}: no schema", m.name));
            continue;
        };
        let props = def.get("properties").and_then(Value::as_object);
        for f in &m.fields {
            let Some(name) = f.json else { continue };
            checked += 1;
            if !props.is_some_and(|p| p.contains_key(name)) {
                missing.push(format!("{}.{name}", m.name));
            }
        }
    }
    assert!(checked > 1000, "only {checked} fields checked");
    assert_eq!(missing, Vec::<String>::new());
}

#[test]
fn a_namespace() {
    let v = golden("namespace");
    assert_eq!(v["metadata"]["creationTimestamp"], "2024-01-02T03:04:05Z");
    assert_eq!(v["spec"]["finalizers"], json!(["kubernetes"]));
}

#[test]
fn a_deployment_with_template_quantities_int_or_string_and_probes() {
    let v = golden("deployment");
    assert_eq!(v["apiVersion"], "apps/v1");
    assert_eq!(v["spec"]["replicas"], 3);
    assert_eq!(
        v["spec"]["strategy"]["rollingUpdate"],
        json!({ "maxUnavailable": 1, "maxSurge": "25%" })
    );
    let c = &v["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        c["resources"],
        json!({ "limits": { "memory": "128Mi" }, "requests": { "cpu": "250m" } })
    );
    assert_eq!(
        c["livenessProbe"]["httpGet"],
        json!({ "path": "/healthz", "port": 80 })
    );
    assert_eq!(c["readinessProbe"]["tcpSocket"]["port"], "http");
    assert_eq!(
        c["ports"],
        json!([{ "containerPort": 80, "protocol": "TCP" }])
    );
    // Non-pointer omitempty zeros are dropped, as kube-apiserver's JSON drops them.
    assert!(v["spec"].get("minReadySeconds").is_none());
    assert!(v["metadata"].get("generation").is_none());
    assert_eq!(v["status"], json!({}));
}

#[test]
fn a_configmap() {
    let v = golden("configmap");
    assert_eq!(v["data"], json!({ "a": "b", "empty": "" }));
    assert_eq!(v["binaryData"], json!({ "bin": "AAH/" }));
    assert_eq!(v["immutable"], true);
}

#[test]
fn a_secret_with_bytes() {
    let v = golden("secret");
    assert_eq!(v["data"], json!({ "a": "Yg==", "key.pem": "AP9iaW5hcnk=" }));
    assert_eq!(v["type"], "Opaque");
}

#[test]
fn a_service_with_int_or_string_target_ports() {
    let v = golden("service");
    assert_eq!(
        v["spec"]["ports"],
        json!([
            { "name": "80-8080", "protocol": "TCP", "port": 80, "targetPort": 8080 },
            { "name": "https", "port": 443, "targetPort": "https" },
        ])
    );
    assert_eq!(
        v["spec"]["sessionAffinityConfig"]["clientIP"]["timeoutSeconds"],
        10800
    );
}

#[test]
fn a_custom_resource_definition_with_json_schema_props() {
    let v = golden("crd");
    let spec = &v["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
    assert_eq!(spec["required"], json!(["size"]));
    assert_eq!(
        spec["properties"]["size"],
        json!({ "type": "integer", "default": 3, "maximum": 10.5, "minimum": 1 })
    );
    assert_eq!(
        spec["properties"]["tags"]["items"],
        json!({ "type": "string", "enum": ["a", "b"] })
    );
    assert_eq!(
        spec["properties"]["extra"],
        json!({ "type": "object", "additionalProperties": true, "x-kubernetes-preserve-unknown-fields": true })
    );
    assert_eq!(
        spec["properties"]["ref"],
        json!({ "$ref": "#/definitions/x" })
    );
    assert_eq!(
        v["spec"]["versions"][0]["subresources"],
        json!({ "status": {} })
    );
}

#[test]
fn a_job_with_times_and_managed_fields() {
    let v = golden("job");
    // metav1.Time keeps seconds only, as kube-apiserver's decoder does.
    assert_eq!(v["metadata"]["creationTimestamp"], "2024-01-02T03:04:05Z");
    assert_eq!(
        v["metadata"]["managedFields"][0]["fieldsV1"],
        json!({ "f:spec": {} })
    );
    assert_eq!(v["status"]["startTime"], "1970-01-01T00:00:00Z");
    assert_eq!(
        v["spec"]["template"]["spec"]["containers"][0]["command"][3],
        "print bpi(20)"
    );
}

#[test]
fn every_fixture_decodes_at_every_truncation_without_panicking() {
    for name in [
        "namespace",
        "deployment",
        "configmap",
        "secret",
        "service",
        "crd",
        "job",
    ] {
        let body = fixture(name);
        for cut in 0..body.len() {
            let _ = decode(&body[..cut]);
        }
    }
}

// ---- malformed input ----

fn varint(mut n: u64, out: &mut Vec<u8>) {
    loop {
        let b = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

fn field(n: u64, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    varint(n << 3 | 2, &mut out);
    varint(payload.len() as u64, &mut out);
    out.extend_from_slice(payload);
    out
}

fn envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
    let mut tm = field(1, api_version.as_bytes());
    tm.extend(field(2, kind.as_bytes()));
    let mut body = b"k8s\0".to_vec();
    body.extend(field(1, &tm));
    body.extend(field(2, raw));
    body
}

#[test]
fn malformed_bodies_name_what_and_where() {
    assert_eq!(
        decode(b"{\"kind\":\"Secret\"}"),
        Err(DecodeError::NoEnvelope)
    );
    assert_eq!(decode(b"k8s\0"), Err(DecodeError::NoTypeMeta));
    assert_eq!(
        decode(&envelope("apps/v1", "Foo", b"")).map_err(|e| e.to_string()),
        Err("unknown kind apps/v1 Foo".into())
    );

    // A varint cut short inside the Deployment's template metadata.
    let mut template_meta = field(1, b"web");
    template_meta.extend([7 << 3, 0x80]); // generation (varint), cut inside its value
    let template = field(1, &template_meta);
    let spec = field(3, &template);
    let body = envelope("apps/v1", "Deployment", &field(2, &spec));
    let err = decode(&body).expect_err("truncated");
    assert!(
        matches!(&err, DecodeError::Truncated { what: "varint", path, .. } if path == ".spec.template.metadata"),
        "{err}"
    );
    assert!(
        err.to_string().starts_with("truncated varint at byte "),
        "{err}"
    );
    assert!(
        err.to_string().ends_with(" in .spec.template.metadata"),
        "{err}"
    );

    // PodSpec field 3 (restartPolicy) is a string: a varint there is the wrong wire type.
    let pod_spec = [3 << 3, 1];
    let template = field(2, &pod_spec);
    let body = envelope("apps/v1", "Deployment", &field(2, &field(3, &template)));
    let err = decode(&body).expect_err("wrong wire type").to_string();
    assert!(
        err.starts_with("wrong wire type 0 for field 3 of io.k8s.api.core.v1.PodSpec at byte "),
        "{err}"
    );
    assert!(
        err.ends_with(" in .spec.template.spec.restartPolicy"),
        "{err}"
    );

    // A length that runs past the end.
    let mut raw = vec![(1 << 3) | 2, 50];
    raw.extend(b"abc");
    let err = decode(&envelope("v1", "Secret", &raw)).expect_err("truncated");
    assert!(
        matches!(
            err,
            DecodeError::Truncated {
                what: "length-delimited field",
                ..
            }
        ),
        "{err}"
    );

    // Not UTF-8 in a string; JSON that does not parse in a RawExtension.
    let err =
        decode(&envelope("v1", "Namespace", &field(1, &field(1, b"\xff")))).expect_err("utf8");
    assert!(
        matches!(err, DecodeError::NotUtf8 { ref path, .. } if path == ".metadata.name"),
        "{err}"
    );
    let revision = field(2, &field(1, b"{nope"));
    let err = decode(&envelope("apps/v1", "ControllerRevision", &revision)).expect_err("json");
    assert!(
        matches!(err, DecodeError::BadJson { ref path, .. } if path == ".data"),
        "{err}"
    );

    // A group (wire type 3) and field number 0.
    let err = decode(&envelope("v1", "Secret", &[(1 << 3) | 3])).expect_err("group");
    assert!(matches!(err, DecodeError::BadTag { wire: 3, .. }), "{err}");
    let err = decode(&envelope("v1", "Secret", &[0, 0])).expect_err("field 0");
    assert!(matches!(err, DecodeError::BadTag { field: 0, .. }), "{err}");

    // An eleven-byte varint.
    let err = decode(&envelope(
        "v1",
        "Secret",
        &[
            5 << 3,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            1,
        ],
    ))
    .expect_err("long varint");
    assert!(matches!(err, DecodeError::VarintTooLong { .. }), "{err}");

    // Compressed content.
    let mut body = envelope("v1", "Secret", b"");
    body.extend(field(3, b"gzip"));
    assert_eq!(
        decode(&body),
        Err(DecodeError::ContentEncoding("gzip".into()))
    );
}

#[test]
fn nesting_is_bounded() {
    // JSONSchemaProps.properties -> JSONSchemaProps -> ... far deeper than MAX_DEPTH.
    let mut schema = Vec::new();
    for _ in 0..(MAX_DEPTH + 5) {
        let mut e = field(1, b"p");
        e.extend(field(2, &schema));
        schema = field(29, &e); // JSONSchemaProps.properties
    }
    let validation = field(1, &schema);
    let version = field(4, &validation);
    let spec = field(7, &version);
    let body = envelope(
        "apiextensions.k8s.io/v1",
        "CustomResourceDefinition",
        &field(2, &spec),
    );
    let err = decode(&body).expect_err("too deep");
    assert!(matches!(err, DecodeError::TooDeep { .. }), "{err}");
}

#[test]
fn unknown_fields_are_skipped_and_packed_numbers_read() {
    let mut meta = field(1, b"a");
    meta.extend(field(99, b"whatever"));
    let mut raw = field(1, &meta);
    raw.extend([0xb8, 0x06, 7]); // field 103, varint: unknown
    let v = decode(&envelope("v1", "ConfigMap", &raw)).expect("decodes");
    assert_eq!(
        v,
        json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": "a" } })
    );
    // A packed repeated int64: PodSecurityContext.supplementalGroups (field 4).
    let psc = field(4, &[1, 2, 3]);
    let pod_spec = field(14, &psc);
    let v = decode(&envelope("v1", "Pod", &field(2, &pod_spec))).expect("decodes");
    assert_eq!(
        v["spec"]["securityContext"]["supplementalGroups"],
        json!([1, 2, 3])
    );
}

#[test]
fn a_self_subject_access_review() {
    let mut attrs = field(1, b"web");
    attrs.extend(field(2, b"create"));
    attrs.extend(field(3, b"apps"));
    attrs.extend(field(5, b"deployments"));
    let spec = field(1, &attrs);
    let v = decode(&envelope(
        "authorization.k8s.io/v1",
        "SelfSubjectAccessReview",
        &field(2, &spec),
    ))
    .expect("decodes");
    assert_eq!(
        v["spec"]["resourceAttributes"],
        json!({ "namespace": "web", "verb": "create", "group": "apps", "resource": "deployments" })
    );
}

#[test]
fn special_forms() {
    assert_eq!(go_duration(0), "0s");
    assert_eq!(go_duration(1_500_000), "1.5ms");
    assert_eq!(go_duration(3_723_500_000_000), "1h2m3.5s");
    assert_eq!(go_duration(-90_000_000_000), "-1m30s");
    assert_eq!(go_duration(2_000), "2µs");
    assert_eq!(civil(0), (1970, 1, 1));
    assert_eq!(civil(19_724), (2024, 1, 2));
    assert_eq!(civil(-719_162), (1, 1, 1));
    let t = [
        1 << 3,
        0xa5,
        0xfa,
        0xcd,
        0xac,
        0x06,
        2 << 3,
        0xc0,
        0x84,
        0x3d,
    ];
    assert_eq!(
        time(&t, 0, "", true),
        Ok(json!("2024-01-02T03:04:05.001000Z"))
    );
    assert_eq!(time(&t, 0, "", false), Ok(json!("2024-01-02T03:04:05Z")));
    assert_eq!(time(&[], 0, "", false), Ok(Value::Null));
}

/// Drops the `null`s Go writes for zero `metav1.Time`s (the decoder leaves them out).
fn without_nulls(v: Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.into_iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k, without_nulls(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.into_iter().map(without_nulls).collect()),
        v => v,
    }
}

/// The bodies kubectl 1.33.9 sends for `create namespace|deployment|configmap|secret
/// generic|service clusterip|job` (captured from the wire: every non-pointer field
/// written, zeros included) decode to exactly the JSON kubectl itself prints for the
/// same object (`--dry-run=client -o json`), and pass the kind's strict field check.
#[test]
fn what_kubectl_sends_decodes_to_what_kubectl_means() {
    for name in [
        "namespace",
        "deployment",
        "configmap",
        "secret",
        "service",
        "job",
    ] {
        let body = std::fs::read(format!("{FIXTURES}/kubectl/{name}.bin")).expect("fixture");
        let got = decode(&body).unwrap_or_else(|e| panic!("{name}: {e}"));
        let want: Value = serde_json::from_slice(
            &std::fs::read(format!("{FIXTURES}/kubectl/{name}.kubectl.json")).expect("json"),
        )
        .expect("kubectl's JSON");
        assert_eq!(got, without_nulls(want), "{name}");
        let kind = got["kind"].as_str().expect("kind");
        let b = builtins()
            .into_iter()
            .find(|b| b.kind == kind)
            .expect("builtin");
        assert_eq!((b.check)(&got), Ok(vec![]), "{name}");
    }
}
