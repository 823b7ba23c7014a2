//! When certificates expire: their `notAfter`, the wall clock and dates they are told
//! by, and which of a hierarchy's certificates expire soon.

use std::path::PathBuf;

/// When a certificate (DER) stops being valid: its `notAfter`, in seconds since the Unix
/// epoch; `None` when it does not parse.
pub fn not_after(der: &[u8]) -> Option<i64> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    Some(cert.validity().not_after.timestamp())
}

/// The `notAfter` of the first certificate of a PEM file (a chain's leaf), in seconds
/// since the Unix epoch; `None` when it holds none that parses.
pub fn pem_not_after(pem: &str) -> Option<i64> {
    let (_, block) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).ok()?;
    not_after(&block.contents)
}

/// The wall clock, in seconds since the Unix epoch: certificates are dated by it (this
/// crate issues certificates; it never runs inside the simulation).
pub fn unix_now() -> i64 {
    time::OffsetDateTime::now_utc().unix_timestamp()
}

/// A date (UTC, `2027-11-24`) from seconds since the Unix epoch.
pub fn utc_date(secs: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp(secs)
        .map(|t| t.date().to_string())
        .unwrap_or_else(|_| format!("@{secs}"))
}

/// A certificate that expires soon (or has).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expiring {
    /// The certificate file.
    pub path: PathBuf,
    /// Its `notAfter`, seconds since the Unix epoch.
    pub not_after: i64,
    /// Whole days left at `now` (negative: expired that many days ago).
    pub days_left: i64,
}

/// The certificates among `files` (`.crt` files issued by
/// [`issue_all`](super::issue_all); others are ignored) that expire within
/// `within_days` of `now` (seconds since the Unix epoch), soonest first.
pub fn expiring(files: &[PathBuf], now: i64, within_days: u32) -> Vec<Expiring> {
    let horizon = now + i64::from(within_days) * 86_400;
    let mut out: Vec<Expiring> = files
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "crt"))
        .filter_map(|p| {
            let pem = std::fs::read_to_string(p).ok()?;
            let not_after = pem_not_after(&pem)?;
            (not_after <= horizon).then(|| Expiring {
                path: p.clone(),
                not_after,
                days_left: (not_after - now).div_euclid(86_400),
            })
        })
        .collect();
    out.sort_by_key(|e| e.not_after);
    out
}
