//! Prints what a node's store holds: `cargo run -p strata-relay --example inspect_store DIR`.
//! The node must be stopped (sled locks its directory).

use strata_node::store::{SledStore, Store};

fn main() -> anyhow::Result<()> {
    let dir = std::env::args()
        .nth(1)
        .ok_or_else(|| anyhow::anyhow!("usage: inspect_store DIR"))?;
    let stored = SledStore::open(std::path::Path::new(&dir))?.load()?;
    println!("node id {}", stored.node_id);
    println!("log {:?}", stored.log_meta);
    println!("parent {:?}", stored.parent);
    for (k, e) in &stored.entries {
        println!(
            "entry {k} at {} live={}",
            e.position(),
            e.object().is_some()
        );
    }
    for (c, a) in &stored.child_acks {
        println!("ack {c} {a:?}");
    }
    for ((child, key), value) in &stored.reports {
        let what = match value {
            strata_protocol::wire::ReportValue::Status(s) => {
                format!("{:?} at revision {}", s.health, s.revision)
            }
            strata_protocol::wire::ReportValue::Summary(s) => {
                format!("summary of {} clusters", s.expected)
            }
            strata_protocol::wire::ReportValue::Cluster(c) => {
                format!("cluster at {}", c.path.join("/"))
            }
            _ => "removed".into(),
        };
        println!("report from {child}: {key:?}: {what}");
    }
    Ok(())
}
