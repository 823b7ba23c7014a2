//! Propagation lag per hop: how long after a position of this node's log was
//! committed here each child acknowledged a cursor at or past it (it holds the change
//! durably, or has nothing of it to hold). Observed into a histogram per child.

use std::collections::BTreeMap;

use strata_node::exposition::HistogramVec;
use strata_protocol::model::{Cursor, LogId, Position};
use strata_protocol::time::Instant;

/// Buckets in seconds, from 5 ms to a minute: a hop is milliseconds on a good link and
/// seconds through a reconnect.
pub const LAG_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// How many commit times are remembered: a child further behind is catching up, and
/// its lag then is the reconnect's, not a change's.
const REMEMBERED: usize = 4096;

/// When each recent position was committed here, and the lag observed per child.
#[derive(Debug, Clone)]
pub struct PropagationLag {
    /// This node's name (a label of every series).
    node: String,
    /// The log the positions belong to.
    log: LogId,
    /// The head last noted.
    noted: Position,
    /// Commit time of each noted head, oldest first.
    committed: BTreeMap<Position, Instant>,
    /// Seconds from commit to acknowledgement, per child: series without labels, so
    /// that an observation (one per child and change) allocates and compares nothing;
    /// labelled by node and child when read ([`PropagationLag::histogram`]).
    by_child: BTreeMap<String, HistogramVec>,
}

impl PropagationLag {
    /// Nothing noted yet; `head` is already committed (restored), so not timed.
    pub fn new(node: &str, log: LogId, head: Position) -> PropagationLag {
        PropagationLag {
            node: node.to_owned(),
            log,
            noted: head,
            committed: BTreeMap::new(),
            by_child: BTreeMap::new(),
        }
    }

    /// The log's head is `head` at `now`: a head not seen before was committed now.
    pub fn note_head(&mut self, log: LogId, head: Position, now: Instant) {
        if log != self.log {
            // A new log (a standby's first read of the writer's): nothing compares.
            *self = PropagationLag {
                by_child: std::mem::take(&mut self.by_child),
                ..PropagationLag::new(&self.node, log, head)
            };
            return;
        }
        if head > self.noted {
            self.noted = head;
            self.committed.insert(head, now);
            while self.committed.len() > REMEMBERED {
                self.committed.pop_first();
            }
        }
    }

    /// `child` acknowledged `cursor` at `now`, having acknowledged `before` (if
    /// anything): every timed position in between reached it now. Without an earlier
    /// acknowledgement nothing is observed (which positions are new to it is unknown).
    pub fn acked(&mut self, child: &str, before: Option<Cursor>, cursor: Cursor, now: Instant) {
        let Some(before) = before.filter(|b| b.log == self.log && cursor.log == self.log) else {
            return;
        };
        if cursor.position <= before.position {
            return;
        }
        let after = Position(before.position.0 + 1);
        let mut timed = self.committed.range(after..=cursor.position).peekable();
        if timed.peek().is_none() {
            return;
        }
        let series = match self.by_child.get_mut(child) {
            Some(series) => series,
            None => self
                .by_child
                .entry(child.to_owned())
                .or_insert_with(|| HistogramVec::new(&[], LAG_BUCKETS)),
        };
        for (_, at) in timed {
            series.observe(Vec::new(), (now - *at).as_secs_f64());
        }
    }

    /// The observations so far, by node and child.
    pub fn histogram(&self) -> HistogramVec {
        let mut all = HistogramVec::new(&["node", "child"], LAG_BUCKETS);
        for (child, series) in &self.by_child {
            all.absorb(
                series.labelled_first(&["node", "child"], &[self.node.clone(), child.clone()]),
            );
        }
        all
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn at(ms: u64) -> Instant {
        Instant::from_origin(Duration::from_millis(ms))
    }

    #[test]
    fn each_position_committed_is_observed_once_when_a_child_acknowledges_past_it() {
        let log = LogId(7);
        let cursor = |p| Cursor {
            log,
            position: Position(p),
        };
        let mut lag = PropagationLag::new("center", log, Position(10));
        lag.note_head(log, Position(11), at(100));
        lag.note_head(log, Position(11), at(150));
        lag.note_head(log, Position(13), at(200));
        // First acknowledgement of a session restored nothing: unknown, not observed.
        lag.acked("eu", None, cursor(13), at(300));
        assert_eq!(lag.histogram().count(&["center".into(), "eu".into()]), 0);
        lag.acked("us", Some(cursor(10)), cursor(11), at(130));
        lag.acked("us", Some(cursor(11)), cursor(13), at(1200));
        lag.acked("us", Some(cursor(13)), cursor(13), at(1300));
        assert_eq!(lag.histogram().count(&["center".into(), "us".into()]), 2);
        let mut text = strata_node::exposition::Exposition::new();
        text.histogram("lag", "Lag.", &lag.histogram());
        let text = text.finish();
        // 30 ms for position 11, 1 s for 13.
        assert!(
            text.contains("lag_bucket{node=\"center\",child=\"us\",le=\"0.025\"} 0\n"),
            "{text}"
        );
        assert!(
            text.contains("lag_bucket{node=\"center\",child=\"us\",le=\"0.05\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("lag_bucket{node=\"center\",child=\"us\",le=\"1\"} 2\n"),
            "{text}"
        );
        // Another log's cursor is not compared.
        lag.acked(
            "us",
            Some(cursor(13)),
            Cursor {
                log: LogId(8),
                position: Position(20),
            },
            at(1400),
        );
        assert_eq!(lag.histogram().count(&["center".into(), "us".into()]), 2);
        // A new log (a standby's first read of the writer's) keeps what was observed.
        lag.note_head(LogId(8), Position(30), at(1500));
        lag.note_head(LogId(8), Position(31), at(1600));
        let cursor8 = |p| Cursor {
            log: LogId(8),
            position: Position(p),
        };
        lag.acked("us", Some(cursor8(30)), cursor8(31), at(1610));
        assert_eq!(lag.histogram().count(&["center".into(), "us".into()]), 3);
    }
}
