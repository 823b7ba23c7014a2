//! An in-process N-node harness for the sync state machines, in the manner of
//! quinn-proto's `tests/util.rs`: a tree of nodes (root, relays, leaves) joined by
//! simulated links with a virtual clock, seeded randomness, and faults (loss,
//! duplication, reordering, disconnects, crashes with or without disk).
//!
//! The harness is a driver like the relay and agent runtimes: it feeds messages and
//! timers to the state machines and persists what their events hand out. It checks two
//! invariants as it goes (no leaf ever moves an object to an older revision; no report
//! value regresses) and offers [`World::check_converged`] for the end state.

#![allow(dead_code, unreachable_pub, missing_docs)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use strata_protocol::model::{
    Body, ContentHash, Cursor, LogId, Object, ObjectKey, ObjectKeyParts, ObjectMeta, Position,
    Revision, Space,
};
use strata_protocol::sync::{
    ChildSession, LinkConfig, LinkEvent, ObjectLog, ParentLink, ReportsConfig, Route,
    SessionConfig, SessionEvent, SharedRoute,
};
use strata_protocol::time::Instant;
use strata_protocol::wire::{
    Change, ChildToParent, LinkPath, ParentToChild, Report, ReportKey, ReportValue, Role, RouteId,
};

/// splitmix64: small, seedable, good enough to schedule faults.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// true with probability `percent`/100.
    pub fn chance(&mut self, percent: u8) -> bool {
        (self.next_u64() % 100) < u64::from(percent)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next_u64() % n }
    }
}

/// The route of a node: objects whose `dest` label is one of `wants`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DestRoute(pub BTreeSet<String>);

impl Route for DestRoute {
    fn id(&self) -> RouteId {
        // FNV-1a over the sorted set: equal sets, equal ids.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for d in &self.0 {
            for b in d.bytes().chain([0xff]) {
                h ^= u64::from(b);
                h = h.wrapping_mul(0x0100_0000_01b3);
            }
        }
        RouteId(h)
    }
    fn includes(&self, meta: &ObjectMeta) -> bool {
        meta.labels.get("dest").is_some_and(|d| self.0.contains(d))
    }
}

pub fn key(k: u8) -> ObjectKey {
    ObjectKey::new(ObjectKeyParts {
        space: Space::default_space(),
        group: "apps".into(),
        version: "v1".into(),
        kind: "Deployment".into(),
        namespace: Some("shop".into()),
        name: format!("obj-{k}"),
    })
}

#[derive(Debug, Clone, Copy, Default)]
pub struct Faults {
    pub loss: u8,
    pub dup: u8,
    /// Extra random delay up to this many ms: reorders messages.
    pub jitter_ms: u64,
}

#[derive(Debug)]
struct InFlight<M> {
    at: Instant,
    conn: u64,
    msg: M,
}

#[derive(Debug, Default)]
struct Wire {
    /// Connection id; 0 = no connection.
    conn: u64,
    faults: Faults,
    down: Vec<InFlight<ParentToChild>>,
    up: Vec<InFlight<ChildToParent>>,
    reconnect_at: Option<Instant>,
    /// Downsync frames delivered to the child.
    down_msgs: u64,
    /// Objects and deletes carried by the downsync frames delivered to the child.
    down_changes: u64,
}

/// What a node keeps across a crash that keeps its disk.
#[derive(Debug, Clone)]
struct Disk {
    log: Option<ObjectLog>,
    cursor: Cursor,
    route: Option<RouteId>,
    incarnation: u64,
    parent_incarnation: Option<u64>,
    /// Leaves: the objects applied to the "cluster".
    store: BTreeMap<ObjectKey, Object>,
    /// Relays and root: reports received, with the child they came from.
    reports: BTreeMap<ReportKey, (usize, ReportValue)>,
    /// Children's runs as last seen.
    child_runs: BTreeMap<usize, u64>,
}

