//! Feeds arbitrary text to the topology loader (YAML, then the compiler that collects
//! every error). Nothing may panic; a refusal lists at least one error.

#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Err(strata_topology::LoadError::Invalid { errors, .. }) =
        strata_topology::parse(text, Path::new("fuzz.yaml"))
    {
        assert!(!errors.is_empty());
    }
});
