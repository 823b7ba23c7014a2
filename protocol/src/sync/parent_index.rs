//! Which positions of a relay's own log correspond to which cursors of its parent's log:
//! what lets a child move between replicas of a replicated relay tier with a delta.
//!
//! Replicas of one tier follow the same parent log but number their own logs
//! independently (each relay numbers the batches it commits), so a child's cursor into
//! one replica means nothing to another. A replica that knows which parent cursor a
//! position of its log stands for tells its children ([`ParentToChild::GrandparentCursor`]); a
//! child that moves to another replica names that parent cursor when it subscribes
//! ([`ChildToParent::Resume`]), and the other replica translates it back into a position
//! of its own log from which a delta is sound.
//!
//! A translation is sound from a position `q` of this log whose parent cursor is at or
//! below the child's, provided this log followed its parent with deltas only from `q`
//! on: the delta from `q` then names every key the parent changed after the child's
//! cursor (and some it did not, which the child ignores). A snapshot from the parent
//! breaks that continuity (objects created and deleted while this replica was away left
//! no tombstone here), so it clears the index.
//!
//! The index is kept in memory only: after a restart a replica translates nothing until
//! it has followed its parent again, and children that move to it meanwhile are sent a
//! snapshot.
//!
//! [`ParentToChild::GrandparentCursor`]: crate::wire::ParentToChild::GrandparentCursor
//! [`ChildToParent::Resume`]: crate::wire::ChildToParent::Resume

use std::collections::VecDeque;

use crate::model::{Cursor, LogId, Position};

/// How many positions the index remembers; older ones are forgotten (a child that
/// moves from so far behind is sent a snapshot).
pub const PARENT_INDEX_MARKS: usize = 4096;

/// What a parent cursor named by a child means in this log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Translation {
    /// A delta from this position of this log is sound.
    At(Position),
    /// The cursor is ahead of what this log has followed of the parent: wait until it
    /// catches up.
    Behind,
    /// Nothing here can serve it with a delta (another parent log, forgotten, or before
    /// the last snapshot).
    Unknown,
}

/// The positions of a log and the parent cursors they stand for, in order. Empty and
/// inert unless [`ParentIndex::enable`] was called (only a replica of a replicated
/// tier keeps one).
#[derive(Debug, Clone, Default)]
pub struct ParentIndex {
    enabled: bool,
    parent_log: Option<LogId>,
    /// `(local, parent)` positions, both strictly increasing.
    marks: VecDeque<(Position, Position)>,
}

impl ParentIndex {
    /// Starts recording.
    pub fn enable(&mut self) {
        self.enabled = true;
    }

    /// Whether the index records anything.
    pub fn is_enabled(&self) -> bool {
        self.enabled
    }

    /// Position `local` of this log, just committed, stands for `parent`. `continuous`
    /// says whether it was reached by deltas from the previous mark (not by a snapshot).
    pub fn record(&mut self, local: Position, parent: Cursor, continuous: bool) {
        if !self.enabled {
            return;
        }
        let same_log = self.parent_log == Some(parent.log);
        let in_order = self
            .marks
            .back()
            .is_none_or(|&(l, p)| local > l && parent.position >= p);
        if !continuous || !same_log || !in_order {
            self.marks.clear();
            self.parent_log = Some(parent.log);
        }
        // Two local positions for one parent position (an empty commit): the later one
        // is as good a starting point and sends less.
        if self
            .marks
            .back()
            .is_some_and(|&(_, p)| p == parent.position)
        {
            self.marks.pop_back();
        }
        self.marks.push_back((local, parent.position));
        while self.marks.len() > PARENT_INDEX_MARKS {
            self.marks.pop_front();
        }
    }

    /// The parent cursor position `local` of this log stands for, if it is remembered.
    pub fn parent_at(&self, local: Position) -> Option<Cursor> {
        let log = self.parent_log?;
        let i = self.marks.partition_point(|&(l, _)| l < local);
        match self.marks.get(i) {
            Some(&(l, p)) if l == local => Some(Cursor { log, position: p }),
            _ => None,
        }
    }

    /// Where a child whose view is its parent's log at `parent` (through another replica)
    /// can resume in this log.
    pub fn translate(&self, parent: Cursor) -> Translation {
        if self.parent_log != Some(parent.log) {
            return Translation::Unknown;
        }
        let Some(&(_, last)) = self.marks.back() else {
            return Translation::Unknown;
        };
        if parent.position > last {
            return Translation::Behind;
        }
        let i = self.marks.partition_point(|&(_, p)| p <= parent.position);
        match i.checked_sub(1).and_then(|i| self.marks.get(i)) {
            Some(&(local, _)) => Translation::At(local),
            None => Translation::Unknown,
        }
    }

    /// Forgets the marks below `floor` (deltas from there are no longer sound).
    pub fn forget_below(&mut self, floor: Position) {
        while self.marks.front().is_some_and(|&(l, _)| l < floor) {
            self.marks.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(log: u64, p: u64) -> Cursor {
        Cursor {
            log: LogId(log),
            position: Position(p),
        }
    }

    #[test]
    fn translates_to_the_last_mark_at_or_below_the_parent_cursor() {
        let mut ix = ParentIndex::default();
        ix.record(Position(1), at(9, 10), true);
        assert_eq!(ix.parent_at(Position(1)), None, "disabled records nothing");
        ix.enable();
        ix.record(Position(1), at(9, 10), false);
        ix.record(Position(2), at(9, 14), true);
        ix.record(Position(3), at(9, 20), true);
        assert_eq!(ix.parent_at(Position(2)), Some(at(9, 14)));
        assert_eq!(ix.parent_at(Position(4)), None);
        assert_eq!(ix.translate(at(9, 14)), Translation::At(Position(2)));
        assert_eq!(ix.translate(at(9, 17)), Translation::At(Position(2)));
        assert_eq!(ix.translate(at(9, 20)), Translation::At(Position(3)));
        assert_eq!(ix.translate(at(9, 21)), Translation::Behind);
        assert_eq!(ix.translate(at(9, 9)), Translation::Unknown);
        assert_eq!(ix.translate(at(8, 14)), Translation::Unknown);
        ix.forget_below(Position(3));
        assert_eq!(ix.translate(at(9, 17)), Translation::Unknown);
    }

    #[test]
    fn a_snapshot_or_another_parent_log_starts_over() {
        let mut ix = ParentIndex::default();
        ix.enable();
        ix.record(Position(1), at(9, 10), false);
        ix.record(Position(2), at(9, 14), true);
        ix.record(Position(3), at(9, 30), false);
        assert_eq!(ix.translate(at(9, 14)), Translation::Unknown);
        assert_eq!(ix.translate(at(9, 30)), Translation::At(Position(3)));
        ix.record(Position(4), at(7, 2), true);
        assert_eq!(ix.translate(at(9, 30)), Translation::Unknown);
        assert_eq!(ix.translate(at(7, 2)), Translation::At(Position(4)));
    }
}
