//! Admitting a child's connection: refused (unknown, revoked) or handed to the core;
//! held, open and unanswered, while this relay catches up with its parent after a
//! start or a reconnect (see `core/revoke.rs`), and released once it has.

use strata_node::link::Link;
use strata_node::transport::{Sender, close_code};
use strata_protocol::time::{Instant, UnixMillis};
use strata_protocol::wire::{ChildToParent, ErrorCode, LinkTransport, ParentToChild};

use super::Relay;

/// A child's connection that arrived while admissions were held, and what it sent
/// meanwhile (handed to the core, in order, once it is admitted).
pub(super) struct HeldChild {
    name: String,
    pub(super) conn: Link,
    sender: Sender<ParentToChild>,
    messages: Vec<ChildToParent>,
}

/// How many messages a held connection may send before being admitted: a child sends
/// its hello and waits for the welcome, so a few suffice.
const HELD_MESSAGES: usize = 64;

impl Relay {
    /// A child's connection is up: held while this node catches up with its parent,
    /// else admitted or refused.
    pub(super) fn child_up_or_hold(
        &mut self,
        now: Instant,
        name: String,
        conn_id: u64,
        conn: Link,
        sender: Sender<ParentToChild>,
    ) {
        if let Some(until) = self.core.admission_held(now) {
            tracing::info!(child = %name, at_most = ?(until - now), "holding a child's connection until this relay has caught up with its parent");
            self.held.insert(
                conn_id,
                HeldChild {
                    name,
                    conn,
                    sender,
                    messages: Vec::new(),
                },
            );
        } else {
            self.child_up(now, name, conn_id, conn, sender);
        }
    }

    /// A message from a held connection, kept until it is admitted.
    pub(super) fn held_message(&mut self, conn_id: u64, msg: ChildToParent) {
        let Some(held) = self.held.get_mut(&conn_id) else {
            return;
        };
        held.messages.push(msg);
        if held.messages.len() > HELD_MESSAGES
            && let Some(held) = self.held.remove(&conn_id)
        {
            tracing::warn!(child = %held.name, "closing a held connection that sent too much before its welcome");
            held.conn.close(
                close_code::PROTOCOL,
                b"too many messages before the welcome",
            );
        }
    }

    /// Admits a child's connection (its certificate names `name`), or refuses it.
    pub(super) fn child_up(
        &mut self,
        now: Instant,
        name: String,
        conn_id: u64,
        conn: Link,
        sender: Sender<ParentToChild>,
    ) {
        let core = &mut self.core;
        match core.child_connected(now, &name, conn_id) {
            Ok(()) => {
                let expires = conn
                    .peer_chain()
                    .and_then(|chain| strata_topology::certs::not_after(chain.first()?))
                    .map(|s| UnixMillis(u64::try_from(s).unwrap_or(0).saturating_mul(1000)));
                core.child_certificate(&name, expires);
                core.child_transport(
                    &name,
                    match conn.kind() {
                        strata_node::link::TransportKind::Quic => LinkTransport::Quic,
                        strata_node::link::TransportKind::Tcp => LinkTransport::Tcp,
                    },
                );
                tracing::info!(child = %name, remote = %conn.remote_address(), transport = %conn.kind(), "child connected");
                self.children.insert((name, conn_id), (conn, sender));
            }
            Err(e) => {
                tracing::warn!(child = %name, reason = %e.reason, "refusing a connection");
                let code = if e.code == ErrorCode::Revoked {
                    close_code::REVOKED
                } else {
                    close_code::UNKNOWN_CHILD
                };
                conn.close(code, e.reason.as_bytes());
            }
        }
    }

    /// A message from an admitted child's connection.
    pub(super) fn child_message(
        &mut self,
        now: Instant,
        name: String,
        conn_id: u64,
        msg: ChildToParent,
    ) {
        let core = &mut self.core;
        match msg {
            ChildToParent::Renew { csr_pem } => {
                // Answered here, with the name the connection is authenticated as.
                let reply = if core.is_revoked(&name) {
                    crate::renew::refuse(core.name(), &name, &"the name was revoked at the root")
                } else {
                    match &self.signer {
                        Some(signer) => {
                            // Valid from the node's wall clock (the simulation's virtual time).
                            let wall = i64::try_from(core.wall(now).0 / 1000).unwrap_or(i64::MAX);
                            signer.answer(&name, &csr_pem, wall)
                        }
                        None => crate::renew::no_signer(core.name(), &name),
                    }
                };
                if let Some((_, sender)) = self.children.get(&(name, conn_id)) {
                    let _ = sender.send(ParentToChild::Renewal(reply));
                }
            }
            msg => core.child_message(now, &name, conn_id, msg),
        }
    }

    /// Admits (or refuses) the connections held while this node caught up with its
    /// parent, once it has or the hold has run out, with what they sent meanwhile.
    pub(super) fn release_held(&mut self, now: Instant) {
        if self.held.is_empty() || self.core.admission_held(now).is_some() {
            return;
        }
        for (conn_id, held) in std::mem::take(&mut self.held) {
            let HeldChild {
                name,
                conn,
                sender,
                messages,
            } = held;
            self.child_up(now, name.clone(), conn_id, conn, sender);
            if self.children.contains_key(&(name.clone(), conn_id)) {
                for msg in messages {
                    self.child_message(now, name.clone(), conn_id, msg);
                }
            }
        }
    }
}
