//! Strata's system tests. This library is empty: the suite is the test binary
//! `tests/system.rs` (`cargo test -p strata-system-tests --test system`), which names
//! its modules and the fixtures they share.
