//! `labelSelector` and `fieldSelector` query parameters, in Kubernetes' string form:
//! `app=web,tier!=db,env in (prod,stage),!canary` and `metadata.name=web`.

use strata_protocol::model::{Labels, ObjectKey};

/// One requirement of a label selector.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

/// A parsed label selector: every requirement must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelQuery(Vec<Requirement>);

/// Splits on commas outside parentheses.
fn split_top(text: &str) -> Vec<&str> {
    let (mut depth, mut start, mut out) = (0i32, 0usize, Vec::new());
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&text[start..]);
    out.into_iter()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect()
}

fn set_of(rest: &str) -> Option<Vec<String>> {
    let inner = rest.trim().strip_prefix('(')?.strip_suffix(')')?;
    Some(
        inner
            .split(',')
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
            .collect(),
    )
}

impl LabelQuery {
    /// Parses `text`; the error names the requirement that does not parse.
    pub fn parse(text: &str) -> Result<LabelQuery, String> {
        let mut out = Vec::new();
        for part in split_top(text) {
            let bad = || format!("unable to parse requirement {part:?}");
            let req = if let Some(key) = part.strip_prefix('!') {
                Requirement::DoesNotExist(key.trim().to_owned())
            } else if let Some((k, v)) = part.split_once("!=") {
                Requirement::NotEquals(k.trim().to_owned(), v.trim().to_owned())
            } else if let Some((k, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
                Requirement::Equals(k.trim().to_owned(), v.trim().to_owned())
            } else if let Some((k, rest)) = part.split_once(" notin ") {
                Requirement::NotIn(k.trim().to_owned(), set_of(rest).ok_or_else(bad)?)
            } else if let Some((k, rest)) = part.split_once(" in ") {
                Requirement::In(k.trim().to_owned(), set_of(rest).ok_or_else(bad)?)
            } else if part
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c))
            {
                Requirement::Exists(part.to_owned())
            } else {
                return Err(bad());
            };
            out.push(req);
        }
        Ok(LabelQuery(out))
    }

    /// Whether `labels` satisfy every requirement.
    pub fn matches(&self, labels: &Labels) -> bool {
        self.0.iter().all(|r| match r {
            Requirement::Equals(k, v) => labels.get(k) == Some(v),
            Requirement::NotEquals(k, v) => labels.get(k) != Some(v),
            Requirement::In(k, vs) => labels.get(k).is_some_and(|l| vs.contains(l)),
            Requirement::NotIn(k, vs) => labels.get(k).is_none_or(|l| !vs.contains(l)),
            Requirement::Exists(k) => labels.contains_key(k),
            Requirement::DoesNotExist(k) => !labels.contains_key(k),
        })
    }
}

/// A parsed field selector: every requirement (`field=value`, `field==value`,
/// `field!=value`) must hold. Any field parses; which fields a kind serves is
/// [`FieldQuery::unsupported`], asked once the kind is known, as kube-apiserver does.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldQuery(Vec<(String, bool, String)>);

/// The fields every object can be selected by.
const METADATA_FIELDS: [&str; 2] = ["metadata.name", "metadata.namespace"];

/// The fields kube-apiserver selects a kind by beyond `metadata.name` and
/// `metadata.namespace` (its registries' `GetAttrs` and field label conversions), by
/// (group, kind).
pub fn indexed_fields(group: &str, kind: &str) -> &'static [&'static str] {
    match (group, kind) {
        ("", "Pod") => &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ],
        ("", "Secret") => &["type"],
        ("", "Event") => &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
        ("", "Namespace") => &["status.phase"],
        ("", "Node") => &["spec.unschedulable"],
        ("", "ReplicationController") | ("apps", "ReplicaSet") => &["status.replicas"],
        ("batch", "Job") => &["status.successful"],
        ("certificates.k8s.io", "CertificateSigningRequest") => &["spec.signerName"],
        _ => &[],
    }
}

