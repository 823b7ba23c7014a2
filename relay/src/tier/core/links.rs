//! The links to this node's children as it sees them (up or down since when, last heard,
//! lag), reported upward so that the root can show the whole tier tree, and kept here
//! for this node's own status page.

use std::collections::BTreeMap;
use std::time::Duration;

use strata_protocol::time::{Instant, UnixMillis};
use strata_protocol::wire::{
    LinkPath, LinkRecord, LinkTransport, Report, ReportKey, ReportValue, Role,
};

use super::NodeCore;
use crate::tier::reach::Reach;

/// How often a relay child's link record (heartbeat, lag) is refreshed upward while it
/// is up. Agents' records change only when they connect or go, so that a tier of
/// thousands of leaves sends nothing while nothing happens.
pub const LINK_REFRESH: Duration = Duration::from_secs(5);

/// One child's link, as this node sees it.
#[derive(Debug, Clone)]
pub(super) struct LinkState {
    role: Role,
    connected: bool,
    since: Instant,
    last_heard: Instant,
    /// When the record last went upward.
    last_pushed: Option<Instant>,
    /// Whether the record that went upward knew the child's lag.
    pushed_lag: bool,
}

impl LinkState {
    fn relay_up(&self) -> bool {
        self.connected && self.role == Role::Relay
    }
}

impl NodeCore {
    /// The wall-clock time of `now`, for stamps that cross nodes.
    pub fn wall(&self, now: Instant) -> UnixMillis {
        let ms = u64::try_from(now.since_origin().as_millis()).unwrap_or(u64::MAX);
        UnixMillis(self.wall_origin.0.saturating_add(ms))
    }

    /// The wall-clock time of the latest instant the driver gave the core.
    pub fn wall_now(&self) -> UnixMillis {
        self.wall(self.last_now)
    }

    /// A child's connection is up (its role is known from its hello).
    pub(super) fn link_up(&mut self, now: Instant, child: &str, role: Role) {
        self.replan = true;
        let link = LinkState {
            role,
            connected: true,
            since: now,
            last_heard: now,
            last_pushed: None,
            pushed_lag: false,
        };
        self.relay_links_up += usize::from(link.relay_up());
        // A new session says its path afresh (or, from an older child, never).
        self.vias.remove(child);
        if let Some(old) = self.links.insert(child.to_owned(), link) {
            self.relay_links_up -= usize::from(old.relay_up());
        }
        self.push_link(now, child);
    }

    /// How a child's session said its connection reached this node
    /// ([`ChildToParent::LinkPath`](strata_protocol::wire::ChildToParent::LinkPath)):
    /// its link record says it from now on.
    pub(super) fn link_via(&mut self, now: Instant, child: &str, via: LinkPath) {
        if self.links.contains_key(child) && self.vias.insert(child.to_owned(), via) != Some(via) {
            self.push_link(now, child);
        }
    }

    /// What a child's connection runs on, as its link record will say.
    pub fn child_transport(&mut self, child: &str, transport: LinkTransport) {
        self.transports.insert(child.to_owned(), transport);
    }

    /// When a child's certificate expires (`None`: not known).
    pub fn child_certificate(&mut self, child: &str, expires: Option<UnixMillis>) {
        match expires {
            Some(t) => self.cert_expires.insert(child.to_owned(), t),
            None => self.cert_expires.remove(child),
        };
    }

    /// Heard from a child.
    pub(super) fn link_heard(&mut self, now: Instant, child: &str) {
        if let Some(l) = self.links.get_mut(child) {
            l.last_heard = now;
        }
    }

    /// A child acknowledged a position: its first acknowledgement makes its lag known
    /// above.
    pub(super) fn link_acked(&mut self, now: Instant, child: &str) {
        if self.links.get(child).is_some_and(|l| !l.pushed_lag) {
            self.push_link(now, child);
        }
    }

    /// The clusters below a relay child changed: the count above follows at the next
    /// processing, once however many cluster reports arrived (counting is a scan).
    pub(super) fn link_clusters_changed(&mut self, child: &str) {
        if self.links.get(child).is_some_and(|l| l.role == Role::Relay) {
            self.links_changed.insert(child.to_owned());
        }
    }

    /// Pushes the records whose cluster counts changed.
    pub(super) fn push_changed_links(&mut self, now: Instant) {
        for child in std::mem::take(&mut self.links_changed) {
            self.push_link(now, &child);
        }
    }

    /// A child's session ended.
    pub(super) fn link_down(&mut self, now: Instant, child: &str) {
        self.replan = true;
        if let Some(l) = self.links.get_mut(child).filter(|l| l.connected) {
            self.relay_links_up -= usize::from(l.relay_up());
            l.connected = false;
            l.since = now;
            self.push_link(now, child);
        }
    }

    /// Refreshes the records of relay children that are up, every [`LINK_REFRESH`]: all
    /// of them once one is due, so that they leave in one batch. Each child due on its
    /// own sent its own packet upward (and drew an ACK back): ten children's refreshes
    /// were two packets a second on a region's link, as many as its summaries.
    pub(super) fn refresh_links(&mut self, now: Instant) {
        self.refresh_links_older_than(now, LINK_REFRESH);
    }

    /// New entries from the parent are acknowledged with the next transmit: the
    /// records of relay children half due or more ride in the ack's packet. A refresh
    /// on its own clock during an update was a packet of its own, and a QUIC ACK back
    /// from the parent, in about a third of the updates at a region (its window is
    /// under 2 s, the refresh every 5 s): a quarter of the root's bytes beyond the
    /// object and the ACKs an update must cost. After this none is due within half a
    /// refresh of an update's start.
    pub(super) fn refresh_links_with_ack(&mut self, now: Instant) {
        self.refresh_links_older_than(now, LINK_REFRESH / 2);
    }