#[derive(Debug)]
pub struct Node {
    pub name: String,
    pub parent: Option<usize>,
    pub children: Vec<usize>,
    /// Leaves only: the `dest` labels this leaf wants.
    pub wants: BTreeSet<String>,
    disk: Disk,
    link: Option<ParentLink>,
    sessions: BTreeMap<usize, ChildSession>,
    wire: Wire,
    up: bool,
}

impl Node {
    pub fn is_leaf(&self) -> bool {
        self.children.is_empty() && self.parent.is_some()
    }
}

pub struct World {
    pub now: Instant,
    pub nodes: Vec<Node>,
    pub rng: Rng,
    next_conn: u64,
    next_incarnation: u64,
    pub violations: Vec<String>,
    pub step: Duration,
    pub trace: Vec<String>,
}

fn session_config(name: &str, incarnation: u64) -> SessionConfig {
    SessionConfig {
        parent: name.to_owned(),
        incarnation,
        labels: BTreeMap::new(),
        heartbeat: Duration::from_millis(500),
        idle_timeout: Duration::from_secs(3),
        // Small on purpose: deltas and snapshots come in several parts, and the
        // window fills up.
        window_bytes: 1200,
        part_bytes: 400,
        ..SessionConfig::default()
    }
}

fn link_config(name: &str, role: Role, run: u64) -> LinkConfig {
    let mut c = LinkConfig::new(name, role);
    c.run = run;
    c.heartbeat = Duration::from_millis(500);
    c.idle_timeout = Duration::from_secs(3);
    c.resubscribe_after = Duration::from_secs(1);
    c.reports = ReportsConfig {
        flush_interval: Duration::from_millis(50),
        max_batch_items: 3,
        max_inflight_batches: 2,
        retransmit_after: Duration::from_secs(2),
    };
    c
}

impl World {
    /// Builds a tree from `(name, parent index)` pairs; node 0 is the root. Leaves are
    /// the nodes without children; `wants` gives each leaf's initial `dest` labels.
    pub fn new(seed: u64, shape: &[(&str, Option<usize>)], wants: &[(usize, &[&str])]) -> Self {
        let mut nodes: Vec<Node> = shape
            .iter()
            .map(|(name, parent)| Node {
                name: (*name).to_owned(),
                parent: *parent,
                children: Vec::new(),
                wants: BTreeSet::new(),
                disk: Disk {
                    log: None,
                    cursor: Cursor::default(),
                    route: None,
                    incarnation: 0,
                    parent_incarnation: None,
                    store: BTreeMap::new(),
                    reports: BTreeMap::new(),
                    child_runs: BTreeMap::new(),
                },
                link: None,
                sessions: BTreeMap::new(),
                wire: Wire::default(),
                up: true,
            })
            .collect();
        for i in 0..nodes.len() {
            if let Some(p) = nodes[i].parent {
                nodes[p].children.push(i);
            }
        }
        for (leaf, ds) in wants {
            nodes[*leaf].wants = ds.iter().map(|d| (*d).to_owned()).collect();
        }
        let mut w = World {
            now: Instant::ZERO,
            nodes,
            rng: Rng::new(seed),
            next_conn: 1,
            next_incarnation: 1,
            violations: Vec::new(),
            step: Duration::from_millis(10),
            trace: Vec::new(),
        };
        for i in 0..w.nodes.len() {
            w.boot(i, false);
        }
        w
    }

    fn fresh_id(&mut self) -> u64 {
        self.next_incarnation += 1;
        (self.next_incarnation << 32) | (self.rng.next_u64() & 0xffff_ffff)
    }

