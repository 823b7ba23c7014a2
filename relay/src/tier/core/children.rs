//! The children's side of a node: which children may connect, one [`ChildSession`] per
//! connected child, what their sessions' events mean here (runs, acks, reports), and
//! the route each child is sent by.

use std::sync::Arc;
use std::time::Duration;

use strata_protocol::route::PlacementRoute;
use strata_protocol::sync::{ChildSession, SessionError, SessionEvent, SharedRoute};
use strata_protocol::time::Instant;
use strata_protocol::wire::{ChildToParent, ErrorCode, ReportKey, Role};

use super::NodeCore;

/// One connected child.
#[derive(Debug)]
pub(super) struct Child {
    /// The node name its certificate states (a replicated child's replicas share it).
    pub(super) name: String,
    pub(super) conn: u64,
    /// Boxed: the maps of children hold a node's worth of slots each, most of them
    /// empty, and a session inline made every slot its size (the children's map was
    /// about 1.2 KiB per idle child in issue 49's heap profile).
    pub(super) session: Box<ChildSession>,
    /// A relay (from its hello): its route names the clusters below it.
    pub(super) relay: bool,
}

/// How long a child's downsync waits for its first reports when nothing is known here
/// of the clusters below it (see [`ChildSession::hold_downsync`]).
const ROUTE_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

use crate::tier::session_key::REPLICA_SEPARATOR;
pub use crate::tier::session_key::{node_of, session_key};

/// Whether two distinct session keys are replicas of one node.
pub(super) fn sibling_replicas(a: &str, b: &str) -> bool {
    a != b
        && node_of(a) == node_of(b)
        && (a.contains(REPLICA_SEPARATOR) || b.contains(REPLICA_SEPARATOR))
}

impl NodeCore {
    /// Whether `name` may connect as a child (configured, or admitted by join token).
    pub fn is_allowed_child(&self, name: &str) -> bool {
        self.allowed.contains(name)
    }

    /// Allows `name` to connect as a child from now on: an agent admitted by join token
    /// (the runtime records it durably first).
    pub fn admit_child(&mut self, name: &str) {
        self.allowed.insert(name.to_owned());
    }

    /// A child's connection is up and its certificate names `name`. Its session is keyed
    /// once its hello says which replica it is (see [`session_key`]); then the newest
    /// connection of that key replaces its older session.
    pub fn child_connected(
        &mut self,
        now: Instant,
        name: &str,
        conn: u64,
    ) -> Result<(), SessionError> {
        if self.revoked.contains(name) {
            return Err(super::revoke::refusal(name));
        }
        if !self.allowed.contains(name) {
            return Err(SessionError {
                code: ErrorCode::UnknownChild,
                reason: format!("{name:?} is not a child of {:?}", self.name),
            });
        }
        self.stats.children_connected += 1;
        let route = self.route_for(name, false);
        let session = Box::new(ChildSession::new(
            now,
            name.to_owned(),
            route,
            self.config.clone(),
        ));
        self.pending.insert(
            conn,
            Child {
                name: name.to_owned(),
                conn,
                session,
                relay: false,
            },
        );
        self.polling.touch(conn);
        Ok(())
    }

    /// A message from a child's connection.
    pub fn child_message(&mut self, now: Instant, name: &str, conn: u64, msg: ChildToParent) {
        self.polling.touch(conn);
        if let Some(child) = self.pending.remove(&conn) {
            // The first message keys the session: a replica's hello names its replica.
            let replica = match &msg {
                ChildToParent::ReplicaHello { replica, .. }
                    if strata_protocol::wire::valid_replica(replica) =>
                {
                    Some(replica.as_str())
                }
                _ => None,
            };
            let key = session_key(name, replica);
            if let Err(retry) = self.admission.admit(now, &key) {
                self.refuse_busy(child, retry);
                return;
            }
            self.conns.insert(conn, key.clone());
            if let Some(old) = self.children.insert(key.clone(), child) {
                self.conns.remove(&old.conn);
                self.polling.schedule(old.conn, None);
                self.outgoing.close_children.push((
                    old.name,
                    old.conn,
                    SessionError {
                        code: ErrorCode::Replaced,
                        reason: "a newer connection of this child took over".into(),
                    },
                ));
            }
        }
        let Some(key) = self.conns.get(&conn).cloned() else {
            return;
        };
        if let Some(child) = self.children.get_mut(&key).filter(|c| c.conn == conn) {
            child.session.handle_message(now, msg);
            self.link_heard(now, &key);
        }
    }

    /// Too many sessions are setting up: the child is told when to come back (its
    /// session stays with the connections not yet keyed, so that the refusal is sent),
    /// and its connection closes.
    fn refuse_busy(&mut self, mut child: Child, retry: Duration) {
        let error = SessionError {
            code: ErrorCode::Overloaded,
            reason: format!(
                "{} is setting up {} sessions already; come back in {} ms",
                self.name,
                self.admission.setting_up(),
                retry.as_millis()
            ),
        };
        tracing::debug!(child = %child.name, retry_ms = retry.as_millis(), "too many sessions setting up: refusing a hello");
        child.session.refuse(error.clone(), retry);
        self.outgoing
            .close_children
            .push((child.name.clone(), child.conn, error));
        self.pending.insert(child.conn, child);
    }

