//! What bounds joining: each token's rule (how many uses, until when), and the rate of
//! join attempts (connections without a certificate) per source address and overall.
//! An attempt over the rate is refused before it costs a signature or a store write,
//! so a relay under a flood of bogus joins keeps serving its admitted children.

use std::collections::BTreeMap;
use std::net::IpAddr;

use tokio::time::Instant;

/// One token's rule, from its line in the tokens file:
/// `TOKEN [uses=N] [expires=YYYY-MM-DD|expires=UNIX_SECONDS] [recover=NAME]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenRule {
    /// How many agents may join with it.
    pub uses: u32,
    /// Unix seconds after which it is refused.
    pub expires: Option<i64>,
    /// `recover=NAME`: a recovery token, with which child `NAME` (configured, or
    /// joined before) enrolls again after its certificate expired while it was
    /// offline; no other name may use it.
    pub recover: Option<String>,
}

/// Why a line of a tokens file does not parse ([`parse_token_line`]): the attribute at
/// fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenLineError {
    /// No token.
    #[error("an empty line")]
    Empty,
    /// `uses=` not a positive number.
    #[error("uses={0}: not a positive number")]
    Uses(String),
    /// `expires=` neither a date nor Unix seconds.
    #[error("expires={0}: neither YYYY-MM-DD nor Unix seconds")]
    Expires(String),
    /// `recover=` not a node name.
    #[error("recover={name}: {why}")]
    Recover {
        /// The name as written.
        name: String,
        /// Why it is no node name.
        why: strata_topology::names::NameError,
    },
    /// A word that is none of the attributes.
    #[error("{0:?} is none of uses=N, expires=DATE, recover=NAME")]
    Unknown(String),
}

/// Parses one line of a tokens file: the token and its rule; the error names the
/// attribute at fault.
pub fn parse_token_line(line: &str) -> Result<(String, TokenRule), TokenLineError> {
    let mut words = line.split_whitespace();
    let token = words.next().ok_or(TokenLineError::Empty)?.to_owned();
    let mut rule = TokenRule {
        uses: 1,
        expires: None,
        recover: None,
    };
    for word in words {
        match word.split_once('=') {
            Some(("uses", n)) => {
                rule.uses = n
                    .parse()
                    .ok()
                    .filter(|n| *n > 0)
                    .ok_or_else(|| TokenLineError::Uses(n.to_owned()))?;
            }
            Some(("expires", t)) => {
                rule.expires =
                    Some(parse_time(t).ok_or_else(|| TokenLineError::Expires(t.to_owned()))?);
            }
            Some(("recover", name)) => {
                crate::config::check_node_name(name).map_err(|why| TokenLineError::Recover {
                    name: name.to_owned(),
                    why,
                })?;
                rule.recover = Some(name.to_owned());
            }
            _ => {
                return Err(TokenLineError::Unknown(word.to_owned()));
            }
        }
    }
    Ok((token, rule))
}

/// `YYYY-MM-DD` (midnight UTC) or Unix seconds.
fn parse_time(t: &str) -> Option<i64> {
    if let Ok(secs) = t.parse::<i64>() {
        return Some(secs);
    }
    let mut parts = t.splitn(3, '-');
    let y: i64 = parts.next()?.parse().ok()?;
    let m: i64 = parts.next()?.parse().ok()?;
    let d: i64 = parts.next()?.parse().ok()?;
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) {
        return None;
    }
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    Some((era * 146_097 + doe - 719_468) * 86_400)
}

/// A token bucket: `rate` per second, at most `2 × rate` saved up.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn full(rate: u32, now: Instant) -> Bucket {
        Bucket {
            tokens: burst(rate),
            at: now,
        }
    }

    fn refill(&mut self, rate: u32, now: Instant) {
        let secs = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + secs * f64::from(rate)).min(burst(rate));
        self.at = now;
    }

    /// Seconds until one attempt is allowed again.
    fn wait(&self, rate: u32) -> f64 {
        (1.0 - self.tokens).max(0.0) / f64::from(rate.max(1))
    }
}

fn burst(rate: u32) -> f64 {
    f64::from(rate.max(1)) * 2.0
}

/// How many source addresses are remembered before idle ones are forgotten.
const MAX_SOURCES: usize = 10_000;

/// The rate of join attempts, per source and overall.
#[derive(Debug)]
pub struct JoinLimiter {
    per_source: u32,
    global: u32,
    sources: BTreeMap<IpAddr, Bucket>,
    all: Option<Bucket>,
}

