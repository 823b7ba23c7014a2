//! The inward report stream: statuses, summaries and inventory.
//!
//! The child's [`ReportOutbox`] keeps only the latest value per [`ReportKey`] while it is
//! unsent, waits a short coalescing interval before sending, bounds the batches in
//! flight, and goes back to the first unacknowledged batch (a new epoch) when an ack is
//! overdue or the connection was replaced. The parent's [`ReportInbox`] accepts batches
//! strictly in order within an epoch, and a new epoch only at its first batch, so a stale
//! or duplicated batch never overwrites a newer value.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use crate::time::Instant;
use crate::wire::{Report, ReportKey, ReportValue, Reports};

/// Tuning of the report stream.
#[derive(Debug, Clone)]
pub struct ReportsConfig {
    /// How long a report waits for others to coalesce with before it is sent.
    pub flush_interval: Duration,
    /// Most reports in one batch.
    pub max_batch_items: usize,
    /// Most unacknowledged batches.
    pub max_inflight_batches: usize,
    /// An ack overdue by this long makes the outbox resend from the first unacked batch.
    pub retransmit_after: Duration,
}

impl Default for ReportsConfig {
    fn default() -> Self {
        ReportsConfig {
            flush_interval: Duration::from_millis(100),
            max_batch_items: 512,
            max_inflight_batches: 8,
            retransmit_after: Duration::from_secs(10),
        }
    }
}

#[derive(Debug, Clone)]
struct InflightBatch {
    seq: u64,
    sent_at: Instant,
    items: Vec<Report>,
}

/// The child's side of the report stream.
///
/// Call order: [`ReportOutbox::push`] whenever something changes locally;
/// [`ReportOutbox::on_connected`] when a session opens; [`ReportOutbox::handle_ack`] for
/// every ack; [`ReportOutbox::poll_transmit`] until it returns `None` whenever anything
/// happened or [`ReportOutbox::poll_timeout`] passed.
#[derive(Debug, Clone)]
pub struct ReportOutbox {
    config: ReportsConfig,
    pending: BTreeMap<ReportKey, ReportValue>,
    pending_since: Option<Instant>,
    /// The pending reports go with the next transmit, without waiting to coalesce:
    /// something is being sent anyway, or the caller coalesced them itself.
    due_now: bool,
    inflight: VecDeque<InflightBatch>,
    epoch: u32,
    epoch_start: u64,
    next_seq: u64,
    connected: bool,
}

impl ReportOutbox {
    /// An empty, disconnected outbox.
    pub fn new(config: ReportsConfig) -> Self {
        ReportOutbox {
            config,
            pending: BTreeMap::new(),
            pending_since: None,
            due_now: false,
            inflight: VecDeque::new(),
            epoch: 0,
            epoch_start: 0,
            next_seq: 0,
            connected: false,
        }
    }

    /// Queues a report, replacing any unsent report with the same key.
    pub fn push(&mut self, now: Instant, report: Report) {
        self.pending.insert(report.key, report.value);
        self.pending_since.get_or_insert(now);
    }

    /// Sends what is pending with the next transmit instead of after the flush
    /// interval: a message is going to the parent anyway (the reports ride in its
    /// packet), or the caller already coalesced them (a relay's summary tick).
    pub fn flush(&mut self) {
        self.due_now = self.pending_since.is_some();
    }

    /// Reports not yet acknowledged (pending or in flight).
    pub fn unacked_len(&self) -> usize {
        self.pending.len() + self.inflight.iter().map(|b| b.items.len()).sum::<usize>()
    }

    /// A new session opened: everything unacknowledged goes out again, in a new epoch.
    pub fn on_connected(&mut self) {
        self.connected = true;
        self.go_back();
    }

    /// The session closed; nothing is sent until the next one opens.
    pub fn on_disconnected(&mut self) {
        self.connected = false;
    }

    /// The parent durably holds every batch of `epoch` up to `seq`.
    pub fn handle_ack(&mut self, epoch: u32, seq: u64) {
        // Acks of older epochs cover batches that were requeued since; resending those
        // is harmless, trusting the ack is not (its seq numbers meant other batches).
        if epoch != self.epoch {
            return;
        }
        while self.inflight.front().is_some_and(|b| b.seq <= seq) {
            self.inflight.pop_front();
        }
    }

