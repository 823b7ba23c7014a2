//! A list's and a watch's query parameters, typed: `labelSelector`, `fieldSelector`,
//! `limit`, `continue`, `resourceVersion`, `resourceVersionMatch`; `watch`,
//! `allowWatchBookmarks`, `sendInitialEvents`, `timeoutSeconds`.

use std::time::Duration;

use crate::selector::{FieldQuery, LabelQuery};
use crate::status::Cause;
use crate::{Status, decode};

/// A query parameter that does not parse; answered 400 `BadRequest`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParamError {
    /// A label or field selector that does not parse.
    #[error("{param}: {message}")]
    Selector {
        /// `labelSelector` or `fieldSelector`.
        param: &'static str,
        /// Why.
        message: String,
    },
    /// A `continue` token this server did not give.
    #[error("continue: {0:?} is not a continue token of this server")]
    Continue(String),
    /// A parameter that must be a number and is not.
    #[error("{param}: {value:?} is not a number")]
    NotANumber {
        /// The parameter's name.
        param: &'static str,
        /// What it was.
        value: String,
    },
}

impl From<ParamError> for Status {
    fn from(e: ParamError) -> Status {
        Status::bad_request(e.to_string())
    }
}

/// The value of the query parameter `name` (the first, if repeated), undecoded.
pub fn param<'a>(query: &'a [(String, String)], name: &str) -> Option<&'a str> {
    query
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// A number parameter; absent or empty is `None`.
fn number(query: &[(String, String)], name: &'static str) -> Result<Option<usize>, ParamError> {
    match param(query, name).filter(|v| !v.is_empty()) {
        None => Ok(None),
        Some(v) => v.parse().map(Some).map_err(|_| ParamError::NotANumber {
            param: name,
            value: v.to_owned(),
        }),
    }
}

/// A list's parameters (also what a watch selects).
#[derive(Debug, Clone, Default)]
pub struct ListParams {
    /// `labelSelector` (everything when absent).
    pub labels: LabelQuery,
    /// `fieldSelector` (everything when absent).
    pub fields: FieldQuery,
    /// `limit`: the page's size; `None` when absent or 0.
    pub limit: Option<usize>,
    /// `continue`: where the page starts and the version it shows (the previous
    /// page's `metadata.continue`).
    pub continue_at: Option<Continue>,
    /// `resourceVersion`.
    pub resource_version: Option<usize>,
    /// `resourceVersionMatch` (`Exact`, `NotOlderThan`).
    pub resource_version_match: Option<String>,
}

impl ListParams {
    /// Parses the query, in this order: selectors, `limit`, `continue`,
    /// `resourceVersion`.
    pub fn parse(query: &[(String, String)]) -> Result<ListParams, ParamError> {
        let labels = match param(query, "labelSelector") {
            Some(s) => LabelQuery::parse(&decode(s)).map_err(|e| ParamError::Selector {
                param: "labelSelector",
                message: e.to_string(),
            })?,
            None => LabelQuery::default(),
        };
        let fields = match param(query, "fieldSelector") {
            Some(s) => FieldQuery::parse(&decode(s)).map_err(|e| ParamError::Selector {
                param: "fieldSelector",
                message: e.to_string(),
            })?,
            None => FieldQuery::default(),
        };
        Ok(ListParams {
            labels,
            fields,
            limit: number(query, "limit")?.filter(|l| *l > 0),
            continue_at: match param(query, "continue").filter(|c| !c.is_empty()) {
                None => None,
                Some(c) => Some(
                    Continue::parse(&decode(c))
                        .ok_or_else(|| ParamError::Continue(c.to_owned()))?,
                ),
            },
            resource_version: number(query, "resourceVersion")?,
            resource_version_match: param(query, "resourceVersionMatch").map(str::to_owned),
        })
    }
}

/// A watch's own parameters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WatchParams {
    /// `resourceVersion`: events after it; `None` starts with the current state.
    pub from: Option<u64>,
    /// `allowWatchBookmarks=true`.
    pub bookmarks: bool,
    /// `sendInitialEvents`, when given.
    pub send_initial_events: Option<bool>,
    /// `timeoutSeconds`.
    pub timeout: Option<Duration>,
}

