//! Time in the tree: steps, deliveries, timers, and each node's turn (process, commit,
//! transmit), as the node layer's driver takes it.

use std::collections::BTreeMap;
use std::time::Duration;

use strata_node::driver::COMMIT_RETRY;
use strata_node::store::{Batch, Store};
use strata_protocol::codec::{self, DEFAULT_MAX_FRAME};
use strata_protocol::time::Instant;
use strata_protocol::wire::{ChildToParent, ParentToChild};

use super::{Tree, span};

/// Steps [`Tree::drive`] and [`Tree::advance`] allow before calling it a livelock.
const MAX_STEPS: usize = 100_000;

/// A frame on its way.
pub struct InFlight {
    pub at: Instant,
    /// Sending order, so that equal arrival times keep it.
    seq: u64,
    /// The child end of the link.
    pub child: String,
    pub conn: u64,
    /// Towards the child (or the parent).
    down: bool,
    frame: Vec<u8>,
}

impl Tree {
    /// Does everything due now: delivers what has arrived, connects links whose wait
    /// is over, fires due timers, and lets every node with input take its turn. Then,
    /// if messages are still in flight, moves the clock to the next delivery or timer.
    /// Returns whether anything is still going on: input not yet processed, or a
    /// message in flight (timers alone are not: [`Tree::advance`] waits for them).
    pub fn step(&mut self) -> bool {
        self.round();
        if !self.dirty.is_empty() {
            return true;
        }
        let Some(delivery) = self.in_flight.iter().map(|m| m.at).min() else {
            return false;
        };
        let next = self.next_timer().map_or(delivery, |t| t.min(delivery));
        self.now = self.now.max(next);
        true
    }

    /// Steps until nothing is going on; panics after `max_steps`, naming what kept
    /// going (a livelock).
    pub fn drive_bounded(&mut self, max_steps: usize) {
        self.activity.clear();
        for _ in 0..max_steps {
            if !self.step() {
                return;
            }
        }
        panic!(
            "the tree did not settle within {max_steps} steps: {}",
            self.still_going()
        );
    }

    /// Steps until nothing is going on (bounded: a livelock fails the test).
    pub fn drive(&mut self) {
        self.drive_bounded(MAX_STEPS);
    }

    /// Lets `d` of virtual time pass: every delivery and timer comes at its time.
    /// Messages still in flight at the end stay in flight.
    pub fn advance(&mut self, d: Duration) {
        let end = self.now + d;
        self.activity.clear();
        for _ in 0..MAX_STEPS {
            self.round();
            if !self.dirty.is_empty() {
                continue;
            }
            let delivery = self.in_flight.iter().map(|m| m.at).min();
            match [delivery, self.next_timer()].into_iter().flatten().min() {
                Some(t) if t <= end => self.now = self.now.max(t),
                _ => {
                    self.now = end;
                    return;
                }
            }
        }
        panic!(
            "{d:?} did not pass within {MAX_STEPS} steps: {}",
            self.still_going()
        );
    }

    /// Every frame in flight on `child`'s link arrives now, in sending order, so that
    /// each end's next turn takes them in one batch (a burst the network held back and
    /// then let go).
    pub fn deliver_together(&mut self, child: &str) {
        let now = self.now;
        for m in self.in_flight.iter_mut().filter(|m| m.child == child) {
            m.at = now;
        }
        self.link_mut(child).last_arrival = now;
    }

    /// The next timer of any node: its core's, a reconnection, a commit retry.
    fn next_timer(&self) -> Option<Instant> {
        self.nodes
            .values()
            .flat_map(|n| {
                // A node waiting to retry a commit does nothing else meanwhile.
                let core = match n.retry_commit_at {
                    Some(_) => None,
                    None => n.core.as_ref().and_then(|c| c.poll_timeout()),
                };
                let reconnect = n.link.as_ref().and_then(|l| l.reconnect_at);
                [core, reconnect, n.retry_commit_at]
            })
            .flatten()
            .min()
    }

    /// What is still going on, for a livelock's message: the busiest nodes and links,
    /// what is in flight, and whose timers are due.
    fn still_going(&self) -> String {
        let mut busiest: Vec<(&String, &u64)> = self.activity.iter().collect();
        busiest.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        let busiest: Vec<String> = busiest
            .iter()
            .take(6)
            .map(|(what, n)| format!("{what} x{n}"))
            .collect();
        let mut in_flight: BTreeMap<String, usize> = BTreeMap::new();
        for m in &self.in_flight {
            *in_flight.entry(link_name(&m.child, m.down)).or_default() += 1;
        }
        let due: Vec<&String> = self
            .nodes
            .iter()
            .filter(|(_, n)| {
                let timer = n.core.as_ref().and_then(|c| c.poll_timeout());
                timer.is_some_and(|t| t <= self.now)
            })
            .map(|(name, _)| name)
            .collect();
        format!(
            "at {:?}, busiest {busiest:?}; in flight {in_flight:?}; timers due at {due:?}",
            self.now.since_origin()
        )
    }