    /// The next batch to send, if one is due.
    pub fn poll_transmit(&mut self, now: Instant) -> Option<Reports> {
        if !self.connected {
            return None;
        }
        if self
            .inflight
            .front()
            .is_some_and(|b| now >= b.sent_at + self.config.retransmit_after)
        {
            self.go_back();
        }
        let since = self.pending_since?;
        if self.inflight.len() >= self.config.max_inflight_batches
            || (!self.due_now && now < since + self.config.flush_interval)
        {
            return None;
        }
        let mut items = Vec::new();
        while items.len() < self.config.max_batch_items {
            let Some((key, value)) = self.pending.pop_first() else {
                break;
            };
            items.push(Report { key, value });
        }
        if self.pending.is_empty() {
            self.pending_since = None;
            self.due_now = false;
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        self.inflight.push_back(InflightBatch {
            seq,
            sent_at: now,
            items: items.clone(),
        });
        Some(Reports {
            epoch: self.epoch,
            epoch_start: self.epoch_start,
            seq,
            items,
        })
    }

    /// When [`ReportOutbox::poll_transmit`] next has something to do.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if !self.connected {
            return None;
        }
        let flush = self
            .pending_since
            .filter(|_| self.inflight.len() < self.config.max_inflight_batches)
            .map(|t| {
                if self.due_now {
                    t
                } else {
                    t + self.config.flush_interval
                }
            });
        let resend = self
            .inflight
            .front()
            .map(|b| b.sent_at + self.config.retransmit_after);
        match (flush, resend) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Requeues every unacknowledged batch (newest first, so that the newest value of a
    /// key wins, and never over a newer pending value) and starts a new epoch at the
    /// first of them.
    fn go_back(&mut self) {
        let first_unacked = self.inflight.front().map_or(self.next_seq, |b| b.seq);
        while let Some(batch) = self.inflight.pop_back() {
            for item in batch.items {
                self.pending.entry(item.key).or_insert(item.value);
            }
        }
        if !self.pending.is_empty() {
            // Resent reports already waited for coalescing once: due at once.
            self.pending_since = Some(Instant::ZERO);
        }
        self.epoch = self.epoch.wrapping_add(1);
        self.epoch_start = first_unacked;
        self.next_seq = first_unacked;
    }
}

/// The parent's side of the report stream of one session.
#[derive(Debug, Clone, Default)]
pub struct ReportInbox {
    epoch: Option<u32>,
    next_seq: u64,
    ack_due: bool,
    /// The due ack cannot wait for a message to ride with (see [`ReportInbox::poll_ack`]).
    ack_urgent: bool,
    /// Batches accepted since the last ack went out.
    unacked_batches: usize,
}

/// Accepted batches after which the parent acknowledges at once instead of letting the
/// ack ride with its next message: a child keeps [`ReportsConfig::max_inflight_batches`]
/// (8 by default) in flight, so two never stall it.
const ACK_EVERY_BATCHES: usize = 2;

impl ReportInbox {
    /// A fresh inbox for a new session.
    pub fn new() -> Self {
        Self::default()
    }

    /// Returns the batch's reports if it is the next one in order; `None` for a
    /// duplicate, a stale epoch or a gap (the child will resend). Either way an ack of
    /// what is held becomes due, so the child learns where the parent stands.
    pub fn handle(&mut self, batch: Reports) -> Option<Vec<Report>> {
        let accept = match self.epoch {
            Some(e) if batch.epoch == e => batch.seq == self.next_seq,
            Some(e) if batch.epoch > e => {
                batch.seq == batch.epoch_start && batch.epoch_start <= self.next_seq
            }
            Some(_) => false,
            None => batch.seq == batch.epoch_start,
        };
        if !accept {
            // A duplicate, a stale epoch or a gap: the child is out of step, and learns
            // where the parent stands at once.
            if self.epoch.is_some() {
                self.ack_due = true;
                self.ack_urgent = true;
            }
            return None;
        }
        self.ack_due = true;
        self.unacked_batches += 1;
        if self.unacked_batches >= ACK_EVERY_BATCHES {
            self.ack_urgent = true;
        }
        self.epoch = Some(batch.epoch);
        self.next_seq = batch.seq + 1;
        Some(batch.items)
    }

    /// The ack that must go now, once the driver has persisted what
    /// [`ReportInbox::handle`] returned: `(epoch, seq)`.
    ///
    /// One batch accepted in order does not make an ack urgent: its ack waits for the
    /// next message to the child ([`ReportInbox::poll_deferred_ack`]), at the latest the
    /// heartbeat ([`ReportInbox::take_or_repeat_ack`]). A status that answers an update
    /// is then acknowledged without a packet of its own: the parent's QUIC stack
    /// acknowledges the status alone, which the child does not acknowledge in turn, so
    /// an update is three packets per agent link (object, status, ACK), not four.
    pub fn poll_ack(&mut self) -> Option<(u32, u64)> {
        if !self.ack_urgent {
            return None;
        }
        self.poll_deferred_ack()
    }

    /// The ack due, urgent or not: for a message about to go to the child anyway.
    pub fn poll_deferred_ack(&mut self) -> Option<(u32, u64)> {
        if !std::mem::take(&mut self.ack_due) {
            return None;
        }
        self.ack_urgent = false;
        self.unacked_batches = 0;
        self.last_ack()
    }

    /// The ack to send with a heartbeat: the one due, or else the last again (acks may
    /// be lost).
    pub fn take_or_repeat_ack(&mut self) -> Option<(u32, u64)> {
        self.poll_deferred_ack().or_else(|| self.last_ack())
    }

    /// The last ack, to repeat with heartbeats (acks may be lost).
    pub fn last_ack(&self) -> Option<(u32, u64)> {
        Some((self.epoch?, self.next_seq.checked_sub(1)?))
    }
}