    /// Starts node `i`, from its disk (`keep_disk`) or from nothing.
    fn boot(&mut self, i: usize, keep_disk: bool) {
        let has_children = !self.nodes[i].children.is_empty();
        let is_root = self.nodes[i].parent.is_none();
        if !keep_disk {
            let id = self.fresh_id();
            let n = &mut self.nodes[i];
            n.disk.incarnation = id;
            n.disk.cursor = Cursor::default();
            n.disk.route = None;
            n.disk.parent_incarnation = None;
            n.disk.store.clear();
            n.disk.reports.clear();
            n.disk.child_runs.clear();
            n.disk.log = has_children.then(|| {
                let mut log = ObjectLog::new(LogId(id));
                if is_root {
                    log.mark_serving();
                }
                log
            });
        }
        let now = self.now;
        let run = self.fresh_id();
        let n = &mut self.nodes[i];
        n.up = true;
        n.sessions.clear();
        n.link = n.parent.map(|_| {
            let role = if has_children {
                Role::Relay
            } else {
                Role::Agent
            };
            ParentLink::new(
                now,
                link_config(&n.name, role, run),
                n.disk.cursor,
                n.disk.route,
            )
        });
        if n.parent.is_some() {
            n.wire.reconnect_at = Some(now);
        }
        // Everything received and acknowledged is on disk; push it upward again, the
        // new outbox knows nothing of it. (Leaves recompute statuses from their store.)
        self.repush_reports(i);
    }

    /// Pushes every current report of node `i` into its parent link's outbox.
    fn repush_reports(&mut self, i: usize) {
        let now = self.now;
        let n = &mut self.nodes[i];
        let Some(link) = n.link.as_mut() else { return };
        if n.children.is_empty() {
            for (k, o) in &n.disk.store {
                link.push_report(now, status_report(&n.name, k, o.revision));
            }
        } else {
            for (k, (_, v)) in &n.disk.reports {
                link.push_report(
                    now,
                    Report {
                        key: k.clone(),
                        value: v.clone(),
                    },
                );
            }
        }
    }

    /// The route a parent applies for child `c`: the union of the leaves' wants below.
    pub fn route_of(&self, c: usize) -> DestRoute {
        let n = &self.nodes[c];
        if n.children.is_empty() {
            return DestRoute(n.wants.clone());
        }
        DestRoute(
            n.children
                .iter()
                .flat_map(|&ch| self.route_of(ch).0)
                .collect(),
        )
    }

    // ---- workload -------------------------------------------------------------

    /// Applies objects at the root in one revision: `(key, dest, body)`.
    pub fn apply(&mut self, objects: &[(u8, u8, Vec<u8>)]) {
        let log = self.nodes[0].disk.log.as_mut().expect("root has a log");
        let pos = log.head().next();
        for (k, dest, body) in objects {
            let mut hash = [0u8; 32];
            for (i, b) in body.iter().enumerate() {
                hash[i % 32] ^= b.wrapping_add(i as u8);
            }
            hash[31] = body.len() as u8;
            let object = Object {
                meta: std::sync::Arc::new(ObjectMeta {
                    key: key(*k),
                    labels: [("dest".to_owned(), format!("d{dest}"))].into(),
                }),
                revision: Revision(pos.0),
                hash: ContentHash(hash),
                body: body.clone().into(),
            };
            log.stage(pos, Change::Upsert(object)).expect("stage");
        }
        log.commit(pos);
        let summary: Vec<(u8, u8, usize)> =
            objects.iter().map(|(k, d, b)| (*k, *d, b.len())).collect();
        self.trace.push(format!(
            "{:?} apply (key, dest, len) {summary:?} at {pos}",
            self.now
        ));
    }

    pub fn delete(&mut self, k: u8) {
        self.trace.push(format!("{:?} delete {k}", self.now));
        let log = self.nodes[0].disk.log.as_mut().expect("root has a log");
        let pos = log.head().next();
        if log.stage(pos, Change::Delete(key(k))).expect("stage") {
            log.commit(pos);
        }
    }

    /// Compacts node `i`'s log as far as its live sessions allow.
    pub fn compact(&mut self, i: usize) {
        self.trace
            .push(format!("{:?} compact {}", self.now, self.nodes[i].name));
        let n = &mut self.nodes[i];
        let Some(log) = n.disk.log.as_mut() else {
            return;
        };
        let floor = n
            .sessions
            .values()
            .filter_map(|s| s.retention_floor(log))
            .min()
            .unwrap_or(log.head());
        log.compact(floor);
    }

