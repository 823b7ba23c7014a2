//! Replicated children: several sessions of one node, its replicas (keyed
//! `name#replica`, see [`super::session_key`]), each with its own store, report the same
//! subtree. A child of the replicated tier is connected to one replica at a time; when
//! it moves, what the replica it left reported about it is dropped here, so that it is
//! counted once whichever replica it went through.
//!
//! The *hop* of a report is the replicated node's child it is about: the cluster or
//! link record's first node below the replicated node. The replica whose link to a hop
//! is up owns what is reported about that hop; a replica whose link is down (it
//! restarted and reports what it kept) cannot take a hop back from one whose link is up.

use strata_protocol::time::Instant;
use strata_protocol::wire::{Report, ReportKey, ReportValue};

use super::NodeCore;
use super::children::sibling_replicas;
use strata_node::store::ReportSlot;

/// The hop of a path as stored here: `[this node, replicated node, hop, …]`, or
/// `[this node, replicated node]` when the record is about the hop itself.
fn hop_of_stored_path(path: &[String], own: &str) -> String {
    path.get(2).cloned().unwrap_or_else(|| own.to_owned())
}

impl NodeCore {
    /// The hop of a report as it arrived from session `key` (paths not yet prefixed
    /// with this node): `[replicated node, hop, …]`, or `[replicated node]` for the hop
    /// itself. Statuses and upsynced objects take their cluster's hop.
    fn arriving_hop(&self, key: &str, report: &Report) -> Option<String> {
        match (&report.key, &report.value) {
            (ReportKey::Cluster { name }, ReportValue::Cluster(c)) => {
                Some(c.path.get(1).cloned().unwrap_or_else(|| name.clone()))
            }
            (ReportKey::Link { node }, ReportValue::Link(l)) => {
                Some(l.path.get(1).cloned().unwrap_or_else(|| node.clone()))
            }
            (ReportKey::Status { cluster, .. } | ReportKey::Upsynced { cluster, .. }, _) => self
                .stored_hop(&(
                    key.to_owned(),
                    ReportKey::Cluster {
                        name: cluster.clone(),
                    },
                )),
            _ => None,
        }
    }

    /// The hop of a stored report.
    fn stored_hop(&self, slot: &ReportSlot) -> Option<String> {
        let (from, key) = slot;
        match (key, self.reports.get(slot)?) {
            (ReportKey::Cluster { name }, ReportValue::Cluster(c)) => {
                Some(hop_of_stored_path(&c.path, name))
            }
            (ReportKey::Link { node }, ReportValue::Link(l)) => {
                Some(hop_of_stored_path(&l.path, node))
            }
            (ReportKey::Status { cluster, .. } | ReportKey::Upsynced { cluster, .. }, _) => self
                .stored_hop(&(
                    from.clone(),
                    ReportKey::Cluster {
                        name: cluster.clone(),
                    },
                )),
            _ => None,
        }
    }

    /// Whether session `key`'s link to `hop` is up, as it last reported.
    fn link_up_via(&self, key: &str, hop: &str) -> bool {
        matches!(
            self.reports.get(&(key.to_owned(), ReportKey::Link { node: hop.to_owned() })),
            Some(ReportValue::Link(l)) if l.connected
        )
    }

