//! What users write, parsed, and nothing else: no runtime, socket, store or clock.
//!
//! * [`objects`]: user manifests (any Kubernetes object) into objects; placements and
//!   cluster specs.
//! * [`patch`]: the Kubernetes API's patch formats.
//! * [`selector`]: label and field selectors of lists and watches.
//! * [`decode`]: percent-decoding of a query value.
//! * [`yaml`]: YAML bodies of Kubernetes objects, read with a nesting limit the stack holds.
//!
//! Everything here takes text or JSON from outside the hierarchy, so everything here is
//! fuzzed (`fuzz/`); keeping it apart from the relay's runtime keeps that build short.

pub mod objects;
pub mod patch;
pub mod selector;
pub mod yaml;

/// Percent-decoding of a query value (selectors carry `=`, `,`, `!`, spaces).
pub fn decode(v: &str) -> String {
    let bytes = v.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'+', _) => out.push(b' '),
            (b'%', Some(b)) => {
                out.push(b);
                i += 2;
            }
            (b, _) => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_query_value_is_percent_decoded_and_a_bad_escape_is_kept() {
        assert_eq!(
            super::decode("app%3Dpos%2Ctier+in+(a)"),
            "app=pos,tier in (a)"
        );
        assert_eq!(super::decode("%zz%4"), "%zz%4");
        assert_eq!(super::decode("%ff"), "\u{fffd}");
    }
}