/// A join attempt refused by the rate limit: from one address, or overall.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error(
    "too many join attempts {} (at most {per_second}/s): retry in {retry_in:.1}s",
    from.map_or_else(|| "overall".to_owned(), |ip| format!("from {ip}"))
)]
pub struct TooMany {
    /// The address over its own limit; `None` when all addresses together are.
    pub from: Option<IpAddr>,
    /// The limit it is over, attempts per second.
    pub per_second: u32,
    /// Seconds until an attempt would be taken.
    pub retry_in: f64,
}

impl JoinLimiter {
    /// A limiter allowing `per_source` attempts per second from one address and
    /// `global` from all (bursts of twice as many).
    pub fn new(per_source: u32, global: u32) -> JoinLimiter {
        JoinLimiter {
            per_source,
            global,
            sources: BTreeMap::new(),
            all: None,
        }
    }

    /// Takes one attempt from `source` at `now`, or says why it is refused.
    pub fn check(&mut self, source: IpAddr, now: Instant) -> Result<(), TooMany> {
        let all = self.all.get_or_insert(Bucket::full(self.global, now));
        all.refill(self.global, now);
        if self.sources.len() >= MAX_SOURCES {
            let (rate, cap) = (self.per_source, burst(self.per_source));
            self.sources.retain(|_, b| {
                b.refill(rate, now);
                b.tokens < cap
            });
        }
        let mine = self
            .sources
            .entry(source)
            .or_insert(Bucket::full(self.per_source, now));
        mine.refill(self.per_source, now);
        if mine.tokens < 1.0 {
            return Err(TooMany {
                from: Some(source),
                per_second: self.per_source,
                retry_in: mine.wait(self.per_source),
            });
        }
        if all.tokens < 1.0 {
            return Err(TooMany {
                from: None,
                per_second: self.global,
                retry_in: all.wait(self.global),
            });
        }
        mine.tokens -= 1.0;
        all.tokens -= 1.0;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn token_lines_carry_uses_and_expiry() {
        assert_eq!(
            parse_token_line("t1").unwrap(),
            (
                "t1".into(),
                TokenRule {
                    uses: 1,
                    expires: None,
                    recover: None,
                }
            )
        );
        let (_, rule) = parse_token_line("t2 uses=3 expires=2026-11-24").unwrap();
        assert_eq!(rule.uses, 3);
        assert_eq!(rule.expires, Some(1_795_478_400));
        assert_eq!(parse_time("1970-01-01"), Some(0));
        assert_eq!(parse_time("2000-03-01"), Some(951_868_800));
        assert_eq!(
            parse_token_line("t3 uses=0").unwrap_err().to_string(),
            "uses=0: not a positive number"
        );
        assert!(parse_token_line("t4 expires=soon").is_err());
        assert!(parse_token_line("t5 max=2").is_err());
        let (_, rule) = parse_token_line("t6 recover=site-1").unwrap();
        assert_eq!(rule.recover.as_deref(), Some("site-1"));
        assert!(parse_token_line("t7 recover=Not_A_Name").is_err());
    }

    #[test]
    fn attempts_are_limited_per_source_and_overall() {
        let now = Instant::now();
        let ip = |s: &str| -> IpAddr { s.parse().unwrap() };
        let (a, b, c) = (ip("10.0.0.1"), ip("10.0.0.2"), ip("10.0.0.3"));
        let mut l = JoinLimiter::new(1, 2);
        assert!(l.check(a, now).is_ok() && l.check(a, now).is_ok());
        let e = l.check(a, now).unwrap_err();
        assert_eq!((e.from, e.per_second), (Some(a), 1));
        assert!(
            e.to_string()
                .starts_with("too many join attempts from 10.0.0.1"),
            "{e}"
        );
        // Another source has its own bucket, within the global one.
        assert!(l.check(b, now).is_ok() && l.check(b, now).is_ok());
        let e = l.check(c, now).unwrap_err();
        assert_eq!((e.from, e.per_second), (None, 2));
        assert!(
            e.to_string().starts_with("too many join attempts overall"),
            "{e}"
        );
        // A second later each source may try again, as far as the global rate allows.
        let later = now + Duration::from_secs(1);
        assert!(l.check(a, later).is_ok() && l.check(b, later).is_ok());
        let e = l.check(c, later).unwrap_err();
        assert!(
            e.to_string().starts_with("too many join attempts overall"),
            "{e}"
        );
    }
}
