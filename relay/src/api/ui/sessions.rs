//! Logging in to the web view without pasting a token into a page, the way a Jupyter
//! token link or `kubectl proxy` works.
//!
//! 1. `relay ui` asks the root, with the user's bearer token, for a one-time code
//!    (`POST /ui/login-codes`). The code is good for [`CODE_TTL`] and once.
//! 2. The browser opens `/ui/login?code=...`; the root trades the code for a session
//!    cookie (`HttpOnly`, `Secure`, `SameSite=Strict`) that lasts [`SESSION_TTL`].
//! 3. Each request carrying the cookie acts as the token the code was made from, read
//!    again from the tokens at every request: a token removed from the tokens ends
//!    its sessions at once.
//!
//! Codes and sessions live in the root's memory only: a restarted root asks for a new
//! `relay ui`.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::sync::Mutex;
use tokio::time::Instant;

/// How long a login code may wait to be used.
pub(crate) const CODE_TTL: Duration = Duration::from_secs(120);
/// How long a session lasts.
pub(crate) const SESSION_TTL: Duration = Duration::from_secs(12 * 3600);
/// The session cookie's name.
pub(crate) const COOKIE: &str = "strata_session";
/// At most this many codes wait at once, and this many sessions live at once: a
/// token cannot fill the root's memory with them.
const MAX_CODES: usize = 1_000;
const MAX_SESSIONS: usize = 10_000;

/// Why no code or session could be made.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SessionError {
    /// The system's random source failed.
    #[error("the system random source failed")]
    Random,
    /// Too many are outstanding.
    #[error("too many {what} outstanding ({limit}); try again later")]
    Full {
        /// Codes or sessions.
        what: &'static str,
        /// The limit.
        limit: usize,
    },
}

#[derive(Debug)]
struct Entry {
    /// The bearer token it acts as.
    token: String,
    expires: Instant,
}

/// The codes and sessions of the web view.
#[derive(Debug, Default)]
pub(crate) struct Sessions {
    codes: Mutex<BTreeMap<String, Entry>>,
    sessions: Mutex<BTreeMap<String, Entry>>,
}

/// 256 random bits, hex.
fn secret() -> Result<String, SessionError> {
    use ring::rand::SecureRandom;
    let mut b = [0u8; 32];
    ring::rand::SystemRandom::new()
        .fill(&mut b)
        .map_err(|_| SessionError::Random)?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

fn insert(
    map: &mut BTreeMap<String, Entry>,
    token: &str,
    ttl: Duration,
    what: &'static str,
    limit: usize,
    now: Instant,
) -> Result<String, SessionError> {
    map.retain(|_, e| e.expires > now);
    if map.len() >= limit {
        return Err(SessionError::Full { what, limit });
    }
    let key = secret()?;
    map.insert(
        key.clone(),
        Entry {
            token: token.to_owned(),
            expires: now + ttl,
        },
    );
    Ok(key)
}

impl Sessions {
    /// A new one-time code acting as `token`.
    pub(crate) async fn new_code(&self, token: &str, now: Instant) -> Result<String, SessionError> {
        insert(
            &mut *self.codes.lock().await,
            token,
            CODE_TTL,
            "login codes",
            MAX_CODES,
            now,
        )
    }

    /// Trades a code for a new session, once; `Ok(None)` if the code is unknown, used
    /// or expired.
    pub(crate) async fn redeem(
        &self,
        code: &str,
        now: Instant,
    ) -> Result<Option<String>, SessionError> {
        let entry = self.codes.lock().await.remove(code);
        match entry {
            Some(e) if e.expires > now => insert(
                &mut *self.sessions.lock().await,
                &e.token,
                SESSION_TTL,
                "sessions",
                MAX_SESSIONS,
                now,
            )
            .map(Some),
            _ => Ok(None),
        }
    }

    /// The token a live session acts as.
    pub(crate) async fn token(&self, session: &str, now: Instant) -> Option<String> {
        let sessions = self.sessions.lock().await;
        sessions
            .get(session)
            .filter(|e| e.expires > now)
            .map(|e| e.token.clone())
    }

    /// Ends a session.
    pub(crate) async fn end(&self, session: &str) {
        self.sessions.lock().await.remove(session);
    }
}

/// The session named by a `Cookie` header, if any.
pub(crate) fn from_cookie(header: &str) -> Option<&str> {
    header
        .split(';')
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == COOKIE)
        .map(|(_, v)| v)
        .filter(|v| !v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_code_buys_one_session_once_and_only_in_time() {
        let s = Sessions::default();
        let t = Instant::now();
        let code = s.new_code("t0", t).await.expect("code");
        let session = s
            .redeem(&code, t)
            .await
            .expect("redeem")
            .expect("a session");
        assert_eq!(s.token(&session, t).await.as_deref(), Some("t0"));
        // Used once: a second trade fails.
        assert!(s.redeem(&code, t).await.expect("redeem").is_none());
        assert!(s.redeem("not-a-code", t).await.expect("redeem").is_none());
        // A code left too long expires.
        let late = s.new_code("t1", t).await.expect("code");
        let after = t + CODE_TTL + Duration::from_secs(1);
        assert!(s.redeem(&late, after).await.expect("redeem").is_none());
        // So does a session.
        assert!(s.token(&session, t + SESSION_TTL).await.is_none());
        let other = s.new_code("t2", t).await.expect("code");
        let live = s
            .redeem(&other, t)
            .await
            .expect("redeem")
            .expect("a session");
        s.end(&live).await;
        assert!(s.token(&live, t).await.is_none());
    }

    #[test]
    fn the_cookie_header_names_the_session() {
        assert_eq!(from_cookie("a=1; strata_session=abc; b=2"), Some("abc"));
        assert_eq!(from_cookie("strata_session="), None);
        assert_eq!(from_cookie("other=abc"), None);
    }
}
