//! Feeds arbitrary JSON bodies to the API's patch engines (JSON merge patch, JSON
//! patch, strategic merge patch) over a target taken from the same input. Nothing may
//! panic.

#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use strata_manifest::patch;

fuzz_target!(|data: &[u8]| {
    // The input is `TARGET \0 PATCH`; without a separator, both are the same document.
    let (target, body) = match data.iter().position(|b| *b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, data),
    };
    let target: Value = serde_json::from_slice(target).unwrap_or(Value::Null);
    let Ok(body) = serde_json::from_slice::<Value>(body) else {
        return;
    };
    let mut t = target.clone();
    patch::merge_patch(&mut t, &body);
    let mut t = target.clone();
    let _ = patch::json_patch(&mut t, &body);
    let mut t = target;
    let _ = patch::strategic_merge_patch(&mut t, &body);
});