impl FieldQuery {
    /// Parses `text`; the error names the requirement that does not parse.
    pub fn parse(text: &str) -> Result<FieldQuery, String> {
        let mut out = Vec::new();
        for part in split_top(text) {
            let (field, equal, value) = if let Some((f, v)) = part.split_once("!=") {
                (f, false, v)
            } else if let Some((f, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
                (f, true, v)
            } else {
                return Err(format!("invalid field selector {part:?}"));
            };
            let field = field.trim();
            if field.is_empty() {
                return Err(format!("invalid field selector {part:?}: no field"));
            }
            out.push((field.to_owned(), equal, value.trim().to_owned()));
        }
        Ok(FieldQuery(out))
    }

    /// The first field the kind `group`/`kind` cannot be selected by, if any: what
    /// kube-apiserver refuses with `field label not supported: {field}`.
    pub fn unsupported(&self, group: &str, kind: &str) -> Option<&str> {
        let indexed = indexed_fields(group, kind);
        self.0
            .iter()
            .map(|(f, _, _)| f.as_str())
            .find(|f| !METADATA_FIELDS.contains(f) && !indexed.contains(f))
    }

    /// Whether some requirement names a field of the object's body (beyond its name
    /// and namespace): then [`FieldQuery::matches_object`] must be given the body.
    pub fn needs_body(&self) -> bool {
        self.0
            .iter()
            .any(|(f, _, _)| !METADATA_FIELDS.contains(&f.as_str()))
    }

    /// Whether the object `key` satisfies every requirement on its name and
    /// namespace (other fields are not looked at: see [`FieldQuery::matches_object`]).
    pub fn matches(&self, key: &ObjectKey) -> bool {
        self.0
            .iter()
            .filter(|(f, _, _)| METADATA_FIELDS.contains(&f.as_str()))
            .all(|(field, equal, value)| (metadata_field(key, field) == value) == *equal)
    }

    /// Whether the object `key`, whose manifest is `body` (JSON), satisfies every
    /// requirement. A field the body lacks reads as empty; booleans and numbers as
    /// kube-apiserver prints them (`true`, `3`).
    pub fn matches_object(&self, key: &ObjectKey, body: &[u8]) -> bool {
        if !self.needs_body() {
            return self.matches(key);
        }
        let doc: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
        self.0.iter().all(|(field, equal, value)| {
            let actual = if METADATA_FIELDS.contains(&field.as_str()) {
                metadata_field(key, field).to_owned()
            } else {
                body_field(&doc, field)
            };
            (actual == *value) == *equal
        })
    }
}

fn metadata_field<'a>(key: &'a ObjectKey, field: &str) -> &'a str {
    match field {
        "metadata.name" => key.name.as_str(),
        _ => key.namespace.as_deref().unwrap_or(""),
    }
}

fn body_field(doc: &serde_json::Value, field: &str) -> String {
    let mut at = doc;
    for part in field.split('.') {
        at = &at[part];
    }
    match at {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Null => String::new(),
        // `source` of an Event is an object; kube-apiserver selects its component.
        serde_json::Value::Object(o) => o
            .get("component")
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata_protocol::model::ObjectKeyParts;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn every_requirement_form_parses_and_matches() {
        let q = LabelQuery::parse("app=web,tier!=db, env in (prod, stage),!canary,team").unwrap();
        assert!(q.matches(&labels(&[("app", "web"), ("env", "prod"), ("team", "a")])));
        assert!(!q.matches(&labels(&[("app", "web"), ("env", "dev"), ("team", "a")])));
        assert!(!q.matches(&labels(&[
            ("app", "web"),
            ("env", "prod"),
            ("team", "a"),
            ("canary", "1")
        ])));
        assert!(LabelQuery::parse("app in prod").is_err());
        let f = FieldQuery::parse("metadata.name=web").unwrap();
        assert!(f.matches(&ObjectKey::new(ObjectKeyParts {
            space: strata_protocol::model::Space::default_space(),
            group: String::new(),
            version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: Some("x".into()),
            name: "web".into(),
        })));
        let f = FieldQuery::parse("spec.nodeName=a").unwrap();
        assert_eq!(f.unsupported("", "ConfigMap"), Some("spec.nodeName"));
        assert_eq!(f.unsupported("", "Pod"), None);
        assert!(FieldQuery::parse("=a").is_err());
        assert!(FieldQuery::parse("spec").is_err());
    }

    #[test]
    fn kind_fields_select_by_the_body() {
        let key = ObjectKey::new(ObjectKeyParts {
            space: strata_protocol::model::Space::default_space(),
            group: String::new(),
            version: "v1".into(),
            kind: "Pod".into(),
            namespace: Some("x".into()),
            name: "p".into(),
        });
        let body = br#"{"spec":{"nodeName":"n1","hostNetwork":true},"status":{"phase":"Running"}}"#;
        let q = |s: &str| FieldQuery::parse(s).unwrap();
        assert!(q("spec.nodeName=n1,status.phase!=Pending").matches_object(&key, body));
        assert!(q("spec.hostNetwork=true").matches_object(&key, body));
        assert!(!q("spec.nodeName=n2").matches_object(&key, body));
        assert!(q("spec.nodeName=").matches_object(&key, b"{}"));
        assert!(q("metadata.namespace=x,metadata.name!=q").matches_object(&key, body));
        assert!(q("type=Opaque").matches_object(&key, br#"{"type":"Opaque"}"#));
    }
}