impl WatchParams {
    /// Whether the query asks for a watch (`watch=true` or `watch=1`).
    pub fn asked(query: &[(String, String)]) -> bool {
        param(query, "watch").is_some_and(|w| w == "true" || w == "1")
    }

    /// Parses a watch's parameters (whether or not it [asks](Self::asked) for one).
    pub fn parse(query: &[(String, String)]) -> Result<WatchParams, ParamError> {
        Ok(WatchParams {
            from: number(query, "resourceVersion")?.map(|v| v as u64),
            bookmarks: param(query, "allowWatchBookmarks") == Some("true"),
            send_initial_events: param(query, "sendInitialEvents").map(|s| s == "true"),
            timeout: number(query, "timeoutSeconds")?.map(|s| Duration::from_secs(s as u64)),
        })
    }
}

/// A list's `continue` token: the `resourceVersion` of the list's first page (every
/// page shows the objects as they were then) and where the next page starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Continue {
    /// The first page's `resourceVersion`; `None` for a bare offset (the current state).
    pub rv: Option<u64>,
    /// How many objects the earlier pages held.
    pub offset: usize,
}

impl Continue {
    /// The token of the page after `offset` objects of the list at `rv`.
    pub fn token(rv: u64, offset: usize) -> String {
        format!("{rv}.{offset}")
    }

    /// Parses a token this server gave (`rv.offset`, or a bare offset).
    pub fn parse(text: &str) -> Option<Continue> {
        match text.split_once('.') {
            Some((rv, offset)) => Some(Continue {
                rv: Some(rv.parse().ok()?),
                offset: offset.parse().ok()?,
            }),
            None => Some(Continue {
                rv: None,
                offset: text.parse().ok()?,
            }),
        }
    }
}

const NOT_OLDER_THAN: &str = "NotOlderThan";
const EXACT: &str = "Exact";

fn forbidden(field: &str, message: &str) -> Cause {
    Cause {
        reason: "FieldValueForbidden",
        field: field.to_owned(),
        message: format!("Forbidden: {message}"),
    }
}

fn not_supported(field: &str, value: &str, supported: &[&str]) -> Cause {
    let supported: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
    Cause {
        reason: "FieldValueNotSupported",
        field: field.to_owned(),
        message: format!(
            "Unsupported value: {value:?}: supported values: {}",
            supported.join(", ")
        ),
    }
}

