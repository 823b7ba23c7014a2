//! `spec.moveVolumes`: the PersistentVolumeClaims whose data follows a placement when it
//! moves to other clusters. Each names a claim and its namespace; how the data moves
//! (two phases for ReadWriteOnce, replication for ReadWriteMany) comes from the claim's
//! own `spec.accessModes`, read when the move starts ([`crate::volume::AccessMode`]).

use serde::{Deserialize, Serialize};

use super::ObjectSelector;

/// At most this many claims follow one placement.
pub const MAX_MOVE_VOLUMES: usize = 32;

/// The kind a claim's manifest has.
pub const CLAIM_KIND: &str = "PersistentVolumeClaim";

/// One PersistentVolumeClaim whose data follows the placement.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VolumeClaim {
    /// The claim's name (`metadata.name` of the PersistentVolumeClaim).
    pub claim: String,
    /// The claim's namespace.
    pub namespace: String,
}

/// Whether `s` is a DNS-1123 label (a namespace's name): 1 to 63 lowercase letters,
/// digits and `-`, starting and ending with a letter or digit.
fn dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// Whether `s` is a DNS-1123 subdomain (a claim's name): dot-separated labels, 253
/// bytes at most.
fn dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(dns_label)
}

/// Checks `spec.moveVolumes` against the placement's `spec.objects`: names well formed,
/// no claim twice, at most [`MAX_MOVE_VOLUMES`], and every claim one the placement
/// itself delivers (else the new cluster would have no claim to restore into). Gives
/// the faulty field (relative to `spec.moveVolumes`) and why.
pub fn validate_volumes(
    volumes: &[VolumeClaim],
    objects: &[ObjectSelector],
) -> Result<(), (String, String)> {
    if volumes.len() > MAX_MOVE_VOLUMES {
        return Err((
            String::new(),
            format!(
                "{} claims; at most {MAX_MOVE_VOLUMES} may follow one placement",
                volumes.len()
            ),
        ));
    }
    for (i, v) in volumes.iter().enumerate() {
        if !dns_subdomain(&v.claim) {
            return Err((
                format!("[{i}].claim"),
                format!(
                    "{:?} is not a valid claim name (lowercase letters, digits, '-' and '.')",
                    v.claim
                ),
            ));
        }
        if !dns_label(&v.namespace) {
            return Err((
                format!("[{i}].namespace"),
                format!(
                    "{:?} is not a valid namespace (lowercase letters, digits and '-')",
                    v.namespace
                ),
            ));
        }
        if volumes[..i].contains(v) {
            return Err((
                format!("[{i}]"),
                format!("claim {}/{} is named twice", v.namespace, v.claim),
            ));
        }
        let delivered = objects.iter().any(|o| {
            (o.kinds.is_empty() || o.kinds.iter().any(|k| k == CLAIM_KIND))
                && (o.namespaces.is_empty() || o.namespaces.contains(&v.namespace))
                && (o.names.is_empty() || o.names.contains(&v.claim))
        });
        if !delivered {
            return Err((
                format!("[{i}]"),
                format!(
                    "claim {}/{} is not among the objects this placement delivers (spec.objects must select the PersistentVolumeClaim too, so that the new cluster has a claim to restore into)",
                    v.namespace, v.claim
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(ns: &str, name: &str) -> VolumeClaim {
        VolumeClaim {
            claim: name.into(),
            namespace: ns.into(),
        }
    }

    fn objects(kinds: &[&str]) -> Vec<ObjectSelector> {
        vec![ObjectSelector {
            kinds: kinds.iter().map(|k| (*k).to_owned()).collect(),
            namespaces: vec!["shop".into()],
            ..ObjectSelector::default()
        }]
    }

    #[test]
    fn good_claims_pass() {
        let ok = [claim("shop", "data"), claim("shop", "data.v2")];
        assert_eq!(
            validate_volumes(&ok, &objects(&["Deployment", CLAIM_KIND])),
            Ok(())
        );
        assert_eq!(validate_volumes(&ok, &objects(&[])), Ok(()));
    }

    #[test]
    fn each_fault_names_its_field() {
        let objs = objects(&[CLAIM_KIND]);
        let bad = |v: &[VolumeClaim]| validate_volumes(v, &objs).unwrap_err();
        assert_eq!(bad(&[claim("shop", "Data")]).0, "[0].claim");
        assert_eq!(
            bad(&[claim("shop", "d"), claim("-x", "d")]).0,
            "[1].namespace"
        );
        let twice = bad(&[claim("shop", "d"), claim("shop", "d")]);
        assert_eq!(twice, ("[1]".into(), "claim shop/d is named twice".into()));
        let (field, why) =
            validate_volumes(&[claim("shop", "d")], &objects(&["Deployment"])).unwrap_err();
        assert_eq!(field, "[0]");
        assert!(why.contains("not among the objects"), "{why}");
        let other_ns = validate_volumes(&[claim("web", "d")], &objs).unwrap_err();
        assert!(other_ns.1.contains("web/d"), "{other_ns:?}");
    }
}
