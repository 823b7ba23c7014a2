//! Whether a cluster is reachable from a node, and when it was last seen: read from the
//! links on its path ([`last_seen`]) wherever links are kept (a node's own, stored
//! records, the tier counts), below both the core and the reports.

use std::collections::BTreeMap;

use strata_protocol::model::Cluster;
use strata_protocol::time::UnixMillis;
use strata_protocol::wire::LinkRecord;

/// Whether a link is up, and since when: the part of a [`LinkRecord`] that
/// [`last_seen`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reach {
    /// The link is up.
    pub connected: bool,
    /// Since when it has been up or down.
    pub since: UnixMillis,
}

/// Where [`last_seen`] finds a link's [`Reach`] by its child end.
pub trait LinkLookup {
    /// The link whose child end is `end`, if known.
    fn reach(&self, end: &str) -> Option<Reach>;
}

impl LinkLookup for BTreeMap<String, LinkRecord> {
    fn reach(&self, end: &str) -> Option<Reach> {
        self.get(end).map(|l| Reach {
            connected: l.connected,
            since: l.since,
        })
    }
}

impl LinkLookup for BTreeMap<&str, Reach> {
    fn reach(&self, end: &str) -> Option<Reach> {
        self.get(end).copied()
    }
}

/// Why a cluster is unreachable although every link to it may be up: its agent
/// reported that it cannot reach the cluster's API server.
pub fn backend_reason(cluster: &Cluster) -> Option<String> {
    cluster
        .backend_unreachable()
        .map(|(why, _)| format!("its agent cannot reach the cluster's API server: {why}"))
}

/// Whether a cluster is reachable from this node, and when it was last seen: now when
/// every link on its path is up and its agent reaches the cluster's API server, else
/// when the first link on its path went down or the agent lost its API server
/// ([`Cluster::backend_unreachable`]), whichever came first.
pub fn last_seen(
    cluster: &Cluster,
    links: &impl LinkLookup,
    now: UnixMillis,
) -> (bool, Option<u64>) {
    // The cluster's path starts with this node; the links are named by their child end.
    let ends = cluster
        .path
        .iter()
        .skip(1)
        .chain(std::iter::once(&cluster.name));
    let mut seen = Some(now.0);
    let mut reachable = true;
    if let Some((_, since)) = cluster.backend_unreachable() {
        reachable = false;
        seen = Some(since.map_or(now.0, |s| s.0.min(now.0)));
    }
    for end in ends {
        match links.reach(end) {
            Some(l) if l.connected => {}
            Some(l) => {
                reachable = false;
                seen = Some(seen.map_or(l.since.0, |s| s.min(l.since.0)));
            }
            None => {
                // A link nobody reported (an older relay below): unknown.
                reachable = false;
                seen = None;
                break;
            }
        }
    }
    (reachable, seen)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::tier::testing::cluster;
    use strata_protocol::wire::Role;

    fn link(path: &[&str], connected: bool, since: u64) -> LinkRecord {
        crate::tier::testing::link(Role::Relay, path, connected, since)
    }

    #[test]
    fn a_cluster_behind_a_down_relay_was_last_seen_when_that_link_went_down() {
        let mut links = BTreeMap::new();
        links.insert("eu".to_owned(), link(&["root"], false, 1_000));
        links.insert("site".to_owned(), link(&["root", "eu"], true, 500));
        links.insert("c1".to_owned(), link(&["root", "eu", "site"], true, 600));
        let c = cluster("c1", &["root", "eu", "site"]);
        assert_eq!(
            last_seen(&c, &links, UnixMillis(9_000)),
            (false, Some(1_000))
        );
        links.insert("eu".to_owned(), link(&["root"], true, 2_000));
        assert_eq!(
            last_seen(&c, &links, UnixMillis(9_000)),
            (true, Some(9_000))
        );
        links.insert("c1".to_owned(), link(&["root", "eu", "site"], false, 7_000));
        assert_eq!(
            last_seen(&c, &links, UnixMillis(9_000)),
            (false, Some(7_000))
        );
        links.remove("site");
        assert_eq!(last_seen(&c, &links, UnixMillis(9_000)), (false, None));
    }

    #[test]
    fn a_cluster_whose_agent_lost_its_api_server_is_unreachable_since_then() {
        let mut links = BTreeMap::new();
        links.insert("c1".to_owned(), link(&["root"], true, 500));
        let mut c = cluster("c1", &["root"]);
        assert_eq!(
            last_seen(&c, &links, UnixMillis(9_000)),
            (true, Some(9_000))
        );
        assert!(c.set_backend_unreachable(Some(("connection refused", UnixMillis(4_000)))));
        assert_eq!(
            last_seen(&c, &links, UnixMillis(9_000)),
            (false, Some(4_000))
        );
        // The link going down earlier still counts first.
        links.insert("c1".to_owned(), link(&["root"], false, 3_000));
        assert_eq!(
            last_seen(&c, &links, UnixMillis(9_000)),
            (false, Some(3_000))
        );
        links.insert("c1".to_owned(), link(&["root"], true, 5_000));
        assert!(c.set_backend_unreachable(None));
        assert_eq!(
            last_seen(&c, &links, UnixMillis(9_000)),
            (true, Some(9_000))
        );
    }
}
