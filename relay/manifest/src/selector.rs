//! `labelSelector` and `fieldSelector` query parameters, in Kubernetes' string form:
//! `app=web,tier!=db,env in (prod,stage),!canary` and `metadata.name=web`.

use strata_protocol::model::{Labels, ObjectKey};
use strata_protocol::selector::{LabelSelector, LabelSelectorRequirement, SelectorOperator};

/// A selector query that does not parse: the requirement, as written, and what is
/// wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{problem} {requirement:?}")]
pub struct QueryError {
    /// The requirement that does not parse (`tier in prod`).
    pub requirement: String,
    /// kube-apiserver's words for it (`unable to parse requirement`).
    pub problem: &'static str,
}

/// A parsed `labelSelector`: the same model as a manifest's selector
/// ([`LabelSelector`]), each requirement written as a set-based one (`a=b` is `a in
/// (b)`, `a!=b` is `a notin (b)`), so that a query and a manifest select alike.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelQuery(LabelSelector);

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

fn requirement(
    key: &str,
    operator: SelectorOperator,
    values: Vec<String>,
) -> LabelSelectorRequirement {
    LabelSelectorRequirement {
        key: key.trim().to_owned(),
        operator,
        values,
    }
}

impl LabelQuery {
    /// Parses `text`; the error names the requirement that does not parse.
    pub fn parse(text: &str) -> Result<LabelQuery, QueryError> {
        use SelectorOperator::{DoesNotExist, Exists, In, NotIn};
        let mut out = Vec::new();
        for part in split_top(text) {
            let bad = || QueryError {
                requirement: part.to_owned(),
                problem: "unable to parse requirement",
            };
            let one = |v: &str| vec![v.trim().to_owned()];
            let req = if let Some(key) = part.strip_prefix('!') {
                requirement(key, DoesNotExist, Vec::new())
            } else if let Some((k, v)) = part.split_once("!=") {
                requirement(k, NotIn, one(v))
            } else if let Some((k, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
                requirement(k, In, one(v))
            } else if let Some((k, rest)) = part.split_once(" notin ") {
                requirement(k, NotIn, set_of(rest).ok_or_else(bad)?)
            } else if let Some((k, rest)) = part.split_once(" in ") {
                requirement(k, In, set_of(rest).ok_or_else(bad)?)
            } else if part
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c))
            {
                requirement(part, Exists, Vec::new())
            } else {
                return Err(bad());
            };
            out.push(req);
        }
        Ok(LabelQuery(LabelSelector {
            match_labels: std::collections::BTreeMap::new(),
            match_expressions: out,
        }))
    }

    /// Whether `labels` satisfy every requirement.
    pub fn matches(&self, labels: &Labels) -> bool {
        self.0.matches(labels)
    }

    /// The selector this query is.
    pub fn selector(&self) -> &LabelSelector {
        &self.0
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
    pub fn parse(text: &str) -> Result<FieldQuery, QueryError> {
        let mut out = Vec::new();
        for part in split_top(text) {
            let (field, equal, value) = if let Some((f, v)) = part.split_once("!=") {
                (f, false, v)
            } else if let Some((f, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
                (f, true, v)
            } else {
                return Err(QueryError {
                    requirement: part.to_owned(),
                    problem: "invalid field selector",
                });
            };
            let field = field.trim();
            if field.is_empty() {
                return Err(QueryError {
                    requirement: part.to_owned(),
                    problem: "invalid field selector (no field)",
                });
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
