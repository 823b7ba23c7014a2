//! Issuing the hierarchy's certificates: the CA and node certificates live in
//! [`strata_topology::certs`] (the topology issues them); re-exported here for the
//! relay's users (tests, the fanout example).

pub use strata_topology::certs::{Ca, CertError, NodeCert, join_request, write, write_secret};
