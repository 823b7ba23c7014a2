//! How fast the machine is right now: a fixed piece of work, timed.
//!
//! On the shared 2-core machine the same update took up to 1.7 times the CPU from one
//! run to the next within an hour, while the load average and the steal time stayed low
//! (the nineteenth step in BENCHMARKS-HISTORY.md); every figure of a run moves with that. The
//! bench times the same work just before and just after the updates: when the two
//! disagree the machine changed speed during the run, and runs of two builds compare
//! only where their timings agree. The timing is noisy itself (100-216 ms for the same
//! work within one run), so it tells spells apart, not percents.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::Duration;

use tokio::time::Instant;

use ring::aead::{AES_128_GCM, Aad, LessSafeKey, Nonce, UnboundKey};

/// Keys in the B-tree: 200 clusters' reports under each of 100 children.
const KEYS: u32 = 20_000;
/// Lookups of every key.
const ROUNDS: u32 = 5;
/// Packets sealed, of [`PACKET`] bytes each.
const PACKETS: u32 = 8_000;
/// A full QUIC packet's payload.
const PACKET: usize = 1_200;

/// Times the work our update path does most besides system calls: B-tree seeks by
/// composite string keys built on the heap (a relay's reports and sessions), and
/// AES-GCM over packet-sized buffers (QUIC's packet protection).
///
/// The time is this thread's CPU time, not the wall clock's: at 10,000 leaves the idle
/// hierarchy's heartbeats take a quarter of the machine, and a wall-clock timing
/// measured that share too (177-297 ms against 160 ms at 1,000 leaves, in one hour).
/// Where the kernel does not tell a thread's CPU time, it is the wall clock's.
pub(crate) fn calibrate() -> Duration {
    let (wall, cpu) = (Instant::now(), thread_cpu());
    work();
    match (cpu, thread_cpu()) {
        (Some(before), Some(after)) => after.saturating_sub(before),
        _ => wall.elapsed(),
    }
}

/// This thread's time on a CPU so far (`/proc/thread-self/schedstat`, in ns).
fn thread_cpu() -> Option<Duration> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns = text.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(ns))
}

fn work() {
    let key = |i: u32| (format!("site-{:03}", i % 100), format!("cluster-{i:06}"));
    let mut map = BTreeMap::new();
    for i in 0..KEYS {
        map.insert(key(i), u64::from(i));
    }
    let mut sum = 0u64;
    for round in 0..ROUNDS {
        for i in 0..KEYS {
            let i = (i * 7_919 + round) % KEYS;
            sum = sum.wrapping_add(map.get(&key(i)).copied().unwrap_or(0));
        }
    }
    black_box(sum);
    // A fixed key and nonce: the figure is the time, not the ciphertext.
    let sealing =
        LessSafeKey::new(UnboundKey::new(&AES_128_GCM, &[7u8; 16]).expect("a 16-byte key"));
    let mut buf = vec![0u8; PACKET];
    for i in 0..PACKETS {
        let mut nonce = [0u8; 12];
        nonce[8..].copy_from_slice(&i.to_be_bytes());
        buf.truncate(PACKET);
        let _ = sealing.seal_in_place_append_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::empty(),
            &mut buf,
        );
        black_box(&buf);
    }
}
