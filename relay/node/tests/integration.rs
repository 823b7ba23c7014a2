//! `strata-node`'s integration tests, in one test binary (linking one per file cost
//! minutes of every build). Run one module with a filter, e.g. `cargo test -p
//! strata-node --test integration store_crash::`.

// Tests may unwrap, and the etcd helpers wait on threads.
#![allow(clippy::unwrap_used, clippy::disallowed_methods)]

mod etcd_cluster;

mod etcd_store;
mod signals;
mod store;
mod store_crash;
mod store_format;
mod tcp;
mod transport;