    /// A child's connection is gone.
    pub fn child_gone(&mut self, now: Instant, _name: &str, conn: u64) {
        self.polling.schedule(conn, None);
        if self.pending.remove(&conn).is_some() {
            return;
        }
        let Some(key) = self.conns.remove(&conn) else {
            return;
        };
        if self.children.get(&key).is_some_and(|c| c.conn == conn) {
            self.admission.gone(&key);
            self.children.remove(&key);
            self.deferred.retain(|(from, _), _| *from != key);
            self.link_down(now, &key);
        }
    }

    pub(super) fn drain_child_events(&mut self, now: Instant) {
        // Events come only from inputs: only touched sessions have any (see `polling.rs`).
        let names: Vec<String> = self
            .touched_sessions()
            .into_iter()
            .filter_map(|conn| self.conns.get(&conn).cloned())
            .collect();
        for name in names {
            while let Some(event) = self
                .children
                .get_mut(&name)
                .and_then(|c| c.session.poll_event())
            {
                self.on_child_event(now, &name, event);
            }
        }
    }

    fn on_child_event(&mut self, now: Instant, name: &str, event: SessionEvent) {
        // `name` is the session key; reports are checked against the node name.
        let node = node_of(name).to_owned();
        match event {
            SessionEvent::Opened { hello, version, .. } => {
                tracing::info!(child = name, version, "child session opened");
                self.admission.opened(now, name, self.log.head());
                let relay = hello.role == Role::Relay;
                if let Some(c) = self.children.get_mut(name) {
                    c.relay = relay;
                }
                self.link_up(now, name, hello.role);
                if self.child_runs.get(name) != Some(&hello.run) {
                    // A new run: what the child reported before stays (routes must not
                    // flap) until it says it has reported everything again.
                    self.child_runs.insert(name.to_owned(), hello.run);
                    self.batch.child_runs.push((name.to_owned(), hello.run));
                    self.stale.extend(self.reports.slots_of(name));
                    self.cluster_sweeps.remove(name);
                }
                self.refresh_route(name);
                // Nothing known here of the clusters below it (it moved here from
                // another replica of this tier, or is new): its route is about to
                // change with the reports it sends first, so wait for them (bounded)
                // before choosing between a delta and a snapshot.
                if self.reports.clusters_below_node(&node).is_empty()
                    && let Some(c) = self.children.get_mut(name)
                {
                    c.session.hold_downsync(now + ROUTE_WAIT);
                    self.polling.touch(c.conn);
                }
            }
            SessionEvent::Acked(cursor) => {
                if cursor.log == self.log.id() {
                    self.admission.acked(now, name, cursor.position);
                }
                let before = self.acked.insert(name.to_owned(), cursor);
                self.lag.acked(name, before, cursor, now);
                self.batch.child_acks.push((name.to_owned(), cursor));
                self.link_acked(now, name);
            }
            SessionEvent::LinkPath(via) => {
                tracing::info!(child = name, via = via.name(), "child link path");
                self.link_via(now, name, via);
            }
            SessionEvent::Reports(items) => {
                let relay = self.children.get(name).is_some_and(|c| c.relay);
                for report in items {
                    if let ReportKey::Complete { run } = report.key {
                        self.admission.complete(now, name);
                        if self.child_runs.get(name) == Some(&run) {
                            self.sweep(now, name);
                        }
                        if let Some(c) = self.children.get_mut(name) {
                            c.session.release_downsync();
                            self.polling.touch(c.conn);
                        }
                        continue;
                    }
                    if let Err(refusal) = self.reports.check(&node, relay, &report) {
                        self.stats.reports_refused += 1;
                        tracing::warn!(child = name, %refusal, "closing the session: report outside its subtree");
                        if let Some(c) = self.children.get_mut(name) {
                            self.outgoing.close_children.push((
                                c.name.clone(),
                                c.conn,
                                SessionError {
                                    code: ErrorCode::OutsideSubtree,
                                    reason: refusal.to_string(),
                                },
                            ));
                        }
                        return;
                    }
                    self.accept_report(now, name, relay, report);
                    // Reports a replica's link record released (see `replicas.rs`).
                    while let Some(held) = self.replay.pop() {
                        self.accept_report(now, name, relay, held);
                    }
                }
            }
            SessionEvent::Closed(error) => {
                self.admission.gone(name);
                tracing::info!(child = name, code = ?error.code, reason = %error.reason, "child session closed");
                if let Some(c) = self.children.get(name) {
                    self.outgoing
                        .close_children
                        .push((c.name.clone(), c.conn, error));
                }
            }
        }
    }

    /// The route of a child's session: the clusters below it, or for one replica of a
    /// replicated child the clusters below all its replicas, so that every replica
    /// holds what any child of the tier may ask it for.
    pub(super) fn route_for(&self, child: &str, relay: bool) -> SharedRoute {
        let clusters = self.reports.clusters_below_node(node_of(child));
        Arc::new(PlacementRoute::new(
            relay,
            &self.placements,
            &clusters,
            &self.root_view,
        ))
    }

    pub(super) fn refresh_route(&mut self, child: &str) {
        let relay = self.children.get(child).is_some_and(|c| c.relay);
        let route = self.route_for(child, relay);
        if let Some(c) = self.children.get_mut(child) {
            c.session.set_route(route, &self.log);
            self.polling.touch(c.conn);
        }
    }

    /// Every child's route again (placements changed, or the labels they see).
    pub(super) fn refresh_routes(&mut self) {
        let names: Vec<String> = self.children.keys().cloned().collect();
        for name in names {
            self.refresh_route(&name);
        }
    }
}