    /// One round at the current time.
    fn round(&mut self) {
        let now = self.now;
        self.in_flight.sort_by_key(|m| (m.at, m.seq));
        let arrived = self.in_flight.partition_point(|m| m.at <= now);
        let arrived: Vec<InFlight> = self.in_flight.drain(..arrived).collect();
        for m in arrived {
            self.deliver(m);
        }
        for name in self.order.clone() {
            let node = self.node_mut(&name);
            if node
                .link
                .as_ref()
                .is_some_and(|l| l.reconnect_at.is_some_and(|t| t <= now))
            {
                self.connect(&name);
            }
            let node = self.node_mut(&name);
            match node.retry_commit_at {
                Some(t) if t <= now => {
                    node.retry_commit_at = None;
                    self.dirty.insert(name.clone());
                }
                // The driver sleeps between commit attempts: no timer fires meanwhile.
                Some(_) => continue,
                None => {}
            }
            if let Some(core) = &mut self.node_mut(&name).core
                && core.poll_timeout().is_some_and(|t| t <= now)
            {
                let _span = span(now, &name).entered();
                core.handle_timeout(now);
                self.dirty.insert(name);
            }
        }
        for name in std::mem::take(&mut self.dirty) {
            if self.node(&name).retry_commit_at.is_some() {
                // Its input waits for the retry, which processes it.
                continue;
            }
            *self.activity.entry(name.clone()).or_default() += 1;
            let _span = span(now, &name).entered();
            self.take_turn(&name);
        }
    }

    /// A frame arrives at its end of the link, if the connection it was sent on is
    /// still the link's.
    fn deliver(&mut self, m: InFlight) {
        let now = self.now;
        let conn = self.node(&m.child).link.as_ref().and_then(|l| l.conn);
        if conn != Some(m.conn) {
            return;
        }
        if m.down {
            let (msg, _) = codec::decode::<ParentToChild>(&m.frame, DEFAULT_MAX_FRAME)
                .unwrap()
                .expect("a whole frame");
            if let Some(core) = &mut self.node_mut(&m.child).core {
                let _span = span(now, &m.child).entered();
                core.parent_message(now, msg);
            }
            self.dirty.insert(m.child);
        } else {
            let (msg, _) = codec::decode::<ChildToParent>(&m.frame, DEFAULT_MAX_FRAME)
                .unwrap()
                .expect("a whole frame");
            let parent = self.parent_of(&m.child);
            if let Some(p) = self.parent_core(&m.child) {
                let _span = span(now, &parent).entered();
                p.child_message(now, &m.child, m.conn, msg);
            }
            self.dirty.insert(parent);
        }
    }

    /// One node's turn, as the driver takes it: process; commit (a failed commit keeps
    /// the batch, transmits nothing, and is retried after [`COMMIT_RETRY`]); transmit;
    /// close what the core gave up on.
    fn take_turn(&mut self, name: &str) {
        let now = self.now;
        let node = self.node_mut(name);
        let Some(core) = &mut node.core else {
            return;
        };
        node.unsaved.merge(core.process(now));
        if !node.unsaved.is_empty() {
            if let Err(e) = node.store.commit(&node.unsaved) {
                tracing::warn!(error = %e, "commit failed; nothing transmitted");
                node.retry_commit_at = Some(now + COMMIT_RETRY);
                return;
            }
            node.unsaved = Batch::default();
        }
        let out = node.core.as_mut().unwrap().transmit(now);
        if let Some(conn) = node.link.as_ref().and_then(|l| l.conn) {
            for msg in out.to_parent {
                self.send(name, conn, false, &msg);
            }
        }
        for (child, conn, msg) in out.to_children {
            self.send(&child, conn, true, &msg);
        }
        for (child, conn, error) in out.close_children {
            if self.node(&child).link.as_ref().and_then(|l| l.conn) == Some(conn) {
                tracing::info!(%child, reason = %error.reason, "closing the child's connection");
                self.disconnect(&child, None);
            }
        }
        if let Some((error, retry_after)) = out.close_parent {
            tracing::info!(reason = %error.reason, "closing the link to the parent");
            self.disconnect(name, retry_after);
        }
    }

    /// Puts a message on `child`'s link as a frame, arriving after the link's latency
    /// and never before one sent earlier on it.
    fn send<M: serde::Serialize>(&mut self, child: &str, conn: u64, down: bool, msg: &M) {
        let mut frame = Vec::new();
        codec::encode(msg, DEFAULT_MAX_FRAME, &mut frame).unwrap();
        let now = self.now;
        let link = self.link_mut(child);
        let at = (now + link.latency).max(link.last_arrival);
        link.last_arrival = at;
        if down {
            link.bytes_down += frame.len() as u64;
        } else {
            link.bytes_up += frame.len() as u64;
        }
        *self.activity.entry(link_name(child, down)).or_default() += 1;
        let seq = self.next_seq;
        self.next_seq += 1;
        self.in_flight.push(InFlight {
            at,
            seq,
            child: child.to_owned(),
            conn,
            down,
            frame,
        });
    }
}

/// How a link's direction shows in a livelock's message.
fn link_name(child: &str, down: bool) -> String {
    if down {
        format!("-> {child}")
    } else {
        format!("{child} ->")
    }
}
