//! Renewal: a parent signs a new certificate for a child's new key (a certificate
//! signing request sent over the child's authenticated link), and the child checks
//! what it got before it replaces its files.
//!
//! The name a renewed certificate carries is always the name the child is
//! authenticated as; a request naming anything else is refused
//! ([`Ca::renew_for_csr`]).

use std::time::Duration;

use rcgen::{ExtendedKeyUsagePurpose, KeyPair, KeyUsagePurpose, SanType};

use super::{Ca, CertError, named};

/// Why a renewal request was refused (the parent says this to the child and in its
/// audit log).
#[derive(Debug, thiserror::Error)]
pub enum RenewRefusal {
    /// The request asks for a name other than the one the child is authenticated as.
    #[error("the request names {asked:?} but the connection is authenticated as {node:?}")]
    WrongName {
        /// The authenticated name.
        node: String,
        /// What the request names.
        asked: String,
    },
    /// The request does not parse or cannot be signed.
    #[error("unusable certificate signing request: {0}")]
    Bad(#[from] CertError),
}

impl Ca {
    /// Signs a renewal for `node` (the name the child is authenticated as) for the key
    /// of `csr_pem`, valid for `lifetime`. The request must name `node` and nothing
    /// else (its DNS names and common name). Returns the chain (PEM).
    pub fn renew_for_csr(
        &self,
        node: &str,
        csr_pem: &str,
        lifetime: Duration,
    ) -> Result<String, RenewRefusal> {
        self.renew_for_csr_at(node, csr_pem, lifetime, super::unix_now())
    }

    /// [`Ca::renew_for_csr`], valid from `now` (Unix seconds, the signer's clock)
    /// rather than the system's clock.
    pub fn renew_for_csr_at(
        &self,
        node: &str,
        csr_pem: &str,
        lifetime: Duration,
        now: i64,
    ) -> Result<String, RenewRefusal> {
        let mut csr = rcgen::CertificateSigningRequestParams::from_pem(csr_pem)
            .map_err(|e| RenewRefusal::Bad(e.into()))?;
        for san in &csr.params.subject_alt_names {
            let asked = match san {
                SanType::DnsName(n) => n.as_str().to_owned(),
                other => format!("{other:?}"),
            };
            if asked != node {
                return Err(RenewRefusal::WrongName {
                    node: node.to_owned(),
                    asked,
                });
            }
        }
        if let Some(cn) = csr
            .params
            .distinguished_name
            .get(&rcgen::DnType::CommonName)
        {
            let asked = dn_text(cn).unwrap_or_else(|| format!("{cn:?}"));
            if asked != node {
                return Err(RenewRefusal::WrongName {
                    node: node.to_owned(),
                    asked,
                });
            }
        }
        let mut params = named(node, node.to_owned(), vec![node.to_owned()])?;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        valid_for_secs(&mut params, lifetime.as_secs().max(1), now);
        csr.params = params;
        let cert = csr
            .signed_by(&self.cert, &self.key)
            .map_err(|e| RenewRefusal::Bad(e.into()))?;
        Ok(format!("{}{}", cert.pem(), self.chain))
    }
}

fn dn_text(v: &rcgen::DnValue) -> Option<String> {
    match v {
        rcgen::DnValue::Utf8String(s) => Some(s.clone()),
        rcgen::DnValue::PrintableString(s) => Some(s.as_str().to_owned()),
        rcgen::DnValue::Ia5String(s) => Some(s.as_str().to_owned()),
        _ => None,
    }
}

/// Sets a certificate's validity: from a little before now (a quarter of the lifetime,
/// at most an hour: clocks disagree a little) until `secs` from now (`now`, Unix
/// seconds).
pub(super) fn valid_for_secs(params: &mut rcgen::CertificateParams, secs: u64, now: i64) {
    let now =
        time::OffsetDateTime::from_unix_timestamp(now).unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    let secs = i64::try_from(secs).unwrap_or(i64::MAX / 2);
    params.not_before = now - time::Duration::seconds((secs / 4).min(3600));
    params.not_after = now + time::Duration::seconds(secs);
}

/// The validity of the first certificate of a PEM chain (its leaf): (`notBefore`,
/// `notAfter`) in seconds since the Unix epoch; `None` when it holds none that parses.
pub fn pem_validity(pem: &str) -> Option<(i64, i64)> {
    let (_, block) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).ok()?;
    let (_, cert) = x509_parser::parse_x509_certificate(&block.contents).ok()?;
    let v = cert.validity();
    Some((v.not_before.timestamp(), v.not_after.timestamp()))
}

/// Whether the leaf of a PEM chain certifies the key of `key_pem` (same public key).
pub fn chain_matches_key(chain_pem: &str, key_pem: &str) -> bool {
    let Ok(key) = KeyPair::from_pem(key_pem) else {
        return false;
    };
    let Ok((_, block)) = x509_parser::pem::parse_x509_pem(chain_pem.as_bytes()) else {
        return false;
    };
    let Ok((_, cert)) = x509_parser::parse_x509_certificate(&block.contents) else {
        return false;
    };
    cert.public_key().raw == key.public_key_der().as_slice()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::certs::join_request;

    #[test]
    fn a_renewal_carries_the_authenticated_name_and_the_requested_key() {
        let ca = Ca::generate("test").unwrap();
        let (key, csr) = join_request("site-1").unwrap();
        let chain = ca
            .renew_for_csr("site-1", &csr, Duration::from_secs(30))
            .unwrap();
        assert!(chain_matches_key(&chain, &key));
        let (other_key, _) = join_request("site-1").unwrap();
        assert!(!chain_matches_key(&chain, &other_key));
        let (from, to) = pem_validity(&chain).unwrap();
        assert!(to - from <= 30 + 8, "{from}..{to}");
        let err = ca
            .renew_for_csr("site-2", &csr, Duration::from_secs(30))
            .unwrap_err();
        assert!(matches!(err, RenewRefusal::WrongName { .. }), "{err}");
        assert_eq!(
            err.to_string(),
            "the request names \"site-1\" but the connection is authenticated as \"site-2\""
        );
    }
}