    /// Changes a leaf's wants; every parent on its path re-routes.
    pub fn set_wants(&mut self, leaf: usize, wants: BTreeSet<String>) {
        self.trace.push(format!(
            "{:?} {} wants {wants:?}",
            self.now, self.nodes[leaf].name
        ));
        self.nodes[leaf].wants = wants;
        let mut c = leaf;
        while let Some(p) = self.nodes[c].parent {
            let route: SharedRoute = Arc::new(self.route_of(c));
            let n = &mut self.nodes[p];
            if let (Some(s), Some(log)) = (n.sessions.get_mut(&c), n.disk.log.as_ref()) {
                s.set_route(route, log);
            }
            c = p;
        }
    }

    // ---- faults -------------------------------------------------------------

    pub fn set_faults(&mut self, child: usize, faults: Faults) {
        self.trace.push(format!(
            "{:?} faults on {}: {faults:?}",
            self.now, self.nodes[child].name
        ));
        self.nodes[child].wire.faults = faults;
    }

    pub fn heal(&mut self) {
        for n in &mut self.nodes {
            n.wire.faults = Faults::default();
        }
    }

    /// Cuts the connection between `child` and its parent; the child reconnects.
    pub fn disconnect(&mut self, child: usize) {
        self.trace.push(format!(
            "{:?} disconnect {}",
            self.now, self.nodes[child].name
        ));
        if self.nodes[child].parent.is_none() || self.nodes[child].wire.conn == 0 {
            return;
        }
        self.close_wire(child);
        if let Some(link) = self.nodes[child].link.as_mut() {
            link.handle_disconnected();
        }
        self.schedule_reconnect(child);
    }

    fn close_wire(&mut self, child: usize) {
        let w = &mut self.nodes[child].wire;
        w.conn = 0;
        w.down.clear();
        w.up.clear();
        if let Some(p) = self.nodes[child].parent {
            self.nodes[p].sessions.remove(&child);
        }
    }

    fn schedule_reconnect(&mut self, child: usize) {
        let delay = Duration::from_millis(200 + self.rng.below(800));
        self.nodes[child].wire.reconnect_at = Some(self.now + delay);
    }

    /// Crashes node `i` and restarts it at once, with or without its disk. Every
    /// connection of the node goes down with it.
    pub fn crash(&mut self, i: usize, keep_disk: bool) {
        self.trace.push(format!(
            "{:?} crash {} keep_disk={keep_disk}",
            self.now, self.nodes[i].name
        ));
        if self.nodes[i].parent.is_some() {
            self.close_wire(i);
        }
        for c in self.nodes[i].children.clone() {
            self.close_wire(c);
            if let Some(link) = self.nodes[c].link.as_mut() {
                link.handle_disconnected();
            }
            self.schedule_reconnect(c);
        }
        self.boot(i, keep_disk);
    }

    // ---- driving -------------------------------------------------------------

    /// Runs for `d` of virtual time.
    pub fn run(&mut self, d: Duration) {
        let end = self.now + d;
        while self.now < end {
            self.now = self.now + self.step;
            self.tick();
        }
    }

    fn tick(&mut self) {
        let now = self.now;
        for c in 0..self.nodes.len() {
            if self.nodes[c].wire.reconnect_at.is_some_and(|t| now >= t) {
                self.connect(c);
            }
        }
        for c in 0..self.nodes.len() {
            self.deliver(c);
        }
        for i in 0..self.nodes.len() {
            self.timers(i);
        }
        for i in 0..self.nodes.len() {
            self.pump(i);
        }
    }

    fn connect(&mut self, c: usize) {
        let now = self.now;
        let p = self.nodes[c].parent.expect("only children connect");
        self.close_wire(c);
        let conn = self.next_conn;
        self.next_conn += 1;
        self.nodes[c].wire.conn = conn;
        self.nodes[c].wire.reconnect_at = None;
        let route: SharedRoute = Arc::new(self.route_of(c));
        let parent = &mut self.nodes[p];
        let log_id = parent.disk.incarnation;
        let session = ChildSession::new(
            now,
            self.nodes[c].name.clone(),
            route,
            session_config(&self.nodes[p].name, log_id),
        );
        // The newest connection of a child replaces its older session.
        self.nodes[p].sessions.insert(c, session);
        if let Some(link) = self.nodes[c].link.as_mut() {
            link.handle_connected(now, LinkPath::Direct);
        }
    }

