//! The JSON forms of Kubernetes' special time types: `metav1.Time` and `MicroTime` as
//! RFC 3339, and `Duration` as Go prints it.

use serde_json::Value;
use strata_protocol::time::civil_from_days;

use super::error::DecodeError;
use super::wire::{Reader, Wire};

/// `metav1.Time` (seconds; kube-apiserver drops the nanoseconds) and `MicroTime`
/// (microseconds), in UTC, as RFC 3339; the zero time (an empty message) is `null`.
pub(super) fn time(buf: &[u8], at: usize, path: &str, micro: bool) -> Result<Value, DecodeError> {
    if buf.is_empty() {
        return Ok(Value::Null);
    }
    let (mut secs, mut nanos) = (0i64, 0i64);
    let mut r = Reader::new(buf, at, path);
    while let Some((n, _, f)) = r.next()? {
        match (n, f) {
            (1, Wire::Varint(v)) => secs = v as i64,
            (2, Wire::Varint(v)) => nanos = i64::from(v as i32),
            _ => {}
        }
    }
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, mo, d) = civil_from_days(days);
    let (h, mi, s) = (rem / 3600, rem % 3600 / 60, rem % 60);
    Ok(Value::String(if micro {
        let us = nanos.clamp(0, 999_999_999) / 1000;
        format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{us:06}Z")
    } else {
        format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z")
    }))
}

/// Go's `time.Duration.String()`: `1h2m3.5s`, `1.5ms`, `0s`.
pub(super) fn go_duration(nanos: i64) -> String {
    if nanos == 0 {
        return "0s".into();
    }
    let neg = nanos < 0;
    let u = nanos.unsigned_abs();
    let frac = |v: u64, unit: u64, digits: usize| {
        let whole = v / unit;
        let f = v % unit;
        if f == 0 {
            whole.to_string()
        } else {
            let s = format!("{f:0digits$}");
            format!("{whole}.{}", s.trim_end_matches('0'))
        }
    };
    let body = if u < 1_000 {
        format!("{u}ns")
    } else if u < 1_000_000 {
        format!("{}µs", frac(u, 1_000, 3))
    } else if u < 1_000_000_000 {
        format!("{}ms", frac(u, 1_000_000, 6))
    } else {
        let secs = u / 1_000_000_000;
        let sub = u % 1_000_000_000;
        let (h, m, s) = (secs / 3600, secs % 3600 / 60, secs % 60);
        let s = frac(s * 1_000_000_000 + sub, 1_000_000_000, 9);
        if h > 0 {
            format!("{h}h{m}m{s}s")
        } else if m > 0 {
            format!("{m}m{s}s")
        } else {
            format!("{s}s")
        }
    };
    if neg { format!("-{body}") } else { body }
}
