//! A list's and a watch's query parameters, typed: `labelSelector`, `fieldSelector`,
//! `limit`, `continue`, `resourceVersion`, `resourceVersionMatch`; `watch`,
//! `allowWatchBookmarks`, `sendInitialEvents`, `timeoutSeconds`.

use std::time::Duration;

use crate::selector::{FieldQuery, LabelQuery};
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
    /// `continue`: where the page starts (the previous page's `metadata.continue`).
    pub continue_at: Option<usize>,
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
            Some(s) => LabelQuery::parse(&decode(s)).map_err(|message| ParamError::Selector {
                param: "labelSelector",
                message,
            })?,
            None => LabelQuery::default(),
        };
        let fields = match param(query, "fieldSelector") {
            Some(s) => FieldQuery::parse(&decode(s)).map_err(|message| ParamError::Selector {
                param: "fieldSelector",
                message,
            })?,
            None => FieldQuery::default(),
        };
        Ok(ListParams {
            labels,
            fields,
            limit: number(query, "limit")?.filter(|l| *l > 0),
            continue_at: number(query, "continue")?,
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
        assert_eq!(list.continue_at, Some(5));
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
}
