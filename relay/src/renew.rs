//! A relay signing its children's certificate renewals (see [`strata_node::renew`]
//! for the child's side).
//!
//! Who signs is per topology: a relay with `renew: { ca_cert, ca_key }` signs with that
//! CA (the hierarchy's CA, given to the relays trusted with it, typically the root;
//! what it signs chains straight to what every node trusts); a relay with a join CA
//! (`join:`) signs with it otherwise (what it signs chains through that intermediate,
//! which only this relay accepts: the same as for agents that joined it, so those renew
//! out of the box). A relay that holds neither answers with a refusal saying so; its
//! children keep their certificates and retry later.
//!
//! The name signed is the name the child is authenticated as on the connection the
//! request came on; a request naming anything else is refused. Every answer is an
//! audit line.

use std::time::Duration;

use strata_protocol::wire::RenewReply;
use strata_topology::certs::Ca;

use crate::config::{JoinFiles, RenewSigning};

/// Why the signing CA could not be loaded.
#[derive(Debug, thiserror::Error)]
#[error("renew: {path}: {reason}")]
pub struct SignerError {
    /// The CA file at fault.
    pub path: std::path::PathBuf,
    /// Why.
    pub reason: String,
}

/// What signs renewals at a relay.
pub struct Signer {
    relay: String,
    ca: Ca,
    lifetime: Duration,
    /// `renew CA` or `join CA`, for the logs.
    which: &'static str,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signer")
            .field("relay", &self.relay)
            .field("which", &self.which)
            .field("lifetime", &self.lifetime)
            .finish_non_exhaustive()
    }
}

impl Signer {
    /// The signer a relay's configuration describes: `renew:`'s CA, else its join CA
    /// (`join`, for `renew.lifetime_s` or else `join.node_days`), else none.
    pub fn load(
        relay: &str,
        renew: Option<&RenewSigning>,
        join: Option<&JoinFiles>,
    ) -> Result<Option<Signer>, SignerError> {
        let lifetime = match (renew, join) {
            (Some(r), _) => r.lifetime,
            (None, Some(j)) => Duration::from_secs(u64::from(j.node_days) * 86_400),
            (None, None) => return Ok(None),
        };
        let load = |cert: &std::path::Path, key: &std::path::Path, joining: bool| {
            let ca = if joining {
                Ca::load_join_ca(cert, key)
            } else {
                Ca::load_signing(cert, key)
            };
            ca.map_err(|e| SignerError {
                path: cert.to_owned(),
                reason: e.to_string(),
            })
        };
        let (ca, which) = match (renew.and_then(|r| r.ca.as_ref()), join) {
            (Some((cert, key)), _) => (load(cert, key, false)?, "renew CA"),
            (None, Some(j)) => (load(&j.ca_cert, &j.ca_key, true)?, "join CA"),
            (None, None) => return Ok(None),
        };
        tracing::info!(
            signer = which,
            lifetime_s = lifetime.as_secs(),
            "signing children's certificate renewals"
        );
        Ok(Some(Signer {
            relay: relay.to_owned(),
            ca,
            lifetime,
            which,
        }))
    }

    /// The certificate (DER) of the CA that signs, when it is an intermediate (a relay's
    /// own): a child renewed by it presents it in its chain, and this relay accepts it
    /// there (see [`crate::join::chain_allowed`]).
    pub fn intermediate_der(&self) -> Option<Vec<u8>> {
        use rustls_pki_types::pem::PemObject;
        if !self.ca.is_intermediate() {
            return None;
        }
        rustls_pki_types::CertificateDer::from_pem_slice(self.ca.cert_pem().as_bytes())
            .ok()
            .map(|c| c.to_vec())
    }

    /// Answers child `node`'s (authenticated) renewal request with a certificate valid
    /// from `now` (Unix seconds, the relay's wall clock), and says so in the audit log.
    pub fn answer(&self, node: &str, csr_pem: &str, now: i64) -> RenewReply {
        match self.ca.renew_for_csr_at(node, csr_pem, self.lifetime, now) {
            Ok(chain_pem) => {
                let expires = strata_topology::certs::pem_not_after(&chain_pem)
                    .map(strata_topology::certs::utc_date)
                    .unwrap_or_default();
                tracing::info!(
                    target: "audit",
                    who = %node,
                    action = "renewal-granted",
                    relay = %self.relay,
                    signer = self.which,
                    %expires,
                    "{} renewed the certificate of {node:?} (valid {} s)",
                    self.relay,
                    self.lifetime.as_secs()
                );
                RenewReply::Granted { chain_pem }
            }
            Err(why) => refuse(&self.relay, node, &why),
        }
    }
}

/// A refusal, logged to the audit trail.
pub fn refuse(relay: &str, node: &str, why: &dyn std::fmt::Display) -> RenewReply {
    let reason = why.to_string();
    tracing::warn!(
        target: "audit",
        who = %node,
        action = "renewal-refused",
        relay = %relay,
        reason = %reason,
        "{relay} refused to renew the certificate of {node:?}: {reason}"
    );
    RenewReply::Refused {
        parent: relay.to_owned(),
        reason,
    }
}

/// The refusal of a relay that holds no signing CA.
pub fn no_signer(relay: &str, node: &str) -> RenewReply {
    refuse(
        relay,
        node,
        &format!(
            "{relay} signs no renewals (give it a `renew:` section with the hierarchy's CA, or renew with `relay topology certs`)"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject;

    #[test]
    fn a_relay_signing_with_its_intermediate_gives_chains_only_it_accepts_besides_the_ca() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let ca = Ca::generate("test").unwrap();
        let write_ca = |relay: &str| {
            let int = ca.issue_join_ca(relay).unwrap();
            let (cert, key) = (
                d.join(format!("{relay}.crt")),
                d.join(format!("{relay}.key")),
            );
            std::fs::write(&cert, int.cert_pem()).unwrap();
            std::fs::write(&key, int.key_pem()).unwrap();
            RenewSigning {
                ca: Some((cert, key)),
                lifetime: Duration::from_secs(3600),
            }
        };
        let (eu, us) = (write_ca("eu"), write_ca("us"));
        let eu = Signer::load("eu", Some(&eu), None).unwrap().unwrap();
        let us = Signer::load("us", Some(&us), None).unwrap().unwrap();
        let (_, csr) = strata_topology::certs::join_request("site-1").unwrap();
        let RenewReply::Granted { chain_pem } = eu.answer("site-1", &csr, 1_800_000_000) else {
            panic!("refused")
        };
        let chain: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(chain_pem.as_bytes())
                .collect::<Result<_, _>>()
                .unwrap();
        assert_eq!(chain.len(), 2, "the leaf, then eu's intermediate");
        let eu_own = crate::join::own_intermediates(None, Some(&eu));
        assert_eq!(eu_own, vec![chain[1].to_vec()]);
        assert!(crate::join::chain_allowed(&chain, &eu_own));
        let us_own = crate::join::own_intermediates(None, Some(&us));
        assert!(!crate::join::chain_allowed(&chain, &us_own));
        // The hierarchy's CA itself is no intermediate: what it signs chains straight.
        let ca_cert = d.join("ca.crt");
        let ca_key = d.join("ca.key");
        std::fs::write(&ca_cert, ca.cert_pem()).unwrap();
        std::fs::write(&ca_key, ca.key_pem()).unwrap();
        let root = RenewSigning {
            ca: Some((ca_cert, ca_key)),
            lifetime: Duration::from_secs(3600),
        };
        let root = Signer::load("center", Some(&root), None).unwrap().unwrap();
        assert_eq!(root.intermediate_der(), None);
    }
}