    fn deliver(&mut self, c: usize) {
        let now = self.now;
        let Some(p) = self.nodes[c].parent else {
            return;
        };
        let conn = self.nodes[c].wire.conn;
        let (down, up): (Vec<_>, Vec<_>) = {
            let w = &mut self.nodes[c].wire;
            let down = take_due(&mut w.down, now, conn);
            let up = take_due(&mut w.up, now, conn);
            (down, up)
        };
        self.nodes[c].wire.down_msgs += down.len() as u64;
        self.nodes[c].wire.down_changes += down
            .iter()
            .map(|m| match m {
                ParentToChild::Delta(d) => d.changes.len() as u64,
                ParentToChild::Snapshot(s) => s.objects.len() as u64,
                _ => 0,
            })
            .sum::<u64>();
        let watch = std::env::var("STRATA_WATCH").ok();
        for msg in down {
            if watch.as_deref() == Some(self.nodes[c].name.as_str()) {
                eprintln!("{:?} -> {}: {}", now, self.nodes[c].name, describe(&msg));
            }
            if let Some(link) = self.nodes[c].link.as_mut() {
                link.handle_message(now, msg);
            }
        }
        for msg in up {
            if let Some(s) = self.nodes[p].sessions.get_mut(&c) {
                s.handle_message(now, msg);
            }
        }
    }

    fn timers(&mut self, i: usize) {
        let now = self.now;
        let n = &mut self.nodes[i];
        if let Some(link) = n.link.as_mut()
            && link.poll_timeout().is_some_and(|t| now >= t)
        {
            link.handle_timeout(now);
        }
        for s in n.sessions.values_mut() {
            if s.poll_timeout().is_some_and(|t| now >= t) {
                s.handle_timeout(now);
            }
        }
    }

    fn pump(&mut self, i: usize) {
        self.pump_parent_link(i);
        self.pump_sessions(i);
    }

    fn pump_parent_link(&mut self, i: usize) {
        let now = self.now;
        let Some(mut link) = self.nodes[i].link.take() else {
            return;
        };
        let mut closed = false;
        while let Some(ev) = link.poll_event() {
            match ev {
                LinkEvent::Connected { incarnation, .. } => {
                    let n = &mut self.nodes[i];
                    if n.disk.parent_incarnation != Some(incarnation) {
                        n.disk.parent_incarnation = Some(incarnation);
                        self.nodes[i].link = Some(link);
                        self.repush_reports(i);
                        link = self.nodes[i].link.take().expect("just put back");
                    }
                }
                LinkEvent::Apply(change) => self.apply_downsync(i, &mut link, change),
                LinkEvent::Advanced(cursor) => {
                    let n = &mut self.nodes[i];
                    n.disk.cursor = cursor;
                    if let Some(log) = n.disk.log.as_mut() {
                        let next = log.head().next();
                        log.commit(next);
                    }
                }
                LinkEvent::SnapshotStarted => self.nodes[i].disk.route = None,
                LinkEvent::SnapshotDone {
                    cursor,
                    route,
                    keep,
                } => {
                    let n = &mut self.nodes[i];
                    n.disk.cursor = cursor;
                    n.disk.route = Some(route);
                    if let Some(log) = n.disk.log.as_mut() {
                        let next = log.head().next();
                        log.finish_snapshot(next, &keep).expect("snapshot");
                    } else {
                        let gone: Vec<ObjectKey> = n
                            .disk
                            .store
                            .keys()
                            .filter(|k| !keep.contains(*k))
                            .cloned()
                            .collect();
                        for k in gone {
                            n.disk.store.remove(&k);
                            link.push_report(
                                now,
                                Report {
                                    key: status_key(&n.name, &k),
                                    value: ReportValue::Removed,
                                },
                            );
                        }
                    }
                }
                LinkEvent::Closed { .. } => closed = true,
                // This harness routes by the clusters' own labels only.
                LinkEvent::Labels(_) => {}
            }
        }
        let conn = self.nodes[i].wire.conn;
        if conn != 0 {
            while let Some(msg) = link.poll_transmit(now) {
                self.send_up(i, conn, msg);
            }
        }
        self.nodes[i].link = Some(link);
        if closed && self.nodes[i].wire.conn != 0 {
            // The link gave up on this connection: the transport closes.
            self.close_wire(i);
            self.schedule_reconnect(i);
        }
    }

