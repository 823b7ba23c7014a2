//! Kubernetes label selectors with exactly Kubernetes' semantics.
//!
//! * every `matchLabels` entry and every `matchExpressions` requirement must hold (AND);
//! * `In`: the label is present and its value is one of `values`;
//! * `NotIn`: the label is absent, or present with a value not in `values`;
//! * `Exists` / `DoesNotExist`: the label is present / absent; `values` must be empty;
//! * an empty selector (`{}`) matches everything. Where Kubernetes' "null selector matches
//!   nothing" applies, callers model it as `Option<LabelSelector>::None`.
//!
//! [`LabelSelector::validate`] applies the API server's checks (operator/values rules, key
//! and value syntax) and names the offending field.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::model::Labels;

/// A label selector as written in Kubernetes manifests (`matchLabels`, `matchExpressions`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LabelSelector {
    /// Labels that must be present with exactly these values.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub match_labels: BTreeMap<String, String>,
    /// Set-based requirements.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub match_expressions: Vec<LabelSelectorRequirement>,
}

/// One set-based requirement of a [`LabelSelector`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LabelSelectorRequirement {
    /// The label key the requirement applies to.
    pub key: String,
    /// How `key` relates to `values`.
    pub operator: SelectorOperator,
    /// Values for `In` / `NotIn`; must be empty for `Exists` / `DoesNotExist`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
}

/// The operators Kubernetes defines for label selector requirements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SelectorOperator {
    /// Present, with one of the values.
    In,
    /// Absent, or present with none of the values.
    NotIn,
    /// Present with any value.
    Exists,
    /// Absent.
    DoesNotExist,
}

/// A selector the API server would reject, with the path of the offending field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct SelectorError {
    /// Path of the field, e.g. `matchExpressions[1].values`.
    pub field: String,
    /// What is wrong with it.
    pub reason: String,
}

impl LabelSelector {
    /// Whether `labels` satisfy every requirement of this selector.
    pub fn matches(&self, labels: &Labels) -> bool {
        self.match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|r| r.matches(labels))
    }

    /// The selector in the Kubernetes API's query syntax (`labelSelector=`):
    /// `app=web,tier in (a,b),!legacy`. Empty for a selector that matches everything.
    pub fn to_query(&self) -> String {
        let labels = self.match_labels.iter().map(|(k, v)| format!("{k}={v}"));
        let expressions = self.match_expressions.iter().map(|r| match r.operator {
            SelectorOperator::In => format!("{} in ({})", r.key, r.values.join(",")),
            SelectorOperator::NotIn => format!("{} notin ({})", r.key, r.values.join(",")),
            SelectorOperator::Exists => r.key.clone(),
            SelectorOperator::DoesNotExist => format!("!{}", r.key),
        });
        labels.chain(expressions).collect::<Vec<_>>().join(",")
    }

    /// Whether this selector has no requirements, and so matches everything.
    pub fn is_empty(&self) -> bool {
        self.match_labels.is_empty() && self.match_expressions.is_empty()
    }

    /// Checks the selector as the Kubernetes API server does and returns every fault.
    pub fn validate(&self) -> Result<(), Vec<SelectorError>> {
        let mut errors = Vec::new();
        for (k, v) in &self.match_labels {
            if let Err(reason) = validate_key(k) {
                errors.push(err(format!("matchLabels[{k:?}]"), reason.to_string()));
            }
            if let Err(reason) = validate_value(v) {
                errors.push(err(format!("matchLabels[{k:?}]"), reason.to_string()));
            }
        }
        for (i, r) in self.match_expressions.iter().enumerate() {
            if let Err(reason) = validate_key(&r.key) {
                errors.push(err(
                    format!("matchExpressions[{i}].key"),
                    reason.to_string(),
                ));
            }
            let field = format!("matchExpressions[{i}].values");
            match r.operator {
                SelectorOperator::In | SelectorOperator::NotIn if r.values.is_empty() => errors
                    .push(err(
                        field,
                        format!("must be non-empty when operator is {:?}", r.operator),
                    )),
                SelectorOperator::Exists | SelectorOperator::DoesNotExist
                    if !r.values.is_empty() =>
                {
                    errors.push(err(
                        field,
                        format!("must be empty when operator is {:?}", r.operator),
                    ))
                }
                _ => {
                    for (j, v) in r.values.iter().enumerate() {
                        if let Err(reason) = validate_value(v) {
                            errors.push(err(
                                format!("matchExpressions[{i}].values[{j}]"),
                                reason.to_string(),
                            ));
                        }
                    }
                }
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors)
        }
    }
}

