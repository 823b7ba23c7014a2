//! Revocation: `relay revoke NAME` writes a `Revocation` object (kind
//! [`REVOCATION_KIND`], named NAME, space `default`) into the root's log. Like the
//! root's cluster objects it travels to every relay (never to agents) and is durable in
//! every relay's replica of the log. A relay refuses a revoked name at its next
//! handshake ([`ErrorCode::Revoked`]) and closes its open session as soon as the
//! revocation reaches it: a relay that was cut off when the name was revoked learns it
//! with the delta its parent sends when the link returns.
//!
//! A relay that starts, or whose link to its parent comes back, holds new children's
//! connections (open, unanswered) until it has caught up with its parent, for at most
//! [`CoreSetup::admission_hold`](super::CoreSetup::admission_hold): a child revoked
//! while the relay was down or cut off is refused at its handshake, never admitted
//! first. A parent that cannot be reached within the hold is not waited for: the
//! subtree is served from what this node holds.

use strata_node::objects::Manifest;
use strata_protocol::model::{ObjectKey, ObjectKeyParts, ObjectMeta, Position, Revision, Space};
use strata_protocol::route::{REVOCATION_KIND, STRATA_GROUP};
use strata_protocol::sync::{LogError, SessionError};
use strata_protocol::time::Instant;
use strata_protocol::wire::{Change, ErrorCode};

use super::NodeCore;

/// The log key of the revocation of `name`.
pub fn revocation_key(name: &str) -> ObjectKey {
    ObjectKey::new(ObjectKeyParts {
        space: Space::default_space(),
        group: STRATA_GROUP.to_owned(),
        version: "v1alpha1".to_owned(),
        kind: REVOCATION_KIND.to_owned(),
        namespace: None,
        name: name.to_owned(),
    })
}

/// The refusal a revoked child is closed or refused with.
pub(super) fn refusal(name: &str) -> SessionError {
    SessionError {
        code: ErrorCode::Revoked,
        reason: format!("{name:?} was revoked at the root (relay revoke)"),
    }
}

impl NodeCore {
    /// Whether `name` was revoked at the root (as far as this node's log knows).
    pub fn is_revoked(&self, name: &str) -> bool {
        self.revoked.contains(name)
    }

    /// Until when new children's connections wait before being admitted (this node
    /// is catching up with its parent), if they do at `now`.
    pub fn admission_held(&self, now: Instant) -> Option<Instant> {
        self.hold_until.filter(|until| now < *until)
    }

    /// Whether a hold on admissions is set, due or not (the runtime releases the
    /// connections it held once [`NodeCore::admission_held`] says `None`).
    pub fn admission_hold_set(&self) -> Option<Instant> {
        self.hold_until
    }

    /// Starts holding new children until this node has caught up with its parent (a
    /// start, or a reconnect). Nothing at the root or with a zero hold.
    pub(super) fn hold_admissions(&mut self, now: Instant) {
        if self.parent.is_some() && !self.admission_hold.is_zero() {
            self.hold_until = Some(now + self.admission_hold);
        }
    }

    /// The names revoked at the root, in order.
    pub fn revoked(&self) -> impl Iterator<Item = &str> {
        self.revoked.iter().map(String::as_str)
    }

    /// At the root: records that `name` is revoked (by `by`, for `reason`) as an object
    /// of the log; `None` when it already was. Every tier then refuses it.
    pub fn revoke(
        &mut self,
        name: &str,
        by: &str,
        reason: &str,
    ) -> Result<Option<Position>, LogError> {
        let key = revocation_key(name);
        if self.log.get(&key).is_some() {
            return Ok(None);
        }
        let manifest = Manifest {
            meta: ObjectMeta {
                key: key.clone(),
                labels: Default::default(),
            },
            value: serde_json::json!({
                "apiVersion": format!("{STRATA_GROUP}/v1alpha1"),
                "kind": REVOCATION_KIND,
                "metadata": { "name": name },
                "spec": { "by": by, "reason": reason },
            }),
        };
        let rev = Revision(self.log.head().next().0);
        let object = strata_node::objects::to_object(&manifest, rev);
        self.apply(vec![Change::Upsert(object)]).map(Some)
    }

    /// Closes the sessions of connected children whose names are revoked.
    pub(super) fn close_revoked(&mut self) {
        for (name, child) in &self.children {
            if self.revoked.contains(name) {
                tracing::warn!(child = %name, "closing the session of a revoked child");
                self.outgoing
                    .close_children
                    .push((name.clone(), child.conn, refusal(name)));
            }
        }
    }
}
