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

/// A parsed field selector over the fields every object has.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldQuery(Vec<(String, bool, String)>);

impl FieldQuery {
    /// Parses `text`; only `metadata.name` and `metadata.namespace` are fields here.
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
            if field != "metadata.name" && field != "metadata.namespace" {
                return Err(format!(
                    "field label not supported: {field} (metadata.name and metadata.namespace are)"
                ));
            }
            out.push((field.to_owned(), equal, value.trim().to_owned()));
        }
        Ok(FieldQuery(out))
    }

    /// Whether the object `key` satisfies every requirement.
    pub fn matches(&self, key: &ObjectKey) -> bool {
        self.0.iter().all(|(field, equal, value)| {
            let actual = match field.as_str() {
                "metadata.name" => key.name.as_str(),
                _ => key.namespace.as_deref().unwrap_or(""),
            };
            (actual == value) == *equal
        })
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
        assert!(FieldQuery::parse("spec.nodeName=a").is_err());
    }
}
