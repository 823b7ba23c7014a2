//! Heartbeats and the idle timeout, driven only by `now`.

use std::time::Duration;

use crate::time::Instant;

/// What [`Liveness::poll`] asks the owner to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LivenessAction {
    /// Nothing is due.
    Nothing,
    /// Nothing was sent for a heartbeat interval: send a ping.
    SendPing,
    /// Nothing was received for the idle timeout: the peer is gone.
    TimedOut,
}

/// Tracks when a peer was last heard from and when we last spoke.
///
/// Call order: [`Liveness::on_receive`] for every message received,
/// [`Liveness::on_send`] for every message sent, [`Liveness::poll`] when
/// [`Liveness::next_deadline`] passes.
#[derive(Debug, Clone)]
pub struct Liveness {
    heartbeat: Duration,
    idle_timeout: Duration,
    last_received: Instant,
    last_sent: Instant,
}

impl Liveness {
    /// Starts tracking at `now` as if a message had just been sent and received.
    pub fn new(now: Instant, heartbeat: Duration, idle_timeout: Duration) -> Self {
        Liveness {
            heartbeat,
            idle_timeout,
            last_received: now,
            last_sent: now,
        }
    }

    /// Changes the intervals (after the handshake settled them).
    pub fn set_intervals(&mut self, heartbeat: Duration, idle_timeout: Duration) {
        self.heartbeat = heartbeat;
        self.idle_timeout = idle_timeout;
    }

    /// The heartbeat interval.
    pub fn heartbeat(&self) -> Duration {
        self.heartbeat
    }

    /// Records that a message arrived.
    pub fn on_receive(&mut self, now: Instant) {
        self.last_received = self.last_received.max(now);
    }

    /// Records that a message was sent.
    pub fn on_send(&mut self, now: Instant) {
        self.last_sent = self.last_sent.max(now);
    }

    /// When the idle timeout passes, if nothing is heard meanwhile. Before a session is
    /// open no ping can be sent, so this is the only deadline that counts then.
    pub fn idle_deadline(&self) -> Instant {
        self.last_received + self.idle_timeout
    }

    /// The earliest instant at which [`Liveness::poll`] has something to say.
    pub fn next_deadline(&self) -> Instant {
        (self.last_sent + self.heartbeat).min(self.last_received + self.idle_timeout)
    }

    /// What is due at `now`. A timeout wins over a ping.
    pub fn poll(&self, now: Instant) -> LivenessAction {
        if now >= self.last_received + self.idle_timeout {
            LivenessAction::TimedOut
        } else if now >= self.last_sent + self.heartbeat {
            LivenessAction::SendPing
        } else {
            LivenessAction::Nothing
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Instant {
        Instant::from_origin(Duration::from_millis(ms))
    }

    #[test]
    fn pings_when_silent_and_times_out_when_deaf() {
        let mut l = Liveness::new(at(0), Duration::from_secs(1), Duration::from_secs(3));
        assert_eq!(l.poll(at(999)), LivenessAction::Nothing);
        assert_eq!(l.next_deadline(), at(1000));
        assert_eq!(l.poll(at(1000)), LivenessAction::SendPing);
        l.on_send(at(1000));
        assert_eq!(l.next_deadline(), at(2000));
        l.on_receive(at(1500));
        l.on_send(at(2000));
        assert_eq!(l.next_deadline(), at(3000));
        l.on_send(at(4000));
        assert_eq!(l.poll(at(4499)), LivenessAction::Nothing);
        assert_eq!(l.poll(at(4500)), LivenessAction::TimedOut);
    }

    #[test]
    fn receiving_late_never_moves_time_backwards() {
        let mut l = Liveness::new(at(10), Duration::from_secs(1), Duration::from_secs(2));
        l.on_receive(at(5));
        assert_eq!(l.poll(at(2009)), LivenessAction::SendPing);
        assert_eq!(l.poll(at(2010)), LivenessAction::TimedOut);
    }
}
