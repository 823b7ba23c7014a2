//! The parent's side of a node: the connection's inputs, handed to the
//! [`strata_node::follower::ParentFollower`], and what the follower's events mean here (changes to note,
//! labels to inherit, everything to report again, a link to close). What goes up is
//! in `upward.rs`.

use strata_node::follower::Followed;
use strata_protocol::model::Labels;
use strata_protocol::time::Instant;
use strata_protocol::wire::{LinkPath, ParentToChild};

use super::NodeCore;
use super::setup::all_labels;

impl NodeCore {
    /// The connection to the parent is up, reaching it by `via`.
    pub fn parent_connected(&mut self, now: Instant, via: LinkPath) {
        if let Some(parent) = &mut self.parent {
            parent.handle_connected(now, via);
        }
        self.hold_admissions(now);
    }

    /// A message from the parent.
    pub fn parent_message(&mut self, now: Instant, msg: ParentToChild) {
        if let Some(parent) = &mut self.parent {
            parent.handle_message(now, msg);
        }
    }

    /// The connection to the parent is gone.
    pub fn parent_gone(&mut self) {
        if let Some(parent) = &mut self.parent {
            parent.handle_disconnected();
        }
    }

    /// What the parent's events mean here: changes to note, labels to inherit,
    /// everything to report again, or a link to close. Changes are acknowledged with
    /// the next transmit: link records half due go with them
    /// ([`NodeCore::refresh_links_with_ack`]).
    pub(super) fn drain_parent_events(&mut self, now: Instant) {
        let Some(mut parent) = self.parent.take() else {
            return;
        };
        let mut changed = false;
        while let Some(followed) = parent.poll(&mut self.log, &mut self.batch) {
            match followed {
                Followed::ReportAll => self.report_all = true,
                Followed::Labels(labels) => self.inherit(labels),
                Followed::Changed(change) => {
                    changed = true;
                    self.note_key(change.key().clone());
                }
                Followed::Closed { error, retry_after } => {
                    self.outgoing.close_parent = Some((error, retry_after));
                }
            }
        }
        if parent.caught_up() && self.hold_until.take().is_some() {
            tracing::info!("caught up with the parent: admitting children");
        }
        self.parent = Some(parent);
        if changed {
            self.refresh_links_with_ack(now);
        }
    }

    /// The labels this node's ancestors give every cluster below changed (at a welcome,
    /// or while connected; the follower stored them): every connected child is told (so
    /// that the whole subtree routes with them, whatever order its nodes started in),
    /// and routes and summaries here are recomputed.
    fn inherit(&mut self, inherited: Labels) {
        let all = all_labels(&self.labels, &inherited);
        for child in self.children.values_mut() {
            child.session.set_labels(all.clone());
        }
        self.polling.touch_all();
        self.config.labels = all.clone();
        self.reports.set_labels(all);
        self.routes_stale = true;
        self.dirty.extend(self.log.live().map(|o| o.key().clone()));
    }
}
