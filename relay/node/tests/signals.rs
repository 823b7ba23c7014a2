//! `Signals` keeps a SIGTERM that arrives while nobody is waiting on it: `relay up`
//! waits for one in a loop beside a one-second timer, and a SIGTERM that landed
//! between two waits used to be dropped (the process then never stopped).
//!
//! It sends SIGTERM to its own test process: the handler is installed first, and tokio
//! keeps it for the rest of the process; no other test here watches signals.

use std::process::Command;
use std::time::Duration;

use strata_node::process::Signals;

fn sigterm_self() {
    let status = Command::new("kill")
        .args(["-TERM", &std::process::id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigterm_between_two_waits_is_kept_for_the_next() {
    let mut signals = Signals::new();

    // Nobody waits when the signal lands; the runtime handles it meanwhile.
    sigterm_self();
    tokio::time::sleep(Duration::from_millis(300)).await;
    tokio::time::timeout(Duration::from_secs(10), signals.recv())
        .await
        .expect("the SIGTERM sent before the wait was lost");

    // `relay up`'s loop: each turn waits on the signal or a short timer, dropping the
    // wait when the timer wins. A signal sent from another thread meanwhile is seen.
    let sender = std::thread::spawn(|| {
        std::thread::sleep(Duration::from_millis(120));
        sigterm_self();
    });
    // Bounded in turns, counted from when the sender has sent.
    let mut turns_after_sent = 0;
    let seen = loop {
        if sender.is_finished() {
            turns_after_sent += 1;
            if turns_after_sent > 400 {
                break false;
            }
        }
        tokio::select! {
            _ = signals.recv() => break true,
            _ = tokio::time::sleep(Duration::from_millis(5)) => {}
        }
    };
    sender.join().unwrap();
    assert!(seen, "a SIGTERM sent during a loop of waits was lost");

    // Nothing further is pending once both were seen.
    let extra = tokio::time::timeout(Duration::from_millis(200), signals.recv()).await;
    assert!(extra.is_err(), "a signal was reported twice");
}
