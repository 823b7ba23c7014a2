//! Booting a relay's core from what its store holds ([`NodeCore::restore`]): the one
//! way the runtime (`tier::runtime::start`) and the system tests' `Tree` start one, so
//! that a restart after a crash takes the same path as the first start (on an empty
//! store).

use std::time::Duration;

use strata_node::store::Stored;
use strata_protocol::model::Labels;
use strata_protocol::sync::{LinkConfig, ObjectLog, ParentLink, SessionConfig};
use strata_protocol::time::{Instant, UnixMillis};
use strata_protocol::wire::Role;

use super::{CoreSetup, NodeCore, new_log};
use crate::tier::reports::SubtreeReports;

/// What a relay's core boots with besides its store: its configuration and this run's.
#[derive(Debug, Clone)]
pub struct BootOptions {
    /// Node name.
    pub name: String,
    /// Labels clusters below inherit.
    pub labels: Labels,
    /// Children allowed to connect (agents admitted by join token are added from the
    /// store).
    pub children: Vec<String>,
    /// Session tuning; its protocol versions are also the ones spoken to the parent.
    pub sessions: SessionConfig,
    /// Whether the node has a parent (`false` at the root): the link to it is made here.
    pub has_parent: bool,
    /// This process's replica id when it is one replica of a replicated relay tier: it
    /// then remembers what its log's positions stand for in its parent's log.
    pub replica: Option<String>,
    /// This run's id (as in the hello to the parent).
    pub run: u64,
    /// How often summaries go upward.
    pub summary_interval: Duration,
    /// The wall-clock time at the origin of the instants the core is given.
    pub wall_origin: UnixMillis,
    /// See [`CoreSetup::watch_history`].
    pub watch_history: u64,
    /// See [`CoreSetup::standby`].
    pub standby: bool,
    /// See [`CoreSetup::admission_hold`].
    pub admission_hold: Duration,
}

impl NodeCore {
    /// A core from what its store holds (nothing at the first start): the log (serving
    /// at once at the root), the children's acks, runs and reports, the position in the
    /// parent's log, and the agents admitted by join token (children like the
    /// configured ones).
    pub fn restore(now: Instant, stored: Stored, options: BootOptions) -> NodeCore {
        let root = !options.has_parent;
        let mut log = match stored.log_meta {
            Some(meta) => {
                let mut log = ObjectLog::restore(meta, stored.entries);
                if root {
                    log.mark_serving();
                }
                log
            }
            None => new_log(stored.node_id, root),
        };
        // A replica of a replicated tier remembers what its positions stand for in its
        // parent's log, so that children can move to it from another replica with a
        // delta.
        if options.replica.is_some() {
            log.parent_index_mut().enable();
        }
        let parent_state = stored.parent.unwrap_or_default();
        let parent_link = options.has_parent.then(|| {
            let mut config = LinkConfig::new(options.name.clone(), Role::Relay);
            config.run = options.run;
            config.replica = options.replica.clone();
            // One process speaks one range of versions, to its parent and its children.
            config.versions = options.sessions.versions;
            ParentLink::new(now, config, parent_state.cursor, parent_state.route)
        });
        let mut children = options.children;
        children.extend(stored.joined.into_values());
        NodeCore::new(
            now,
            CoreSetup {
                name: options.name,
                labels: options.labels,
                children,
                sessions: options.sessions,
                log,
                reports: SubtreeReports::restore(stored.reports),
                acked: stored.child_acks,
                child_runs: stored.child_runs,
                parent_link,
                parent_state,
                summary_interval: options.summary_interval,
                run: options.run,
                wall_origin: options.wall_origin,
                watch_history: options.watch_history,
                standby: options.standby,
                admission_hold: options.admission_hold,
            },
        )
    }
}