impl LabelSelectorRequirement {
    /// Whether `labels` satisfy this requirement.
    pub fn matches(&self, labels: &Labels) -> bool {
        let value = labels.get(&self.key);
        match self.operator {
            SelectorOperator::In => value.is_some_and(|v| self.values.contains(v)),
            SelectorOperator::NotIn => value.is_none_or(|v| !self.values.contains(v)),
            SelectorOperator::Exists => value.is_some(),
            SelectorOperator::DoesNotExist => value.is_none(),
        }
    }
}

fn err(field: String, reason: String) -> SelectorError {
    SelectorError { field, reason }
}

/// A label key: an optional DNS-subdomain prefix and `/`, then a name of at most 63
/// characters of `[A-Za-z0-9_.-]` that starts and ends alphanumeric.
pub fn validate_key(key: &str) -> Result<(), LabelError> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix {
        if p.is_empty() || p.len() > 253 {
            return Err(LabelError::PrefixLength {
                key: key.to_owned(),
            });
        }
        let ok = p.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        });
        if !ok {
            return Err(LabelError::PrefixNotDns {
                key: key.to_owned(),
            });
        }
    }
    if name.is_empty() {
        return Err(LabelError::EmptyName {
            key: key.to_owned(),
        });
    }
    check_name_part(name).map_err(|part| LabelError::Key {
        key: key.to_owned(),
        part,
    })
}

/// A label value: empty, or at most 63 characters of `[A-Za-z0-9_.-]` that start and end
/// alphanumeric.
pub fn validate_value(value: &str) -> Result<(), LabelError> {
    if value.is_empty() {
        return Ok(());
    }
    check_name_part(value).map_err(|part| LabelError::Value {
        value: value.to_owned(),
        part,
    })
}

/// Why a label key or value is invalid ([`validate_key`], [`validate_value`]); each
/// names the key or value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LabelError {
    /// A key's prefix is empty or longer than 253 characters.
    #[error("key {key:?}: prefix must be 1-253 characters")]
    PrefixLength {
        /// The key.
        key: String,
    },
    /// A key's prefix is not a lowercase DNS subdomain.
    #[error("key {key:?}: prefix must be a lowercase DNS subdomain")]
    PrefixNotDns {
        /// The key.
        key: String,
    },
    /// A key's name part is empty.
    #[error("key {key:?}: name part must not be empty")]
    EmptyName {
        /// The key.
        key: String,
    },
    /// A key's name part is malformed.
    #[error("key {key:?}: {part}")]
    Key {
        /// The key.
        key: String,
        /// What is wrong with its name part.
        part: NamePartError,
    },
    /// A value is malformed.
    #[error("value {value:?}: {part}")]
    Value {
        /// The value.
        value: String,
        /// What is wrong with it.
        part: NamePartError,
    },
}

/// What is wrong with a label's name part or value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NamePartError {
    /// Over 63 characters.
    #[error("must be at most 63 characters")]
    TooLong,
    /// Starts or ends with something other than a letter or digit.
    #[error("must start and end with an alphanumeric character")]
    Edges,
    /// Holds a character other than letters, digits, `-`, `_` and `.`.
    #[error("may contain only alphanumerics, '-', '_' and '.'")]
    Characters,
}