    fn apply_downsync(&mut self, i: usize, link: &mut ParentLink, change: Change) {
        let now = self.now;
        let n = &mut self.nodes[i];
        if let Some(log) = n.disk.log.as_mut() {
            let next = log.head().next();
            log.stage(next, change).expect("stage above head");
            return;
        }
        match change {
            Change::Upsert(o) => {
                if let Some(held) = n.disk.store.get(o.key())
                    && held.revision > o.revision
                {
                    self.violations.push(format!(
                        "{:?}: {} went back from revision {} to {} of {}",
                        now,
                        n.name,
                        held.revision,
                        o.revision,
                        o.key()
                    ));
                }
                let k = o.key().clone();
                let rev = o.revision;
                n.disk.store.insert(k.clone(), o);
                link.push_report(now, status_report(&n.name, &k, rev));
            }
            Change::Delete(k) => {
                if n.disk.store.remove(&k).is_some() {
                    link.push_report(
                        now,
                        Report {
                            key: status_key(&n.name, &k),
                            value: ReportValue::Removed,
                        },
                    );
                }
            }
        }
    }

    fn pump_sessions(&mut self, i: usize) {
        let now = self.now;
        let children: Vec<usize> = self.nodes[i].sessions.keys().copied().collect();
        for c in children {
            let mut closed = false;
            while let Some(ev) = self.nodes[i]
                .sessions
                .get_mut(&c)
                .and_then(ChildSession::poll_event)
            {
                match ev {
                    SessionEvent::Opened { hello, .. } => {
                        let n = &mut self.nodes[i];
                        if n.disk.child_runs.get(&c) != Some(&hello.run) {
                            n.disk.child_runs.insert(c, hello.run);
                            self.forget_reports_from(i, c);
                        }
                    }
                    SessionEvent::Reports(items) => {
                        for r in items {
                            self.accept_report(i, c, r);
                        }
                    }
                    SessionEvent::Closed(_) => closed = true,
                    _ => {}
                }
            }
            let conn = self.nodes[c].wire.conn;
            let n = &mut self.nodes[i];
            if let (Some(s), Some(log)) = (n.sessions.get_mut(&c), n.disk.log.as_ref()) {
                let mut out = Vec::new();
                while let Some(msg) = s.poll_transmit(now, log) {
                    out.push(msg);
                }
                for msg in out {
                    self.send_down(c, conn, msg);
                }
            }
            if closed {
                self.close_wire(c);
                if let Some(link) = self.nodes[c].link.as_mut() {
                    link.handle_disconnected();
                }
                self.schedule_reconnect(c);
            }
        }
    }

    fn forget_reports_from(&mut self, i: usize, c: usize) {
        let now = self.now;
        let n = &mut self.nodes[i];
        let gone: Vec<ReportKey> = n
            .disk
            .reports
            .iter()
            .filter(|(_, (from, _))| *from == c)
            .map(|(k, _)| k.clone())
            .collect();
        for k in gone {
            n.disk.reports.remove(&k);
            if let Some(link) = n.link.as_mut() {
                link.push_report(
                    now,
                    Report {
                        key: k,
                        value: ReportValue::Removed,
                    },
                );
            }
        }
    }

