//! Records the node's unit tests build: clusters and links as children report them.

use std::collections::BTreeMap;

use strata_protocol::model::Cluster;
use strata_protocol::time::UnixMillis;
use strata_protocol::wire::{LinkRecord, Report, ReportKey, ReportValue, Role};

fn names(path: &[&str]) -> Vec<String> {
    path.iter().map(|p| (*p).to_owned()).collect()
}

/// A cluster without labels or properties, below the relays of `path`.
pub(crate) fn cluster(name: &str, path: &[&str]) -> Cluster {
    Cluster {
        name: name.into(),
        labels: BTreeMap::new(),
        properties: BTreeMap::new(),
        path: names(path),
    }
}

/// A placement `name` in the default space that selects every cluster and sets
/// nothing else.
pub(crate) fn placement(name: &str) -> strata_protocol::placement::Placement {
    strata_protocol::placement::Placement {
        space: strata_protocol::model::Space::default_space(),
        name: name.into(),
        objects: vec![],
        clusters: strata_protocol::placement::ClusterSelector::default(),
        upsync: vec![],
        moves: Default::default(),
        customize: vec![],
        status_summary: vec![],
        rollout: None,
    }
}

/// A child's report of [`cluster`].
pub(crate) fn cluster_report(name: &str, path: &[&str]) -> Report {
    Report {
        key: ReportKey::Cluster { name: name.into() },
        value: ReportValue::Cluster(cluster(name, path)),
    }
}

/// The link of a node of `role` below the relays of `path`, up (or down) since `since`
/// and last heard then, caught up, with one cluster below.
pub(crate) fn link(role: Role, path: &[&str], connected: bool, since: u64) -> LinkRecord {
    LinkRecord {
        path: names(path),
        role,
        connected,
        since: UnixMillis(since),
        last_heard: UnixMillis(since),
        lag: Some(0),
        clusters: 1,
        cert_expires: None,
        transport: None,
        via: None,
    }
}

/// A relay's report of `node`'s link.
pub(crate) fn link_report(node: &str, record: LinkRecord) -> Report {
    Report {
        key: ReportKey::Link { node: node.into() },
        value: ReportValue::Link(record),
    }
}