fn check_name_part(s: &str) -> Result<(), NamePartError> {
    if s.len() > 63 {
        return Err(NamePartError::TooLong);
    }
    let bytes = s.as_bytes();
    let alnum = |b: &u8| b.is_ascii_alphanumeric();
    if !bytes.first().is_some_and(alnum) || !bytes.last().is_some_and(alnum) {
        return Err(NamePartError::Edges);
    }
    if !bytes
        .iter()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    {
        return Err(NamePartError::Characters);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn req(key: &str, operator: SelectorOperator, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.to_owned(),
            operator,
            values: values.iter().map(|v| (*v).to_owned()).collect(),
        }
    }

    #[test]
    fn query_syntax_is_the_api_servers() {
        let mut s = sel(vec![
            req("tier", SelectorOperator::In, &["a", "b"]),
            req("zone", SelectorOperator::NotIn, &["x"]),
            req("gpu", SelectorOperator::Exists, &[]),
            req("legacy", SelectorOperator::DoesNotExist, &[]),
        ]);
        s.match_labels.insert("app".into(), "web".into());
        assert_eq!(
            s.to_query(),
            "app=web,tier in (a,b),zone notin (x),gpu,!legacy"
        );
        assert_eq!(LabelSelector::default().to_query(), "");
    }

    fn sel(exprs: Vec<LabelSelectorRequirement>) -> LabelSelector {
        LabelSelector {
            match_labels: BTreeMap::new(),
            match_expressions: exprs,
        }
    }

    #[test]
    fn empty_selector_matches_everything() {
        assert!(LabelSelector::default().matches(&Labels::new()));
        assert!(LabelSelector::default().matches(&labels(&[("a", "b")])));
    }

    #[test]
    fn match_labels_need_exact_values() {
        let s = LabelSelector {
            match_labels: labels(&[("role", "pos")]),
            match_expressions: vec![],
        };
        assert!(s.matches(&labels(&[("role", "pos"), ("x", "y")])));
        assert!(!s.matches(&labels(&[("role", "kiosk")])));
        assert!(!s.matches(&Labels::new()));
    }

    #[test]
    fn in_requires_presence() {
        let s = sel(vec![req("country", SelectorOperator::In, &["fr", "de"])]);
        assert!(s.matches(&labels(&[("country", "fr")])));
        assert!(!s.matches(&labels(&[("country", "es")])));
        assert!(!s.matches(&Labels::new()));
    }

    #[test]
    fn not_in_matches_absent_labels() {
        let s = sel(vec![req("country", SelectorOperator::NotIn, &["fr"])]);
        assert!(s.matches(&Labels::new()));
        assert!(s.matches(&labels(&[("country", "de")])));
        assert!(!s.matches(&labels(&[("country", "fr")])));
    }

    #[test]
    fn exists_and_does_not_exist() {
        let e = sel(vec![req("gpu", SelectorOperator::Exists, &[])]);
        let d = sel(vec![req("gpu", SelectorOperator::DoesNotExist, &[])]);
        let with = labels(&[("gpu", "")]);
        assert!(e.matches(&with) && !d.matches(&with));
        assert!(!e.matches(&Labels::new()) && d.matches(&Labels::new()));
    }

    #[test]
    fn requirements_are_anded() {
        let s = LabelSelector {
            match_labels: labels(&[("role", "pos")]),
            match_expressions: vec![req("country", SelectorOperator::In, &["fr"])],
        };
        assert!(s.matches(&labels(&[("role", "pos"), ("country", "fr")])));
        assert!(!s.matches(&labels(&[("role", "pos"), ("country", "de")])));
        assert!(!s.matches(&labels(&[("country", "fr")])));
    }

    #[test]
    fn validation_names_each_fault() {
        let s = LabelSelector {
            match_labels: labels(&[("-bad", "ok")]),
            match_expressions: vec![
                req("a", SelectorOperator::In, &[]),
                req("b", SelectorOperator::Exists, &["x"]),
                req("c", SelectorOperator::NotIn, &["bad value"]),
            ],
        };
        let errors: Vec<String> = s
            .validate()
            .unwrap_err()
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            errors,
            vec![
                "matchLabels[\"-bad\"]: key \"-bad\": must start and end with an alphanumeric character",
                "matchExpressions[0].values: must be non-empty when operator is In",
                "matchExpressions[1].values: must be empty when operator is Exists",
                "matchExpressions[2].values[0]: value \"bad value\": may contain only alphanumerics, '-', '_' and '.'",
            ]
        );
    }

    #[test]
    fn validation_accepts_prefixed_keys() {
        let s = LabelSelector {
            match_labels: labels(&[("strata.dev/region", "eu-west"), ("empty", "")]),
            match_expressions: vec![],
        };
        assert_eq!(s.validate(), Ok(()));
        let bad = LabelSelector {
            match_labels: labels(&[("Strata.dev/x", "y")]),
            match_expressions: vec![],
        };
        assert!(bad.validate().is_err());
    }
}
