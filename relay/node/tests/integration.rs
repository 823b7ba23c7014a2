//! `strata-node`'s integration tests, in one test binary (linking one per file cost
//! minutes of every build). Run one module with a filter, e.g. `cargo test -p
//! strata-node --test integration store_crash::`. The etcd cluster its etcd store tests
//! run against is `strata_test_tools::etcd_cluster`, shared with the system tests.

// Tests may unwrap, and the etcd helpers wait on threads.
#![allow(clippy::unwrap_used, clippy::disallowed_methods)]

mod etcd_store;
mod signals;
mod store;
mod store_crash;
mod store_format;
mod tcp;
mod transport;
