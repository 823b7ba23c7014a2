//! The debug tunnel's stream header: what a parent writes first on a stream it opens
//! toward a child to carry one user's Kubernetes request down to a cluster. After the
//! header the stream carries raw HTTP/1.1 bytes in both directions (and, after a `101
//! Switching Protocols`, whatever the upgraded protocol sends). Framed like every other
//! message ([`crate::codec`]).

use serde::{Deserialize, Serialize};

/// Largest header a node accepts (a cluster name, a user name and an id fit easily).
pub const MAX_TUNNEL_HEADER: usize = 4096;

/// The first frame of a tunnel stream, written by the parent that opens it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TunnelOpen {
    /// The cluster the request is for; each relay forwards the stream only toward the
    /// child whose subtree holds it, and the agent only serves its own cluster.
    pub cluster: String,
    /// The request's id, assigned by the root, for the logs of every tier.
    pub request: u64,
    /// Who asked, as the root authenticated them (for the logs of every tier).
    pub user: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec;

    #[test]
    fn the_header_round_trips_and_truncation_is_incomplete() {
        let open = TunnelOpen {
            cluster: "store-0917-pos".into(),
            request: 7,
            user: "alice".into(),
        };
        let mut buf = Vec::new();
        codec::encode(&open, MAX_TUNNEL_HEADER, &mut buf).unwrap();
        let (back, used) = codec::decode::<TunnelOpen>(&buf, MAX_TUNNEL_HEADER)
            .unwrap()
            .unwrap();
        assert_eq!((back, used), (open, buf.len()));
        assert!(
            codec::decode::<TunnelOpen>(&buf[..buf.len() - 1], MAX_TUNNEL_HEADER)
                .unwrap()
                .is_none()
        );
    }
}
