//! Admission of children's sessions: a relay sets up a bounded number of sessions at
//! once, and tells the rest when to come back, so that a reconnect storm (every agent
//! of a site after a power cut, every child of a relay that restarted) is served at the
//! rate the relay can sustain instead of knocking it over.
//!
//! A session is *setting up* from its hello until the child has acknowledged the log's
//! head as it was at the hello, or has said it reported everything again, or for at
//! most [`SETUP_TIMEOUT`]. While [`AdmissionConfig::setups`] sessions are setting up, a
//! new hello is refused with [`ErrorCode::Overloaded`](strata_protocol::wire::ErrorCode)
//! and a time to come back: the next free slot, at the rate set-ups have been finishing
//! here, so that the refused are spread over the time the queue needs rather than all
//! coming back at once. The same slots spread the children a relay sends away when it
//! shuts down (their wait grows with how many children it has).
//!
//! Pure and deterministic: no clock but the `now` it is given, no randomness (the spread
//! comes from the slots, not from dice).

use std::collections::BTreeMap;
use std::time::Duration;

use strata_protocol::model::Position;
use strata_protocol::time::Instant;

/// How long a session counts as setting up, at most.
pub const SETUP_TIMEOUT: Duration = Duration::from_secs(10);
/// The set-up time assumed before any set-up was measured.
const FIRST_ESTIMATE: Duration = Duration::from_millis(50);
/// Added to every refused child's slot: the shortest wait one is given.
const MIN_RETRY: Duration = Duration::from_millis(200);
/// The longest.
const MAX_RETRY: Duration = Duration::from_secs(120);

/// Limits of a node's admission.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdmissionConfig {
    /// Sessions setting up at once, at most; 0 admits everyone.
    pub setups: usize,
}

impl Default for AdmissionConfig {
    fn default() -> Self {
        AdmissionConfig {
            setups: DEFAULT_SETUPS,
        }
    }
}

pub use crate::limits::DEFAULT_SETUPS;

/// What one node is admitting.
#[derive(Debug)]
pub(super) struct Admission {
    config: AdmissionConfig,
    /// Sessions setting up: key → (hello at, the head the child must acknowledge).
    setting_up: BTreeMap<String, (Instant, Position)>,
    /// How long a set-up takes here (a moving average of the measured ones).
    estimate: Duration,
    /// The next free slot a refused child may have.
    next_slot: Option<Instant>,
    /// Hellos refused so far.
    refused: u64,
}

impl Admission {
    pub(super) fn new(config: AdmissionConfig) -> Self {
        Admission {
            config,
            setting_up: BTreeMap::new(),
            estimate: FIRST_ESTIMATE,
            next_slot: None,
            refused: 0,
        }
    }

    /// A hello of session `key` arrived: admitted (`Ok`), or told when to come back.
    pub(super) fn admit(&mut self, now: Instant, key: &str) -> Result<(), Duration> {
        self.expire(now);
        if self.config.setups == 0
            || self.setting_up.len() < self.config.setups
            || self.setting_up.contains_key(key)
        {
            return Ok(());
        }
        self.refused += 1;
        Err(self.slot(now))
    }

    /// The session `key` opened; it sets up until the child acknowledged `head`.
    pub(super) fn opened(&mut self, now: Instant, key: &str, head: Position) {
        if self.config.setups > 0 {
            self.setting_up.insert(key.to_owned(), (now, head));
        }
    }

    /// The child of session `key` acknowledged `position`.
    pub(super) fn acked(&mut self, now: Instant, key: &str, position: Position) {
        if self
            .setting_up
            .get(key)
            .is_some_and(|(_, head)| position >= *head)
        {
            self.done(now, key);
        }
    }

    /// The child of session `key` reported everything again: set up.
    pub(super) fn complete(&mut self, now: Instant, key: &str) {
        self.done(now, key);
    }

    /// The session `key` is gone.
    pub(super) fn gone(&mut self, key: &str) {
        self.setting_up.remove(key);
    }

    /// Waits for `n` children sent away at once (a shutdown), spread over the slots
    /// their set-ups will need when they come back: the first `setups` at once, the
    /// next as those finish, and so on.
    pub(super) fn spread(&self, n: usize) -> Vec<Duration> {
        let per = self.config.setups.max(1);
        (0..n)
            .map(|i| {
                let rounds = u32::try_from(i / per).unwrap_or(u32::MAX);
                self.estimate.saturating_mul(rounds).min(MAX_RETRY)
            })
            .collect()
    }

