//! The topology YAML schema, its validation with precise messages, certificate issuance
//! and per-node configuration rendering.
//!
//! Not built yet (issue 5).
