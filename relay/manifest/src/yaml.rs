//! YAML text of Kubernetes objects (manifests, API bodies), read into JSON values.
//!
//! The nesting limit is what keeps a hostile body from overflowing the stack of the
//! thread that reads it: the YAML reader recurses once per level, in frames of some
//! 20 KiB in an unoptimized build (with the limit raised to 128, it overflowed a test
//! thread's 2 MiB at 100 levels).
//! serde-saphyr's budget stops at 64 levels, with an error that names the depth; a
//! custom resource definition's schema with a pod template in it nests some 30 levels
//! deep. JSON bodies may nest 128 levels (serde_json's limit), whose frames are smaller.

use serde::de::DeserializeOwned;

/// How deep a YAML object may nest.
pub const MAX_DEPTH: usize = 64;

fn options() -> serde_saphyr::Options {
    let mut budget = serde_saphyr::Budget::default();
    budget.max_depth = MAX_DEPTH;
    let mut options = serde_saphyr::Options::default();
    options.budget = Some(budget);
    // Comments are never read back from a value: do not collect them.
    options.emit_comments = false;
    options
}

/// One YAML document.
pub fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, serde_saphyr::Error> {
    serde_saphyr::from_str_with_options(text, options())
}

/// Every document of a multi-document YAML text (`---` between them).
pub fn from_multiple<T: DeserializeOwned>(text: &str) -> Result<Vec<T>, serde_saphyr::Error> {
    serde_saphyr::from_multiple_with_options(text, options())
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    /// `{"a": {"a": ... {"a": 1}}}`, `levels` mappings deep, as block YAML.
    fn nested(levels: usize) -> String {
        let mut text = String::new();
        for level in 0..levels {
            text.push_str(&"  ".repeat(level));
            text.push_str("a:");
            text.push_str(if level + 1 == levels { " 1\n" } else { "\n" });
        }
        text
    }

    #[test]
    fn objects_nest_to_the_limit_and_deeper_ones_are_refused_without_a_crash() {
        let v: Value = from_str(&nested(MAX_DEPTH)).unwrap();
        assert_eq!(v.pointer(&"/a".repeat(MAX_DEPTH)), Some(&Value::from(1)));
        let docs: Vec<Value> =
            from_multiple(&format!("{}---\n{}", nested(MAX_DEPTH), nested(3))).unwrap();
        assert_eq!(docs.len(), 2);
        // On this test thread's 2 MiB stack, 100 levels overflowed with the limit at 128.
        for levels in [MAX_DEPTH + 1, 1_000] {
            let e = from_str::<Value>(&nested(levels)).unwrap_err();
            assert!(e.to_string().contains("depth"), "{levels} levels: {e}");
            let e = from_multiple::<Value>(&nested(levels)).unwrap_err();
            assert!(e.to_string().contains("depth"), "{levels} levels: {e}");
        }
    }
}
