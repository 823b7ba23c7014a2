//! The verbs that read: get and list (tables for `kubectl get`, pages, selectors, the
//! `Cluster` inventory), and the start of a watch; what they render ([`render`],
//! [`clusters`]), the status changes watches stream ([`status_journal`], [`watch`]),
//! and the answer for a space that does not exist ([`spaces`]).

pub mod clusters;
pub mod render;
pub mod spaces;
pub mod status_journal;
pub mod watch;

use serde_json::{Value, json};
use strata_kube_core::params::WatchParams;
use strata_kube_core::{Answer, Status, failure};
use strata_protocol::model::{Object, Space};

use super::ResourceOp;
use super::catalog::ResourceType;
use crate::node::core::NodeCore;
use status_journal::StatusJournal;

impl ResourceOp {
    pub(super) fn start_watch(
        self,
        core: &mut NodeCore,
        journal: &mut StatusJournal,
        space: &Space,
        params: WatchParams,
    ) -> Result<(watch::WatchSpec, Vec<Value>, u64, u64), Answer> {
        let spec = watch::WatchSpec {
            space: space.clone(),
            resource: self.resource_type(core, space)?,
            namespace: self.req.namespace,
            labels: self.req.list.labels,
            fields: self.req.list.fields,
            table: self.req.table,
            bookmarks: params.bookmarks,
            timeout: params.timeout,
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
        let key = self.key(t, space, name);
        match Self::find(core, &key) {
            Some(o) if self.table => (200, render::table(core, &[o], core.log().head().0)),
            Some(o) => (200, render::object(core, o)),
            None => Self::missing(t, name),
        }
    }

    pub(super) fn matching<'a>(
        &self,
        core: &'a NodeCore,
        t: &ResourceType,
        space: &Space,
    ) -> Vec<&'a Object> {
        core.log()
            .live()
            .filter(|o| {
                let k = o.key();
                k.space == *space
                    && k.group == t.group
                    && k.kind == t.kind
                    && (self.namespace.is_none() || k.namespace == self.namespace)
                    && self.list.labels.matches(&o.meta.labels)
                    && self.list.fields.matches(k)
            })
            .collect()
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
        let start = self.list.continue_at.unwrap_or(0).min(all.len());
        let end = self
            .list
            .limit
            .map_or(all.len(), |l| (start + l).min(all.len()));
        let next = (end < all.len()).then(|| end.to_string());
        let head = core.log().head().0;
        let page = all[start..end].to_vec();
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
        // The root serves its latest state: a list at a version it has not reached, or
        // exactly at one it has left behind, cannot be answered.
        match (
            self.list.resource_version.map(|v| v as u64),
            self.list.resource_version_match.as_deref(),
        ) {
            (Some(rv), _) if rv > head => {
                return Status::too_large_resource_version(rv, head).into();
            }
            (Some(rv), Some("Exact")) if rv != head => {
                return failure(
                    410,
                    "Expired",
                    format!(
                        "resourceVersion {rv} is not served exactly: the root keeps its latest state only ({head})"
                    ),
                    None,
                );
            }
            _ => {}
        }
        if t.is_cluster() {
            return self.list_clusters(core, t, space);
        }
        let all = self.matching(core, t, space);
        let start = self.list.continue_at.unwrap_or(0).min(all.len());
        let end = self
            .list
            .limit
            .map_or(all.len(), |l| (start + l).min(all.len()));
        let page = &all[start..end];
        let next = (end < all.len()).then(|| end.to_string());
        let head = core.log().head().0;
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
