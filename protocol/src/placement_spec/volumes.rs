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

/// `maxLagSeconds` when an entry gives none: how far a ReadWriteMany replica may lag
/// behind its primary.
pub const DEFAULT_MAX_LAG_SECONDS: u64 = 30;

/// One entry of `spec.moveVolumes` as written: a claim, and for a ReadWriteMany claim
/// the bound on its replicas' lag. Checked into a [`MoveVolume`] by
/// [`validate_volumes`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct MoveVolumeSpec {
    /// The claim's name.
    pub claim: String,
    /// The claim's namespace.
    pub namespace: String,
    /// A replica of a ReadWriteMany claim holds every write acknowledged on the
    /// primary at most this long ago (default [`DEFAULT_MAX_LAG_SECONDS`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_lag_seconds: Option<i64>,
}

/// One checked entry of `spec.moveVolumes`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct MoveVolume {
    /// The claim.
    pub claim: VolumeClaim,
    /// The bound on a ReadWriteMany replica's lag, in seconds (more than 0).
    pub max_lag_seconds: u64,
}

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
/// no claim twice, at most [`MAX_MOVE_VOLUMES`], every claim one the placement
/// itself delivers (else the new cluster would have no claim to restore into), and
/// `maxLagSeconds` more than 0. Gives the checked entries, or the faulty field
/// (relative to `spec.moveVolumes`) and why.
pub fn validate_volumes(
    specs: &[MoveVolumeSpec],
    objects: &[ObjectSelector],
) -> Result<Vec<MoveVolume>, (String, String)> {
    let volumes: Vec<VolumeClaim> = specs
        .iter()
        .map(|s| VolumeClaim {
            claim: s.claim.clone(),
            namespace: s.namespace.clone(),
        })
        .collect();
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
    let mut out = Vec::with_capacity(specs.len());
    for (i, (s, claim)) in specs.iter().zip(volumes).enumerate() {
        let max_lag_seconds = match s.max_lag_seconds {
            None => DEFAULT_MAX_LAG_SECONDS,
            Some(n) if n > 0 => n.unsigned_abs(),
            Some(n) => {
                return Err((
                    format!("[{i}].maxLagSeconds"),
                    format!(
                        "{n} is not a bound on a replica's lag: it must be more than 0 seconds (default {DEFAULT_MAX_LAG_SECONDS})"
                    ),
                ));
            }
        };
        out.push(MoveVolume {
            claim,
            max_lag_seconds,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(ns: &str, name: &str) -> MoveVolumeSpec {
        MoveVolumeSpec {
            claim: name.into(),
            namespace: ns.into(),
            max_lag_seconds: None,
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
        let checked = validate_volumes(&ok, &objects(&["Deployment", CLAIM_KIND])).unwrap();
        assert_eq!(checked[1].claim.claim, "data.v2");
        assert_eq!(checked[0].max_lag_seconds, DEFAULT_MAX_LAG_SECONDS);
        assert!(validate_volumes(&ok, &objects(&[])).is_ok());
    }

    #[test]
    fn each_fault_names_its_field() {
        let objs = objects(&[CLAIM_KIND]);
        let bad = |v: &[MoveVolumeSpec]| validate_volumes(v, &objs).unwrap_err();
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

    #[test]
    fn the_lag_bound_must_be_more_than_zero() {
        let objs = objects(&[CLAIM_KIND]);
        let with = |lag: i64| {
            let mut c = claim("shop", "d");
            c.max_lag_seconds = Some(lag);
            validate_volumes(&[claim("shop", "e"), c], &objs)
        };
        assert_eq!(with(5).unwrap()[1].max_lag_seconds, 5);
        for lag in [0, -3] {
            let (field, why) = with(lag).unwrap_err();
            assert_eq!(field, "[1].maxLagSeconds");
            assert!(why.contains("must be more than 0"), "{why}");
        }
    }
}
