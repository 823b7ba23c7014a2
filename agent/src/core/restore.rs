//! Booting an agent's core from what its store holds ([`AgentCore::restore`]): the one
//! way the runtime (`runtime::start`) and the system tests' `Tree` start one, so that a
//! restart after a crash takes the same path as the first start (on an empty store).

use strata_node::store::Stored;
use strata_protocol::model::{Cluster, LogId};
use strata_protocol::sync::{LinkConfig, ObjectLog, ParentLink};
use strata_protocol::time::{Instant, UnixMillis};
use strata_protocol::wire::{ProtocolVersion, Role};

use super::{AgentCore, AgentSetup};
use crate::backend::ClusterBackend;

/// What an agent's core boots with besides its store.
pub struct AgentBootOptions {
    /// The cluster it manages.
    pub cluster: Cluster,
    /// The cluster's backend.
    pub backend: Box<dyn ClusterBackend + Send>,
    /// This run's id (as in the hello to the parent).
    pub run: u64,
    /// The protocol versions (lowest, highest) it speaks to its parent.
    pub versions: (ProtocolVersion, ProtocolVersion),
}

impl AgentCore {
    /// An agent from what its store holds (nothing at the first start): its desired
    /// state and its position in the parent's log. Everything it held is applied again
    /// at once (see [`AgentCore::new`]).
    pub fn restore(
        now: Instant,
        at: UnixMillis,
        stored: Stored,
        options: AgentBootOptions,
    ) -> AgentCore {
        let log = match stored.log_meta {
            Some(meta) => ObjectLog::restore(meta, stored.entries),
            None => ObjectLog::new(LogId(stored.node_id)),
        };
        let parent_state = stored.parent.unwrap_or_default();
        let mut config = LinkConfig::new(options.cluster.name.clone(), Role::Agent);
        config.run = options.run;
        config.versions = options.versions;
        let link = ParentLink::new(now, config, parent_state.cursor, parent_state.route);
        AgentCore::new(
            now,
            at,
            AgentSetup {
                cluster: options.cluster,
                link,
                log,
                parent_state,
                backend: options.backend,
                run: options.run,
            },
        )
    }
}
