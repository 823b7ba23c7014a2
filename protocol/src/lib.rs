//! Strata's protocol core: pure, deterministic, and free of I/O.
//!
//! Nothing in this crate reads a clock, touches a socket or a disk, or draws random
//! numbers. Every state machine takes `now` and inputs as arguments and hands back
//! outputs; the relay, the agent and the simulator drive the same code.
//!
//! # Layout
//!
//! * [`time`]: the [`time::Instant`] drivers pass in, and wall-clock stamps for reports.
//! * [`model`]: spaces, object keys, objects, revisions, clusters, health and status.
//! * [`selector`]: Kubernetes label selectors with Kubernetes' exact semantics.
//! * [`placement_spec`]: the placement spec (what a Placement says: its selectors, rollout,
//!   customize rules, tolerations) and the names of Strata's own objects; below every
//!   algorithm that reads it.
//! * [`placement`]: which objects go to which clusters.
//! * [`choice`]: choosing clusters (count, spread, preference, taints, capacity) and
//!   the decision relays route by.
//! * [`rollout`]: a placement's rollout (waves, gate, on failure) and its state machine.
//! * [`waves`]: the wave planner, and pinned copies of the previous revision.
//! * [`customize`]: per-cluster customization rules and their pure rendering.
//! * [`user_summary`]: the summaries a placement's `statusSummary` asks for.
//! * [`overrides`]: cluster labels changed at the root, per space.
//! * [`route`]: a child's routing predicate from placements and its subtree's clusters.
//! * [`summary`]: the mergeable status summary (associative, commutative, with identity).
//! * [`wire`]: messages by direction ([`wire::ChildToParent`], [`wire::ParentToChild`]).
//! * [`codec`]: length-prefixed frames; the only place that knows the byte encoding.
//! * [`tunnel`]: the header of a debug tunnel stream (a user's request to a cluster's API).
//! * [`volume`]: volume moves on the wire: a volume stream's header and frames.
//! * [`sync`]: the sans-I/O state machines of one parent/child connection.

pub mod choice;
pub mod codec;
pub mod customize;
pub mod model;
pub mod overrides;
pub mod placement;
pub mod placement_spec;
pub mod rollout;
pub mod route;
pub mod selector;
pub mod summary;
pub mod sync;
pub mod time;
pub mod tunnel;
pub mod user_summary;
pub mod volume;
pub mod waves;
pub mod wire;
