//! The verbs that read: get and list (tables for `kubectl get`, pages, selectors, the
//! `Cluster` inventory), and the start of a watch; what they render ([`render`],
//! [`clusters`]), the status changes watches stream ([`status_journal`], [`watch`]),
//! and the answer for a space that does not exist ([`spaces`]).

pub mod clusters;
pub mod event_cache;
pub mod render;
pub mod spaces;
pub mod status_journal;
pub mod watch;

use serde_json::{Value, json};
use strata_kube_core::params::{Continue, WatchParams};
use strata_kube_core::{Answer, Status, failure};
use strata_protocol::model::{Object, Space};

use super::ResourceOp;
use super::catalog::ResourceType;
use crate::tier::core::NodeCore;
use status_journal::StatusJournal;

impl ResourceOp {
    pub(super) fn start_watch(
        self,
        core: &mut NodeCore,
        journal: &mut StatusJournal,
        space: &Space,
        params: WatchParams,
    ) -> Result<(watch::WatchSpec, watch::First, u64, u64), Answer> {
        let resource = self.resource_type(core, space)?;
        self.check_fields(&resource)?;
        let spec = watch::WatchSpec {
            space: space.clone(),
            resource,
            namespace: self.req.namespace,
            labels: self.req.list.labels,
            fields: self.req.list.fields,
            table: self.req.table,
            bookmarks: params.bookmarks,
            timeout: params.timeout,
            initial_events: params.send_initial_events,
        };
        let (first, since, epoch) = spec.start(core, journal, params.from)?;
        Ok((spec, first, since, epoch))
    }

    pub(super) fn get(
        &self,
        core: &NodeCore,
        t: &ResourceType,
        space: &Space,
        name: &str,
    ) -> Answer {
        if t.is_cluster() {
            return match clusters::get(core, space, name) {
                Some(c) if self.table => (200, clusters::table(&[c], core.log().head().0)),
                Some(c) => (200, c),
                None => Self::missing(t, name),
            };
        }
        if t.is_fleet_status() {
            let head = core.log().head().0;
            let ns = self.namespace.as_deref();
            return match crate::fleet_status::find(core, space, &t.kind, ns, name)
                .and_then(|e| crate::fleet_status::render(core, &e, head))
            {
                Some(v) if self.table => (200, crate::fleet_status::table(&[v], head)),
                Some(v) => (200, v),
                None => Self::missing(t, name),
            };
        }
        let key = self.key(t, space, name);
        match Self::find(core, &key) {
            Some(o) if self.table => (200, render::table(core, &[o], core.log().head().0)),
            Some(o) => (200, render::object(core, o)),
            None => Self::missing(t, name),
        }
    }

    /// Whether the request selects `o`: of type `t` in `space`, in the request's
    /// namespace (any without one), matching its label and field selectors.
    fn selects(&self, t: &ResourceType, space: &Space, o: &Object) -> bool {
        let k = o.key();
        k.space == *space
            && k.group == t.group
            && k.kind == t.kind
            && (self.namespace.is_none() || k.namespace == self.namespace)
            && self.list.labels.matches(&o.meta.labels)
            && self.list.fields.matches_object(k, &o.body)
    }

