//! The user a client certificate names, as kube-apiserver reads it: the subject's
//! common name (CN) is the user, its organizations (O) are the groups.

use super::Subject;

/// Why a client certificate names no user.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CertUserError {
    /// Not a DER certificate (rustls verified it already, so this is unexpected).
    #[error("the client certificate does not parse: {0}")]
    Parse(String),
    /// The subject has no common name.
    #[error("the client certificate's subject has no common name (CN), which names the user")]
    NoCommonName,
}

/// The user (CN) and groups (O, in order) of a DER certificate.
pub fn subject(der: &[u8]) -> Result<Subject, CertUserError> {
    let (_, cert) = x509_parser::parse_x509_certificate(der)
        .map_err(|e| CertUserError::Parse(e.to_string()))?;
    let name = cert.subject();
    let user = name
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
        .filter(|cn| !cn.is_empty())
        .ok_or(CertUserError::NoCommonName)?
        .to_owned();
    let groups = name
        .iter_organization()
        .filter_map(|o| o.as_str().ok())
        .map(str::to_owned)
        .collect();
    Ok(Subject { user, groups })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn the_common_name_is_the_user_and_organizations_the_groups() {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "alice");
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "ops");
        let cert = params.self_signed(&key).unwrap();
        let s = subject(cert.der()).unwrap();
        assert_eq!(
            (s.user.as_str(), s.groups),
            ("alice", vec!["ops".to_owned()])
        );

        let params = rcgen::CertificateParams::new(vec!["x".to_owned()]).unwrap();
        let mut params = params;
        params.distinguished_name = rcgen::DistinguishedName::new();
        let cert = params.self_signed(&key).unwrap();
        assert_eq!(subject(cert.der()), Err(CertUserError::NoCommonName));
    }
}
