//! The children's side of a node: which children may connect, one [`ChildSession`] per
//! connected child, what their sessions' events mean here (runs, acks, reports), and
//! the route each child is sent by.

use std::sync::Arc;

use strata_protocol::route::PlacementRoute;
use strata_protocol::sync::{ChildSession, SessionError, SessionEvent, SharedRoute};
use strata_protocol::time::Instant;
use strata_protocol::wire::{ChildToParent, ErrorCode, ReportKey, Role};

use super::NodeCore;

/// One connected child.
#[derive(Debug)]
pub(super) struct Child {
    pub(super) conn: u64,
    pub(super) session: ChildSession,
    /// A relay (from its hello): its route names the clusters below it.
    pub(super) relay: bool,
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

    /// A child's connection is up and its certificate names `name`. The newest
    /// connection of a child replaces its older session.
    pub fn child_connected(
        &mut self,
        now: Instant,
        name: &str,
        conn: u64,
    ) -> Result<(), SessionError> {
        if !self.allowed.contains(name) {
            return Err(SessionError {
                code: ErrorCode::UnknownChild,
                reason: format!("{name:?} is not a child of {:?}", self.name),
            });
        }
        let route = self.route_for(name, false);
        let session = ChildSession::new(now, name.to_owned(), route, self.config.clone());
        if let Some(old) = self.children.insert(
            name.to_owned(),
            Child {
                conn,
                session,
                relay: false,
            },
        ) {
            self.outgoing.close_children.push((
                name.to_owned(),
                old.conn,
                SessionError {
                    code: ErrorCode::Replaced,
                    reason: "a newer connection of this child took over".into(),
                },
            ));
        }
        Ok(())
    }

    /// A message from a child's connection.
    pub fn child_message(&mut self, now: Instant, name: &str, conn: u64, msg: ChildToParent) {
        if let Some(child) = self.children.get_mut(name).filter(|c| c.conn == conn) {
            child.session.handle_message(now, msg);
            self.link_heard(now, name);
        }
    }

    /// A child's connection is gone.
    pub fn child_gone(&mut self, now: Instant, name: &str, conn: u64) {
        if self.children.get(name).is_some_and(|c| c.conn == conn) {
            self.children.remove(name);
            self.link_down(now, name);
        }
    }

    pub(super) fn drain_child_events(&mut self, now: Instant) {
        let names: Vec<String> = self.children.keys().cloned().collect();
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
        match event {
            SessionEvent::Opened { hello, version } => {
                tracing::info!(child = name, version, "child session opened");
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
                }
                self.refresh_route(name);
            }
            SessionEvent::Acked(cursor) => {
                let before = self.acked.insert(name.to_owned(), cursor);
                self.lag.acked(name, before, cursor, now);
                self.batch.child_acks.push((name.to_owned(), cursor));
                self.link_acked(now, name);
            }
            SessionEvent::Reports(items) => {
                let relay = self.children.get(name).is_some_and(|c| c.relay);
                for report in items {
                    if let ReportKey::Complete { run } = report.key {
                        if self.child_runs.get(name) == Some(&run) {
                            self.sweep(now, name);
                        }
                        continue;
                    }
                    if let Err(refusal) = self.reports.check(name, relay, &report) {
                        self.stats.reports_refused += 1;
                        tracing::warn!(child = name, %refusal, "closing the session: report outside its subtree");
                        if let Some(c) = self.children.get_mut(name) {
                            self.outgoing.close_children.push((
                                name.to_owned(),
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
                }
            }
            SessionEvent::Closed(error) => {
                tracing::info!(child = name, code = ?error.code, reason = %error.reason, "child session closed");
                if let Some(c) = self.children.get(name) {
                    self.outgoing
                        .close_children
                        .push((name.to_owned(), c.conn, error));
                }
            }
        }
    }

    pub(super) fn route_for(&self, child: &str, relay: bool) -> SharedRoute {
        let clusters = self.reports.clusters_below(child);
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