    /// Takes a report of one replica of a replicated child: `false` when it must be
    /// ignored (another replica's link to its hop is up and this one's is not);
    /// otherwise drops what the other replicas reported about the same hop when this
    /// report says the hop is now here (its link came up, or its cluster reported).
    pub(super) fn replica_report(&mut self, now: Instant, key: &str, report: &Report) -> bool {
        if super::node_of(key) == key {
            return true;
        }
        let siblings: Vec<String> = self
            .children
            .keys()
            .chain(self.child_runs.keys())
            .filter(|k| sibling_replicas(k, key))
            .cloned()
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        if siblings.is_empty() {
            return true;
        }
        let Some(hop) = self.arriving_hop(key, report) else {
            return true;
        };
        let arriving_up = matches!(&report.value, ReportValue::Link(l) if l.connected)
            && matches!(&report.key, ReportKey::Link { node } if *node == hop);
        let here = arriving_up || self.link_up_via(key, &hop);
        if !here && siblings.iter().any(|s| self.link_up_via(s, &hop)) {
            // This replica has not said anything of its link to the hop yet: its link
            // record may follow in the same batch (clusters sort before links) or the
            // next. Keep the report until it does, rather than lose it: a replica
            // re-sends a report only when it changes.
            let own_link = (key.to_owned(), ReportKey::Link { node: hop.clone() });
            if self.reports.get(&own_link).is_none() {
                let held = self.deferred.entry((key.to_owned(), hop)).or_default();
                held.retain(|r| r.key != report.key);
                held.push(report.clone());
            }
            return false;
        }
        if arriving_up && let Some(held) = self.deferred.remove(&(key.to_owned(), hop.clone())) {
            self.replay.extend(held);
        }
        if !here && !matches!(report.value, ReportValue::Cluster(_)) {
            return true;
        }
        let moved: Vec<ReportSlot> = self
            .reports
            .iter()
            .map(|(slot, _)| slot)
            .filter(|(from, _)| siblings.contains(from))
            .filter(|slot| self.stored_hop(slot).as_deref() == Some(hop.as_str()))
            .cloned()
            .collect();
        let mut clusters_of = std::collections::BTreeSet::new();
        for slot in moved {
            self.stale.remove(&slot);
            if self.reports.remove(&slot) {
                if matches!(slot.1, ReportKey::Cluster { .. }) {
                    clusters_of.insert(slot.0.clone());
                }
                self.forget_report(now, slot);
            }
        }
        for sibling in clusters_of {
            tracing::info!(child = %sibling, %hop, to = key, "a child of a replicated tier moved to another replica");
            self.replan = true;
            self.refresh_route(&sibling);
            self.link_clusters_changed(&sibling);
            self.dirty.extend(self.log.live().map(|o| o.key().clone()));
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use strata_protocol::wire::{ErrorCode, ParentToChild, REPLICA_VERSION};

    use super::*;
    use crate::tier::core::testing::{cluster, hello, link, report, root, turn};

    /// A root with replicas `a` (connection 1) and `b` (connection 2) of `eu` connected.
    fn two_replicas() -> (NodeCore, Instant) {
        let mut core = root();
        let now = Instant::ZERO;
        core.child_connected(now, "eu", 1).unwrap();
        core.child_message(now, "eu", 1, hello(10, Some("a")));
        core.child_connected(now, "eu", 2).unwrap();
        core.child_message(now, "eu", 2, hello(20, Some("b")));
        (core, now)
    }

    /// The sessions that reported cluster `name`.
    fn holders(core: &NodeCore, name: &str) -> Vec<String> {
        core.reports()
            .iter()
            .filter(|((_, k), _)| *k == ReportKey::Cluster { name: name.into() })
            .map(|((from, _), _)| from.clone())
            .collect()
    }

    #[test]
    fn two_replicas_of_one_node_keep_their_own_sessions() {
        let (mut core, now) = two_replicas();
        assert!(
            turn(&mut core, now).is_empty(),
            "no replica replaced the other"
        );
        let keys: Vec<&str> = core.children().map(|(k, _)| k).collect();
        assert_eq!(keys, ["eu#a", "eu#b"]);
        // Both were welcomed, on their own connections.
        // A new connection of replica a replaces only replica a's session.
        core.child_connected(now, "eu", 3).unwrap();
        core.child_message(now, "eu", 3, hello(11, Some("a")));
        let closed = turn(&mut core, now);
        assert_eq!(closed, [("eu".to_owned(), 1, ErrorCode::Replaced)]);
        let keys: Vec<&str> = core.children().map(|(k, _)| k).collect();
        assert_eq!(keys, ["eu#a", "eu#b"]);
    }

    #[test]
    fn an_unreplicated_child_is_still_replaced_by_its_newer_connection() {
        let mut core = root();
        let now = Instant::ZERO;
        core.child_connected(now, "eu", 1).unwrap();
        core.child_message(now, "eu", 1, hello(10, None));
        let _ = turn(&mut core, now);
        core.child_connected(now, "eu", 2).unwrap();
        core.child_message(now, "eu", 2, hello(11, None));
        let closed = turn(&mut core, now);
        assert_eq!(closed, [("eu".to_owned(), 1, ErrorCode::Replaced)]);
        let keys: Vec<&str> = core.children().map(|(k, _)| k).collect();
        assert_eq!(keys, ["eu"]);
    }

    #[test]
    fn a_replica_hello_is_welcomed_at_version_three() {
        let mut core = root();
        let now = Instant::ZERO;
        core.child_connected(now, "eu", 1).unwrap();
        core.child_message(now, "eu", 1, hello(10, Some("a")));
        let _ = core.process(now);
        let out = core.transmit(now);
        let welcome = out.to_children.iter().find_map(|(n, c, m)| match m {
            ParentToChild::Welcome(w) if n == "eu" && *c == 1 => Some(w.version),
            _ => None,
        });
        // The newest version, which has replica hellos.
        assert_eq!(welcome, Some(strata_protocol::wire::MAX_PROTOCOL_VERSION));
        const { assert!(strata_protocol::wire::MAX_PROTOCOL_VERSION >= REPLICA_VERSION) };
    }

    #[test]
    fn a_child_that_moves_to_another_replica_is_counted_once() {
        let (mut core, now) = two_replicas();
        let _ = turn(&mut core, now);
        // Agent c1 is with replica a; c2 with b.
        report(
            &mut core,
            now,
            1,
            0,
            vec![link("c1", true, 1), cluster("c1")],
        );
        report(
            &mut core,
            now,
            2,
            0,
            vec![link("c2", true, 1), cluster("c2")],
        );
        let _ = turn(&mut core, now);
        assert_eq!(holders(&core, "c1"), ["eu#a"]);
        assert_eq!(holders(&core, "c2"), ["eu#b"]);
        // c1 moves to b (a's link to it is down): a's reports of it go.
        report(
            &mut core,
            now,
            2,
            1,
            vec![link("c1", true, 5), cluster("c1")],
        );
        let _ = turn(&mut core, now);
        assert_eq!(holders(&core, "c1"), ["eu#b"]);
        assert_eq!(core.reports().clusters().count(), 2, "each cluster once");
        // Replica a, restarted, reports what it kept: c1 with its link down. b's link
        // to c1 is up, so a cannot take it back.
        report(
            &mut core,
            now,
            1,
            1,
            vec![link("c1", false, 6), cluster("c1")],
        );
        let _ = turn(&mut core, now);
        assert_eq!(holders(&core, "c1"), ["eu#b"]);
        assert_eq!(core.reports().clusters().count(), 2);
    }

    /// A replica sends in key order, a cluster's record before the link record that
    /// says the cluster is now below it; the record must not be lost because the
    /// other replica (dead, not yet noticed) last said its link was up.
    #[test]
    fn a_moved_childs_record_before_its_link_record_is_kept() {
        for split in [false, true] {
            let (mut core, now) = two_replicas();
            let _ = turn(&mut core, now);
            report(
                &mut core,
                now,
                1,
                0,
                vec![cluster("c1"), link("c1", true, 1)],
            );
            let _ = turn(&mut core, now);
            assert_eq!(holders(&core, "c1"), ["eu#a"]);
            // Replica a dies without a word; c1 moves to b, which reports it in key
            // order: in one batch, or the cluster in one and the link in the next.
            if split {
                report(&mut core, now, 2, 0, vec![cluster("c1")]);
                let _ = turn(&mut core, now);
                assert_eq!(holders(&core, "c1"), ["eu#a"], "not taken before b's link");
                report(&mut core, now, 2, 1, vec![link("c1", true, 5)]);
            } else {
                report(
                    &mut core,
                    now,
                    2,
                    0,
                    vec![cluster("c1"), link("c1", true, 5)],
                );
            }
            let _ = turn(&mut core, now);
            assert_eq!(holders(&core, "c1"), ["eu#b"], "split batches: {split}");
            assert_eq!(core.reports().clusters().count(), 1, "counted once");
        }
    }

    #[test]
    fn replica_ids_are_checked() {
        let mut core = root();
        let now = Instant::ZERO;
        core.child_connected(now, "eu", 1).unwrap();
        core.child_message(now, "eu", 1, hello(10, Some("Not#Valid")));
        let closed = turn(&mut core, now);
        assert_eq!(closed, [("eu".to_owned(), 1, ErrorCode::ProtocolViolation)]);
    }
}
