//! Does sled's memory grow with what is written once its log has reached its steady
//! size? (BENCHMARKS.md, "The agents' last climb".) sled configured as the nodes'
//! store configures it, on jemalloc as the `agent` binary is: every commit rewrites 10
//! records of 300-1,650 bytes and inserts or removes 3 more of 1,200 (a pin made and
//! released), then flushes, as the store's commit does. Prints the bytes written, the
//! log file's size and the process's anonymous memory every 2,000 commits.
//!
//! `cargo run --release -p strata-agent --example sled_rss -- DIR [COMMITS] [--fresh-threads]`
//! (DIR a new directory; COMMITS 30,000 by default; `--fresh-threads` commits each
//! batch from a new thread, as commits move between tokio's threads in the agent).

#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn anon_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("RssAnon:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

fn batch(i: usize) -> (sled::Batch, usize) {
    let mut b = sled::Batch::default();
    let mut bytes = 0;
    for k in 0..10usize {
        let value = vec![(i % 251) as u8; 300 + k * 150];
        bytes += value.len();
        b.insert(
            format!("o/apps/v1/Deployment/shop/web-{k}").as_bytes(),
            value,
        );
    }
    for k in 0..3 {
        let key = format!("o/strata.dev/v1alpha1/PinnedRevision/shop/web-{k}");
        if i.is_multiple_of(2) {
            bytes += 1200;
            b.insert(key.as_bytes(), vec![1u8; 1200]);
        } else {
            b.remove(key.as_bytes());
        }
    }
    (b, bytes)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let fresh_threads = args.iter().any(|a| a == "--fresh-threads");
    let mut positional = args.iter().filter(|a| !a.starts_with("--"));
    let dir = positional
        .next()
        .ok_or("usage: sled_rss DIR [COMMITS] [--fresh-threads]")?
        .clone();
    let commits: usize = match positional.next() {
        Some(n) => n.parse()?,
        None => 30_000,
    };
    let db = strata_node::store::open_sled_db(std::path::Path::new(&dir))?;
    let mut written = 0usize;
    for i in 0..=commits {
        let (b, bytes) = batch(i);
        written += bytes;
        if fresh_threads {
            let db = db.clone();
            std::thread::spawn(move || -> sled::Result<()> {
                db.apply_batch(b)?;
                db.flush().map(drop)
            })
            .join()
            .map_err(|_| "a committing thread panicked")??;
        } else {
            db.apply_batch(b)?;
            db.flush()?;
        }
        if i.is_multiple_of(2000) {
            let log = std::fs::metadata(format!("{dir}/db")).map_or(0, |m| m.len());
            println!(
                "commit {i:6}: {:7} KB written, log file {:5} KiB, RssAnon {} KiB",
                written / 1000,
                log / 1024,
                anon_kib()
            );
        }
    }
    Ok(())
}