    /// Sessions setting up now.
    pub(super) fn setting_up(&self) -> usize {
        self.setting_up.len()
    }

    /// Hellos refused so far.
    pub(super) fn refused(&self) -> u64 {
        self.refused
    }

    fn done(&mut self, now: Instant, key: &str) {
        if let Some((since, _)) = self.setting_up.remove(key) {
            // A moving average, weighted 1/8 to the newest.
            let took = now.saturating_since(since);
            self.estimate = (self.estimate.saturating_mul(7) + took) / 8;
        }
    }

    fn expire(&mut self, now: Instant) {
        self.setting_up
            .retain(|_, (since, _)| now.saturating_since(*since) < SETUP_TIMEOUT);
        if self.next_slot.is_some_and(|s| s <= now) {
            self.next_slot = None;
        }
    }

    /// The next free slot: slots are handed out `estimate / setups` apart (the rate at
    /// which set-ups free places), from the later of now and the last one handed out.
    fn slot(&mut self, now: Instant) -> Duration {
        let spacing = self.estimate / u32::try_from(self.config.setups.max(1)).unwrap_or(1);
        // The first refused comes back when the sessions setting up now are through.
        let start = self.next_slot.unwrap_or(now + self.estimate);
        let slot = start + spacing;
        self.next_slot = Some(slot);
        (MIN_RETRY + slot.saturating_since(now)).min(MAX_RETRY)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Instant {
        Instant::from_origin(Duration::from_millis(ms))
    }

    #[test]
    fn over_the_cap_hellos_are_refused_with_slots_that_spread_them() {
        let mut a = Admission::new(AdmissionConfig { setups: 2 });
        assert_eq!(a.admit(at(0), "a"), Ok(()));
        a.opened(at(0), "a", Position(5));
        assert_eq!(a.admit(at(0), "b"), Ok(()));
        a.opened(at(0), "b", Position(5));
        let waits: Vec<Duration> = (0..4)
            .map(|i| a.admit(at(1), &format!("c{i}")).expect_err("over the cap"))
            .collect();
        // Each refused child is given a later slot than the one before.
        assert!(waits.windows(2).all(|w| w[0] < w[1]), "{waits:?}");
        assert!(waits.iter().all(|w| *w >= MIN_RETRY && *w <= MAX_RETRY));
        assert_eq!(a.refused(), 4);
        // A session that acknowledged the head is set up: its place is free.
        a.acked(at(30), "a", Position(4));
        assert_eq!(a.setting_up(), 2, "not at the head yet");
        a.acked(at(40), "a", Position(5));
        assert_eq!(a.setting_up(), 1);
        assert_eq!(a.admit(at(41), "d"), Ok(()));
    }

    #[test]
    fn a_session_counts_as_setting_up_for_at_most_the_timeout() {
        let mut a = Admission::new(AdmissionConfig { setups: 1 });
        a.opened(at(0), "a", Position(5));
        assert!(a.admit(at(100), "b").is_err());
        let later = u64::try_from(SETUP_TIMEOUT.as_millis()).unwrap_or(u64::MAX);
        assert_eq!(a.admit(at(later), "b"), Ok(()));
    }

    #[test]
    fn a_reconnecting_child_already_counted_is_admitted_and_zero_admits_all() {
        let mut a = Admission::new(AdmissionConfig { setups: 1 });
        a.opened(at(0), "a", Position(5));
        assert_eq!(a.admit(at(1), "a"), Ok(()));
        let mut open = Admission::new(AdmissionConfig { setups: 0 });
        for i in 0..100 {
            let key = format!("c{i}");
            assert_eq!(open.admit(at(0), &key), Ok(()));
            open.opened(at(0), &key, Position(1));
        }
        assert_eq!(open.setting_up(), 0);
    }

    #[test]
    fn a_shutdown_spreads_its_children_over_the_rounds_their_setups_need() {
        let mut a = Admission::new(AdmissionConfig { setups: 2 });
        a.opened(at(0), "x", Position(1));
        a.complete(at(80), "x");
        let waits = a.spread(5);
        assert_eq!(waits[0], Duration::ZERO);
        assert_eq!(waits[0], waits[1]);
        assert!(waits[2] > waits[1] && waits[2] == waits[3] && waits[4] > waits[3]);
    }
}