    pub(super) fn matching<'a>(
        &self,
        core: &'a NodeCore,
        t: &ResourceType,
        space: &Space,
    ) -> Vec<&'a Object> {
        core.log()
            .live()
            .filter(|o| self.selects(t, space, o))
            .collect()
    }

    /// A field selector on a field the kind is not selected by: 400, in kube-apiserver's
    /// words.
    fn check_fields(&self, t: &ResourceType) -> Result<(), Answer> {
        match self.list.fields.unsupported(&t.group, &t.kind) {
            Some(field) => {
                Err(Status::bad_request(format!("field label not supported: {field}")).into())
            }
            None => Ok(()),
        }
    }

    /// The list's `resourceVersion` and where its page starts: the continue token's
    /// (every page shows the state of the first), `resourceVersionMatch=Exact`'s, or
    /// the head.
    fn list_at(&self, head: u64) -> Result<(u64, usize, bool), Answer> {
        if let Some(token) = &self.list.continue_at {
            return Ok((token.rv.unwrap_or(head), token.offset, true));
        }
        match (
            self.list.resource_version.map(|v| v as u64),
            self.list.resource_version_match.as_deref(),
        ) {
            (Some(rv), _) if rv > head => Err(Status::too_large_resource_version(rv, head).into()),
            (Some(rv), Some("Exact")) => Ok((rv, 0, false)),
            _ => Ok((head, 0, false)),
        }
    }

    /// The objects the list selects as they were at revision `at`, in key order: the
    /// log's, with the writes after `at` undone from the root's watch history; 410
    /// when the history no longer reaches back to `at`.
    fn matching_at<'a>(
        &self,
        core: &'a NodeCore,
        t: &ResourceType,
        space: &Space,
        (at, continuing): (u64, bool),
    ) -> Result<Vec<&'a Object>, Answer> {
        if at >= core.log().head().0 {
            return Ok(self.matching(core, t, space));
        }
        let undone = core.history().state_at(at).map_err(|e| {
            if continuing {
                failure(
                    410,
                    "Expired",
                    "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.".into(),
                    None,
                )
            } else {
                failure(410, "Expired", e.to_string(), None)
            }
        })?;
        let mut all: Vec<&Object> = core
            .log()
            .live()
            .filter(|o| !undone.contains_key(o.key()))
            .chain(undone.values().filter_map(|o| *o))
            .filter(|o| self.selects(t, space, o))
            .collect();
        all.sort_by(|a, b| a.key().cmp(b.key()));
        Ok(all)
    }

    /// The space's fleet statuses a list asks for.
    fn list_fleet_statuses(&self, core: &NodeCore, t: &ResourceType, space: &Space) -> Answer {
        let head = core.log().head().0;
        let all: Vec<Value> =
            crate::fleet_status::entries(core, space, &t.kind, self.namespace.as_deref())
                .into_iter()
                .filter(|e| self.list.fields.matches(&e.key))
                .filter_map(|e| crate::fleet_status::render(core, &e, head))
                .filter(|v| {
                    let labels =
                        serde_json::from_value(v["metadata"]["labels"].clone()).unwrap_or_default();
                    self.list.labels.matches(&labels)
                })
                .collect();
        // Made from reports, with no history: every page shows them as they are now.
        let (page, next) = self.page_now(all, head);
        if self.table {
            let mut table = crate::fleet_status::table(&page, head);
            if let Some(c) = next {
                table["metadata"]["continue"] = json!(c);
            }
            return (200, table);
        }
        (
            200,
            render::list(&t.api_version(), &t.kind, head, page, next),
        )
    }

    /// The page of `all` (a list with no history, as it is now at `head`) the request's
    /// `limit` and `continue` ask for, and the token of the next page, if any.
    fn page_now(&self, mut all: Vec<Value>, head: u64) -> (Vec<Value>, Option<String>) {
        let start = self.list.continue_at.map_or(0, |c| c.offset).min(all.len());
        let end = self
            .list
            .limit
            .map_or(all.len(), |l| (start + l).min(all.len()));
        let next = (end < all.len()).then(|| Continue::token(head, end));
        all.truncate(end);
        (all.split_off(start), next)
    }

    /// The space's clusters a list asks for.
    fn list_clusters(&self, core: &NodeCore, t: &ResourceType, space: &Space) -> Answer {
        let all: Vec<Value> = clusters::all(core, space)
            .into_iter()
            .filter(|c| {
                let labels =
                    serde_json::from_value(c["metadata"]["labels"].clone()).unwrap_or_default();
                let name = c["metadata"]["name"].as_str().unwrap_or_default();
                self.list.labels.matches(&labels)
                    && self.list.fields.matches(&clusters::key(space, name))
            })
            .collect();
        let head = core.log().head().0;
        // The inventory has no history: every page shows it as it is now.
        let (page, next) = self.page_now(all, head);
        if self.table {
            let mut table = clusters::table(&page, head);
            if let Some(c) = next {
                table["metadata"]["continue"] = json!(c);
            }
            return (200, table);
        }
        (
            200,
            render::list(&t.api_version(), &t.kind, head, page, next),
        )
    }

    pub(super) fn list(&self, core: &NodeCore, t: &ResourceType, space: &Space) -> Answer {
        let head = core.log().head().0;
        if let Err(a) = self.check_fields(t) {
            return a;
        }
        let (at, start, continuing) = match self.list_at(head) {
            Ok(at) => at,
            Err(a) => return a,
        };
        if t.is_cluster() {
            return self.list_clusters(core, t, space);
        }
        if t.is_fleet_status() {
            return self.list_fleet_statuses(core, t, space);
        }
        let all = match self.matching_at(core, t, space, (at, continuing)) {
            Ok(all) => all,
            Err(a) => return a,
        };
        let start = start.min(all.len());
        let end = self
            .list
            .limit
            .map_or(all.len(), |l| (start + l).min(all.len()));
        let page = &all[start..end];
        let next = (end < all.len()).then(|| Continue::token(at, end));
        let head = at;
        if self.table {
            let mut table = render::table(core, page, head);
            if let Some(c) = next {
                table["metadata"]["continue"] = json!(c);
            }
            return (200, table);
        }
        let items = page.iter().map(|o| render::object(core, o)).collect();
        (
            200,
            render::list(&t.api_version(), &t.kind, head, items, next),
        )
    }
}
