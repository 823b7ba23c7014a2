//! Placements: which objects of a space go to which clusters. The types are part of
//! the placement spec ([`crate::placement_spec`]) and are re-exported here.

pub use crate::placement_spec::{
    ClusterSelector, DEFAULT_MOVE_TIMEOUT, MovePolicy, MoveStrategy, ObjectSelector, Placement,
    UpsyncSelector,
};