    fn refresh_links_older_than(&mut self, now: Instant, age: Duration) {
        if self.relay_links_up == 0 {
            // A site relay's links are its agents': none is refreshed, none walked.
            return;
        }
        let up = |l: &&LinkState| l.connected && l.role == Role::Relay;
        let any_due = self
            .links
            .values()
            .filter(up)
            .any(|l| l.last_pushed.is_none_or(|t| now >= t + age));
        if !any_due {
            return;
        }
        let all: Vec<String> = self
            .links
            .iter()
            .filter(|(_, l)| up(l))
            .map(|(n, _)| n.clone())
            .collect();
        for child in all {
            self.push_link(now, &child);
        }
    }

    /// Whether a relay child is connected (its link is refreshed periodically).
    pub(super) fn has_relay_child_up(&self) -> bool {
        self.relay_links_up > 0
    }

    /// Every child link this node knows of, as records (path `[this node]`).
    pub fn links(&self) -> Vec<(String, LinkRecord)> {
        self.links
            .keys()
            .filter_map(|n| self.link_record(n).map(|r| (n.clone(), r)))
            .collect()
    }

    fn link_record(&self, child: &str) -> Option<LinkRecord> {
        let mut r = self.link_record_uncounted(child)?;
        if r.role == Role::Relay {
            r.clusters = self.reports.cluster_count_below(child) as u64;
        }
        Some(r)
    }

    /// A child's link record without counting the clusters below a relay child (a
    /// walk of its inventory): 1 for an agent, 0 for a relay.
    fn link_record_uncounted(&self, child: &str) -> Option<LinkRecord> {
        let l = self.links.get(child)?;
        let head = self.log.head().0;
        let acked = self
            .children
            .get(child)
            .and_then(|c| c.session.acked())
            .or_else(|| self.acked.get(child).copied())
            .filter(|c| c.log == self.log.id());
        Some(LinkRecord {
            path: vec![self.name.clone()],
            role: l.role,
            connected: l.connected,
            since: self.wall(l.since),
            last_heard: self.wall(l.last_heard),
            lag: acked.map(|c| head.saturating_sub(c.position.0)),
            clusters: u64::from(l.role == Role::Agent),
            cert_expires: self.cert_expires.get(child).copied(),
            transport: l
                .connected
                .then(|| self.transports.get(child).copied())
                .flatten(),
            via: l.connected.then(|| self.vias.get(child).copied()).flatten(),
        })
    }

    fn push_link(&mut self, now: Instant, child: &str) {
        let Some(record) = self.link_record(child) else {
            return;
        };
        if let Some(l) = self.links.get_mut(child) {
            l.last_pushed = Some(now);
            l.pushed_lag = record.lag.is_some();
        }
        self.links_changed.remove(child);
        if let Some(link) = &mut self.parent {
            link.push_report(
                now,
                Report {
                    key: ReportKey::Link {
                        node: child.to_owned(),
                    },
                    value: ReportValue::Link(record),
                },
            );
        }
    }

    /// Pushes every own child link upward (after a reconnection to the parent).
    pub(super) fn push_all_links(&mut self, now: Instant) {
        let names: Vec<String> = self.links.keys().cloned().collect();
        for child in names {
            self.push_link(now, &child);
        }
    }

    /// The web view's counts per relay subtree, with this node's own links as they are
    /// now; kept as reports arrive, so this costs the changes since the last call, not
    /// a pass over every cluster. The own links' records carry no cluster count of a
    /// relay child here: the counts are the tally's.
    pub fn tier_counts(&mut self) -> &crate::tier::reports::TierCounts {
        let own = self
            .links
            .keys()
            .filter_map(|n| self.link_record_uncounted(n).map(|r| (n.clone(), r)))
            .collect();
        self.reports.tier_counts(own)
    }

    /// Every link the node knows of, by its child end: its own children's, then those its
    /// children reported (a child's own record of a link wins over nothing; the node's own
    /// view of its direct children wins over anything reported).
    pub fn all_links(&self) -> BTreeMap<String, LinkRecord> {
        let mut links: BTreeMap<String, LinkRecord> = self
            .reports()
            .iter()
            .filter_map(|((_, key), value)| match (key, value) {
                (ReportKey::Link { node }, ReportValue::Link(l)) => Some((node.clone(), l.clone())),
                _ => None,
            })
            .collect();
        links.extend(self.links());
        links
    }

    /// Whether each link is up and since when, by its child end, as [`NodeCore::all_links`]
    /// says but borrowed rather than copied: what planning asks of every cluster's path
    /// at the root, where copying 10,000 link records at every plan was a third of it.
    pub fn reachability(&self) -> BTreeMap<&str, Reach> {
        let mut reach: BTreeMap<&str, Reach> = self
            .reports()
            .iter()
            .filter_map(|((_, key), value)| match (key, value) {
                (ReportKey::Link { node }, ReportValue::Link(l)) => Some((
                    node.as_str(),
                    Reach {
                        connected: l.connected,
                        since: l.since,
                    },
                )),
                _ => None,
            })
            .collect();
        reach.extend(self.links.iter().map(|(name, l)| {
            (
                name.as_str(),
                Reach {
                    connected: l.connected,
                    since: self.wall(l.since),
                },
            )
        }));
        reach
    }
}
