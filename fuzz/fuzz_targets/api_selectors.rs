//! Feeds arbitrary text to the API's label and field selector parsers (query
//! parameters of lists and watches). Nothing may panic; a parsed selector evaluates.

#![no_main]

use libfuzzer_sys::fuzz_target;
use strata_manifest::selector::{FieldQuery, LabelQuery};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let labels = [("app".to_owned(), "pos".to_owned())].into_iter().collect();
    if let Ok(q) = LabelQuery::parse(text) {
        let _ = q.matches(&labels);
    }
    let _ = FieldQuery::parse(text);
    let _ = strata_manifest::decode(text);
});
