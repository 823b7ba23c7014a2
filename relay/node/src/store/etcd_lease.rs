//! The writer lease of root replicas that share an etcd store: the campaign for it,
//! keeping it alive (and ending the process when etcd ends it), and retrying etcd calls
//! while it elects a leader or a member is unreachable. Both the writer
//! ([`super::EtcdStore`]) and every replica's replicator (`etcd_replica`) use it.

use std::time::Duration;

use super::etcd_client::{Client, Compare, EtcdError, Op};

/// The exit status of a replica that lost its writer lease (EX_TEMPFAIL).
pub const LOST_LEASE_EXIT: i32 = 75;

/// Waits for the writer key to be free, then claims it under a new lease. Without
/// `wait`, gives up (`None`) as soon as another replica holds it.
pub(super) async fn campaign(
    client: Client,
    key: Vec<u8>,
    id: Vec<u8>,
    ttl_s: i64,
    at: &str,
    wait: bool,
) -> Result<Option<i64>, EtcdError> {
    let mut waiting = false;
    loop {
        let held = retrying(|| {
            let (client, key) = (client.clone(), key.clone());
            async move { client.get(&key).await }
        })
        .await?;
        if !held.kvs.is_empty() {
            if !wait {
                return Ok(None);
            }
            if !waiting {
                tracing::info!(%at, "another replica writes; standing by until its lease ends");
                waiting = true;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        }
        let lease = retrying(|| {
            let client = client.clone();
            async move { client.lease_grant(ttl_s).await }
        })
        .await?;
        let free = [Compare::Absent(key.clone())];
        let claim = [Op::Put(key.clone(), id.clone(), Some(lease))];
        match client.txn(&free, &claim).await {
            Ok(true) => return Ok(Some(lease)),
            Ok(false) => {}
            Err(e) if e.transient() => tracing::debug!(%at, error = %e, "etcd busy"),
            Err(e) => return Err(e),
        }
        // Another replica was quicker (or the claim's fate is unknown: the key's
        // value says whose it is on the next round); this lease is not needed.
        let _ = client.lease_revoke(lease).await;
        if let Ok(r) = client.get(&key).await
            && r.kvs.first().is_some_and(|kv| kv.value == id)
        {
            return Ok(Some(lease));
        }
    }
}

/// Renews `lease` at a third of its TTL for as long as the process lives, from
/// whichever member answers. Only etcd saying the lease is gone ends the process:
/// while etcd cannot be reached nothing can be written anyway (every write is fenced),
/// and when it can again, a lease it kept alive across a leader change is still ours.
pub(super) async fn keep_alive(client: Client, lease: i64, ttl_s: i64, at: String) {
    let period = Duration::from_millis(u64::try_from(ttl_s).unwrap_or(2) * 1000 / 3);
    loop {
        tokio::time::sleep(period).await;
        match tokio::time::timeout(period, client.lease_keep_alive(lease)).await {
            Ok(Ok(ttl)) if ttl > 0 => {}
            Ok(Ok(_)) => lost(&at, "etcd ended the lease"),
            Ok(Err(EtcdError::Status { message, .. })) if message.contains("lease not found") => {
                lost(&at, "etcd ended the lease")
            }
            Ok(Err(e)) => tracing::warn!(%at, error = %e, "lease renewal failed; trying again"),
            Err(_) => tracing::warn!(%at, "lease renewal had no answer in time; trying again"),
        }
    }
}

/// How long a call is retried while etcd elects a leader or a member is unreachable.
const RETRY_FOR: Duration = Duration::from_secs(15);

/// Calls `call` until it succeeds, fails for good, or [`RETRY_FOR`] passes. Retrying
/// a write is safe: a commit puts and deletes whole records, so applying it twice is
/// applying it once.
pub(super) async fn retrying<T, F, Fut>(mut call: F) -> Result<T, EtcdError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, EtcdError>>,
{
    let deadline = tokio::time::Instant::now() + RETRY_FOR;
    let mut pause = Duration::from_millis(50);
    loop {
        match call().await {
            Err(e) if e.transient() && tokio::time::Instant::now() < deadline => {
                tracing::debug!(error = %e, "etcd call failed; retrying");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(1));
            }
            other => return other,
        }
    }
}

/// Ends the process: this replica is no longer the writer.
fn lost(at: &str, why: &str) -> ! {
    tracing::error!(%at, why, "lost the writer lease; exiting so that a standby takes over");
    std::process::exit(LOST_LEASE_EXIT)
}