    fn accept_report(&mut self, i: usize, c: usize, r: Report) {
        let now = self.now;
        let n = &mut self.nodes[i];
        if let (Some((_, ReportValue::Status(old))), ReportValue::Status(new)) =
            (n.disk.reports.get(&r.key), &r.value)
            && new.revision < old.revision
        {
            self.violations.push(format!(
                "{:?}: {} took an older status for {:?}: {} after {}",
                now, n.name, r.key, new.revision, old.revision
            ));
        }
        n.disk.reports.insert(r.key.clone(), (c, r.value.clone()));
        if let Some(link) = n.link.as_mut() {
            link.push_report(now, r);
        }
    }

    fn latency(&mut self, c: usize) -> Duration {
        let f = self.nodes[c].wire.faults;
        Duration::from_millis(5 + self.rng.below(f.jitter_ms + 1))
    }

    /// Delivery times for one message on child `c`'s link: none when it is lost, two
    /// when it is duplicated, each with its own latency (so copies reorder).
    fn schedule(&mut self, c: usize, conn: u64) -> Vec<Instant> {
        let f = self.nodes[c].wire.faults;
        if conn == 0 || self.rng.chance(f.loss) {
            return Vec::new();
        }
        let copies = if self.rng.chance(f.dup) { 2 } else { 1 };
        (0..copies).map(|_| self.now + self.latency(c)).collect()
    }

    fn send_down(&mut self, c: usize, conn: u64, msg: ParentToChild) {
        for at in self.schedule(c, conn) {
            let msg = msg.clone();
            self.nodes[c].wire.down.push(InFlight { at, conn, msg });
        }
    }

    fn send_up(&mut self, c: usize, conn: u64, msg: ChildToParent) {
        for at in self.schedule(c, conn) {
            let msg = msg.clone();
            self.nodes[c].wire.up.push(InFlight { at, conn, msg });
        }
    }

    // ---- checks -------------------------------------------------------------

    /// The root's live objects the route selects: key -> (revision, body).
    pub fn expected_view(&self, route: &DestRoute) -> BTreeMap<ObjectKey, (Revision, Body)> {
        let log = self.nodes[0].disk.log.as_ref().expect("root log");
        log.live()
            .filter(|o| route.includes(&o.meta))
            .map(|o| (o.key().clone(), (o.revision, o.body.clone())))
            .collect()
    }

    pub fn view_of(&self, i: usize) -> BTreeMap<ObjectKey, (Revision, Body)> {
        let n = &self.nodes[i];
        match &n.disk.log {
            Some(log) => log
                .live()
                .map(|o| (o.key().clone(), (o.revision, o.body.clone())))
                .collect(),
            None => n
                .disk
                .store
                .values()
                .map(|o| (o.key().clone(), (o.revision, o.body.clone())))
                .collect(),
        }
    }

    /// Every node holds exactly its route's view of the root, and the root's reports
    /// equal the leaves' ground truth. Returns the first difference.
    pub fn check_converged(&self) -> Result<(), String> {
        if let Some(v) = self.violations.first() {
            return Err(v.clone());
        }
        for i in 1..self.nodes.len() {
            let want = self.expected_view(&self.route_of(i));
            let have = self.view_of(i);
            if want != have {
                let missing: Vec<_> = want
                    .iter()
                    .filter(|(k, v)| have.get(*k) != Some(*v))
                    .map(|(k, v)| (k.name.clone(), v.0))
                    .collect();
                let extra: Vec<_> = have
                    .iter()
                    .filter(|(k, v)| want.get(*k) != Some(*v))
                    .map(|(k, v)| (k.name.clone(), v.0))
                    .collect();
                return Err(format!(
                    "{} has not converged: missing/outdated {missing:?}, extra/outdated {extra:?}",
                    self.nodes[i].name
                ));
            }
        }
        let mut truth = BTreeMap::new();
        for n in self.nodes.iter().filter(|n| n.is_leaf()) {
            for (k, o) in &n.disk.store {
                truth.insert(status_key(&n.name, k), o.revision);
            }
        }
        let at_root: BTreeMap<ReportKey, Revision> = self.nodes[0]
            .disk
            .reports
            .iter()
            .filter_map(|(k, (_, v))| match v {
                ReportValue::Status(s) => Some((k.clone(), s.revision)),
                _ => None,
            })
            .collect();
        if truth != at_root {
            let missing: Vec<_> = truth
                .iter()
                .filter(|(k, v)| at_root.get(*k) != Some(*v))
                .collect();
            let extra: Vec<_> = at_root
                .iter()
                .filter(|(k, v)| truth.get(*k) != Some(*v))
                .collect();
            return Err(format!(
                "root reports differ from the leaves: missing/outdated {missing:?}, extra/outdated {extra:?}"
            ));
        }
        Ok(())
    }