/// kube-apiserver's checks of a list's or a watch's options (`ValidateListOptions`):
/// `resourceVersionMatch` and `sendInitialEvents` together, as it refuses them, 422
/// `Invalid` on `ListOptions.meta.k8s.io`.
pub fn validate_list_options(query: &[(String, String)], watch: bool) -> Result<(), Status> {
    let rv = param(query, "resourceVersion").unwrap_or_default();
    let matched = param(query, "resourceVersionMatch").unwrap_or_default();
    let initial = param(query, "sendInitialEvents");
    let cont = param(query, "continue").unwrap_or_default();
    let field = "resourceVersionMatch";
    let mut causes = Vec::new();
    if watch {
        if initial.is_some() && matched != NOT_OLDER_THAN {
            causes.push(forbidden(
                field,
                "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
            ));
        }
        if !matched.is_empty() {
            if initial.is_none() {
                causes.push(forbidden(
                    field,
                    "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
                ));
            }
            if matched != NOT_OLDER_THAN {
                causes.push(not_supported(field, matched, &[NOT_OLDER_THAN]));
            }
            if !cont.is_empty() {
                causes.push(forbidden(
                    field,
                    "resourceVersionMatch is forbidden when continue is provided",
                ));
            }
        }
    } else {
        if !matched.is_empty() {
            if rv.is_empty() {
                causes.push(forbidden(
                    field,
                    "resourceVersionMatch is forbidden unless resourceVersion is provided",
                ));
            }
            if !cont.is_empty() {
                causes.push(forbidden(
                    field,
                    "resourceVersionMatch is forbidden when continue is provided",
                ));
            }
            if matched != EXACT && matched != NOT_OLDER_THAN {
                causes.push(not_supported(field, matched, &[EXACT, NOT_OLDER_THAN, ""]));
            }
            if matched == EXACT && rv == "0" {
                causes.push(forbidden(
                    field,
                    "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
                ));
            }
        }
        if initial.is_some() {
            causes.push(forbidden(
                "sendInitialEvents",
                "sendInitialEvents is forbidden for list",
            ));
        }
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(Status::invalid("ListOptions", "meta.k8s.io", "", &causes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn list_and_watch_parameters_parse() {
        let q = query(&[
            ("labelSelector", "app%3Dweb"),
            ("limit", "0"),
            ("continue", "5"),
            ("resourceVersion", "7"),
            ("resourceVersionMatch", "NotOlderThan"),
            ("watch", "1"),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", "30"),
        ]);
        let list = ListParams::parse(&q).expect("parses");
        assert_eq!(list.limit, None);
        assert_eq!(
            list.continue_at,
            Some(Continue {
                rv: None,
                offset: 5
            })
        );
        assert_eq!(list.resource_version, Some(7));
        assert_eq!(list.resource_version_match.as_deref(), Some("NotOlderThan"));
        assert!(WatchParams::asked(&q));
        let watch = WatchParams::parse(&q).expect("parses");
        assert_eq!(
            watch,
            WatchParams {
                from: Some(7),
                bookmarks: true,
                send_initial_events: None,
                timeout: Some(Duration::from_secs(30)),
            }
        );
    }

    #[test]
    fn bad_parameters_are_typed_errors() {
        let err = ListParams::parse(&query(&[("limit", "ten")])).expect_err("refused");
        assert_eq!(err.to_string(), "limit: \"ten\" is not a number");
        assert_eq!(Status::from(err).code, 400);
        let err = ListParams::parse(&query(&[("labelSelector", "a in (")])).expect_err("refused");
        assert!(matches!(
            err,
            ParamError::Selector {
                param: "labelSelector",
                ..
            }
        ));
    }

    #[test]
    fn continue_tokens_carry_the_first_pages_version() {
        let token = Continue::token(42, 10);
        assert_eq!(
            Continue::parse(&token),
            Some(Continue {
                rv: Some(42),
                offset: 10
            })
        );
        let err = ListParams::parse(&query(&[("continue", "x.y")])).expect_err("refused");
        assert_eq!(Status::from(err).code, 400);
    }

    #[test]
    fn list_options_are_checked_as_kube_apiserver_checks_them() {
        let check = |pairs: &[(&str, &str)], watch: bool| {
            validate_list_options(&query(pairs), watch).map_err(|s| (s.code, s.message))
        };
        assert!(
            check(
                &[
                    ("sendInitialEvents", "true"),
                    ("resourceVersionMatch", "NotOlderThan")
                ],
                true
            )
            .is_ok()
        );
        assert!(
            check(
                &[
                    ("sendInitialEvents", "false"),
                    ("resourceVersionMatch", "NotOlderThan"),
                    ("resourceVersion", "5")
                ],
                true
            )
            .is_ok()
        );
        assert!(check(&[("resourceVersion", "5")], true).is_ok());
        assert_eq!(
            check(&[("sendInitialEvents", "true")], true),
            Err((422, "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan".into()))
        );
        assert_eq!(
            check(&[("resourceVersionMatch", "NotOlderThan")], true),
            Err((422, "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided".into()))
        );
        assert!(
            check(
                &[("resourceVersion", "5"), ("resourceVersionMatch", "Exact")],
                false
            )
            .is_ok()
        );
        assert_eq!(
            check(&[("resourceVersionMatch", "Exact")], false).map_err(|e| e.0),
            Err(422)
        );
        assert_eq!(
            check(
                &[("resourceVersion", "1"), ("resourceVersionMatch", "Newest")],
                false
            )
            .map_err(|e| e.0),
            Err(422)
        );
        assert_eq!(
            check(&[("sendInitialEvents", "true")], false).map_err(|e| e.0),
            Err(422)
        );
    }
}
