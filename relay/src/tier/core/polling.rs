//! Which children's sessions a turn polls, and when each is next due.
//!
//! A session is a state machine: what it sends, when it is next due and whether it is
//! closed change only when it is given an input (a message, a timer, a route, labels)
//! or when the log it serves from moves. So a turn polls the sessions it touched, and
//! every session only when the log moved ([`ObjectLog::generation`]) or a change
//! reached them all. Each session's next deadline waits in a timer queue, so that
//! neither the next wake-up nor the timers due cost a walk over every child.
//!
//! Without this, every turn of a relay was linear in its children: a site of 100 agents
//! polled 100 sessions for each agent's heartbeat, 10,000 polls per heartbeat round.
//!
//! [`ObjectLog::generation`]: strata_protocol::sync::ObjectLog::generation

use std::collections::{BTreeMap, BTreeSet};

use strata_protocol::time::Instant;

/// The touched sessions (by connection id) and the timer queue.
#[derive(Debug, Default)]
pub(super) struct Polling {
    touched: BTreeSet<u64>,
    /// Every session is touched (labels or routes changed for all).
    all: bool,
    /// The log's generation when every session was last polled.
    generation: u64,
    /// `(deadline, conn)` of every session that has one.
    timers: BTreeSet<(Instant, u64)>,
    /// Each scheduled session's deadline, to find its entry in `timers`.
    deadlines: BTreeMap<u64, Instant>,
}

impl Polling {
    /// The session of `conn` was given an input: poll it this turn.
    pub(super) fn touch(&mut self, conn: u64) {
        self.touched.insert(conn);
    }

    /// Every session was given an input: poll them all this turn.
    pub(super) fn touch_all(&mut self) {
        self.all = true;
    }

    /// Whether every session was touched (events come only from inputs, never from the
    /// log moving; [`Polling::note_log`] also counts the log).
    pub(super) fn all_touched(&self) -> bool {
        self.all
    }

    /// The sessions touched so far this turn, in connection order.
    pub(super) fn touched(&self) -> impl Iterator<Item = u64> + '_ {
        self.touched.iter().copied()
    }

    /// The log is at `generation`: if it moved since every session was last polled, this
    /// turn polls them all ([`Polling::all_touched`] says so from now on).
    pub(super) fn note_log(&mut self, generation: u64) {
        if generation != self.generation {
            self.generation = generation;
            self.all = true;
        }
    }

    /// This turn's sessions were all polled.
    pub(super) fn polled(&mut self) {
        self.touched.clear();
        self.all = false;
    }

    /// The session of `conn` is next due at `at` (`None`: never, or it is gone).
    pub(super) fn schedule(&mut self, conn: u64, at: Option<Instant>) {
        if self.deadlines.get(&conn).copied() == at {
            return;
        }
        if let Some(old) = self.deadlines.remove(&conn) {
            self.timers.remove(&(old, conn));
        }
        if let Some(at) = at {
            self.deadlines.insert(conn, at);
            self.timers.insert((at, conn));
        }
    }

    /// Takes the sessions due at `now` out of the queue (they are polled, and scheduled
    /// again, by the transmit that follows).
    pub(super) fn due(&mut self, now: Instant) -> Vec<u64> {
        let mut due = Vec::new();
        while let Some(&(at, conn)) = self.timers.first() {
            if at > now {
                break;
            }
            self.timers.pop_first();
            self.deadlines.remove(&conn);
            due.push(conn);
        }
        due
    }

    /// The earliest deadline of any session.
    pub(super) fn next(&self) -> Option<Instant> {
        self.timers.first().map(|(at, _)| *at)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn at(ms: u64) -> Instant {
        Instant::ZERO + Duration::from_millis(ms)
    }

    #[test]
    fn the_queue_gives_the_earliest_deadline_and_takes_out_what_is_due() {
        let mut p = Polling::default();
        p.schedule(1, Some(at(30)));
        p.schedule(2, Some(at(10)));
        p.schedule(3, Some(at(20)));
        // Moved: its old deadline no longer counts.
        p.schedule(2, Some(at(40)));
        assert_eq!(p.next(), Some(at(20)));
        assert_eq!(p.due(at(30)), vec![3, 1]);
        assert_eq!(p.next(), Some(at(40)));
        p.schedule(2, None);
        assert_eq!(p.next(), None);
        assert!(p.due(at(100)).is_empty());
    }

    #[test]
    fn every_session_is_polled_when_the_log_moved_or_one_change_reached_them_all() {
        let mut p = Polling::default();
        p.touch(7);
        p.note_log(0);
        assert!(!p.all_touched());
        assert_eq!(p.touched().collect::<Vec<_>>(), vec![7]);
        p.polled();
        assert_eq!(p.touched().count(), 0);
        p.note_log(1);
        assert!(p.all_touched(), "the log moved");
        p.polled();
        p.note_log(1);
        assert!(!p.all_touched());
        p.touch_all();
        p.note_log(1);
        assert!(p.all_touched());
        p.polled();
        assert!(!p.all_touched());
    }
}
