//! Feeds arbitrary text to the manifest parser behind `relay apply` and the API's
//! apply and delete bodies, then the placement and cluster parsers. Nothing may panic;
//! what parses has a name and a kind.

#![no_main]

use libfuzzer_sys::fuzz_target;
use strata_protocol::model::{Revision, Space};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(manifests) = strata_manifest::objects::parse_manifests(text, &Space::default_space()) {
        for m in &manifests {
            assert!(!m.meta.key.name.is_empty() && !m.meta.key.kind.is_empty());
            // What the root parses further: placements and cluster specs.
            let object = strata_manifest::objects::to_object(m, Revision(1));
            if strata_protocol::route::is_placement(&m.meta) {
                let _ = strata_manifest::objects::parse_placement(&object);
            }
            let _ = strata_manifest::objects::cluster_spec(&m.value);
        }
    }
});