    /// Downward messages delivered to `child` so far.
    pub fn delivered_down(&self, child: usize) -> u64 {
        self.nodes[child].wire.down_msgs
    }

    /// Objects and deletes delivered to `child` so far.
    pub fn delivered_changes(&self, child: usize) -> u64 {
        self.nodes[child].wire.down_changes
    }

    /// Number of objects a leaf holds.
    pub fn store_len(&self, leaf: usize) -> usize {
        self.nodes[leaf].disk.store.len()
    }

    pub fn cursor_of(&self, i: usize) -> Cursor {
        self.nodes[i].disk.cursor
    }

    pub fn head_of(&self, i: usize) -> Position {
        self.nodes[i]
            .disk
            .log
            .as_ref()
            .map_or(Position::ZERO, ObjectLog::head)
    }

    pub fn log_of(&self, i: usize) -> Option<&ObjectLog> {
        self.nodes[i].disk.log.as_ref()
    }
}

fn describe(msg: &ParentToChild) -> String {
    let change = |c: &Change| match c {
        Change::Upsert(o) => format!(
            "+{}@{}({})",
            o.key().name,
            o.revision,
            o.meta.labels.get("dest").map_or("", String::as_str)
        ),
        Change::Delete(k) => format!("-{}", k.name),
    };
    match msg {
        ParentToChild::Delta(d) => format!(
            "delta e{} s{} p{} {}..{} last={} [{}]",
            d.epoch,
            d.seq,
            d.part,
            d.from,
            d.to,
            d.last,
            d.changes.iter().map(change).collect::<Vec<_>>().join(" ")
        ),
        ParentToChild::Snapshot(s) => format!(
            "snapshot e{} s{} p{} at {} last={} [{}]",
            s.epoch,
            s.seq,
            s.part,
            s.at.position,
            s.last,
            s.objects
                .iter()
                .map(|o| change(&Change::Upsert(o.clone())))
                .collect::<Vec<_>>()
                .join(" ")
        ),
        other => format!("{other:?}"),
    }
}

fn take_due<M>(q: &mut Vec<InFlight<M>>, now: Instant, conn: u64) -> Vec<M> {
    let mut due: Vec<InFlight<M>> = Vec::new();
    let mut rest = Vec::new();
    for m in q.drain(..) {
        if m.conn != conn {
            continue;
        }
        if m.at <= now {
            due.push(m)
        } else {
            rest.push(m)
        }
    }
    *q = rest;
    // Stable by delivery time: equal times keep their send order.
    due.sort_by_key(|m| m.at);
    due.into_iter().map(|m| m.msg).collect()
}

pub fn status_key(cluster: &str, k: &ObjectKey) -> ReportKey {
    ReportKey::Status {
        cluster: cluster.to_owned(),
        object: k.clone(),
    }
}

pub fn status_report(cluster: &str, k: &ObjectKey, rev: Revision) -> Report {
    Report {
        key: status_key(cluster, k),
        value: ReportValue::Status(strata_protocol::model::Status {
            health: strata_protocol::model::Health::Applied,
            revision: rev,
            observed_generation: None,
            message: None,
            numbers: BTreeMap::new(),
            status: Vec::new(),
            observed_at: strata_protocol::time::UnixMillis(0),
        }),
    }
}
