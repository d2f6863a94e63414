//! One seeded run: the members, the fault schedule, the elections, the convergence
//! after healing, and the final checks.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use openraft::storage::RaftLogStorage as _;
use openraft::{BasicNode, ServerState};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use zlock_server::commit::raft::log::{RaftLog, Writer};
use zlock_server::commit::raft::members::Addrs;
use zlock_server::commit::raft::peer::{Identity, Links, Local};
use zlock_server::commit::raft::rejoin::{self, Acks, Found, Gate, Standing};
use zlock_server::commit::raft::sm::StateMachine;
use zlock_server::commit::raft::types::Raft;
use zlock_server::commit::raft::types::WatchReceiver as _;

use crate::client::{Client, Ledger, Members};
use crate::disk::MemDisk;
use crate::host::{self, SimHost};
use crate::net::SimNetwork;
use crate::world::{lock, Shared, Weather, World};

/// The simulation's clock step.
const STEP: Duration = Duration::from_millis(10);

/// How long a member's writer waits for a leader to take a batch (the server's is an
/// election timeout's multiple plus 2 s: `RaftOptions::patience`).
const WRITER_PATIENCE: Duration = Duration::from_secs(2);

/// How long a run is, in steps.
#[derive(Debug, Clone, Copy)]
pub struct Length {
    /// Steps with faults and client traffic.
    pub faulty: u64,
    /// Steps allowed, after healing, for every member to apply the same log.
    pub settle: u64,
}

/// What a run that passed did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub trace_hash: u64,
    pub events: u64,
    pub members: usize,
    pub acked: usize,
    pub unknown: usize,
    pub applied: usize,
    /// Batches sent several at a time through one pinned submitter, and batches
    /// refused (in a group or alone).
    pub groups: usize,
    pub refused: usize,
    /// Batches through a member's own writer: acknowledged, and not.
    pub through_writer: (usize, usize),
    /// Batches pipelined through a member's sequencer: answered, not, and drops.
    pub pipelined: (usize, usize, usize),
    /// Forwarded frames a leader took, and refused for coming on a stale connection.
    pub forwards: (usize, usize),
    /// Leaders elected, and terms that had more than one (openraft allows it).
    pub leaders: usize,
    pub shared_terms: usize,
    pub crashes: usize,
    /// Crashes that lost the member's whole disk.
    pub wipes: usize,
    pub partitions: usize,
    /// Lock-delays and TTL nodes whose length was checked against true time (a
    /// member counts each it saw end).
    pub lasted_checks: BTreeMap<&'static str, usize>,
}

/// A failed run: what broke, and the latest events before it.
#[derive(Debug)]
pub struct Failure {
    pub what: String,
    pub recent: Vec<String>,
}

/// One member's durable things: its disk (after a crash, what survived), its vote,
/// purge and catch-up gate files, its snapshot directory. A wipe replaces them all.
struct Durable {
    records: Vec<(u64, Vec<u8>)>,
    meta: tempfile::TempDir,
    snapshots: tempfile::TempDir,
}

impl Durable {
    fn blank() -> Durable {
        Durable {
            records: Vec::new(),
            meta: scratch(),
            snapshots: scratch(),
        }
    }
}

/// One running member.
struct Running {
    raft: Raft,
    /// The log's writer, run by `disk_task` after each (seeded) fsync latency, and by
    /// a crash that tears a write.
    writer: Arc<Mutex<Writer<MemDisk>>>,
    disk_task: tokio::task::JoinHandle<()>,
    disk: MemDisk,
    host: SimHost,
}

struct Sim {
    world: Shared,
    rng: StdRng,
    ids: Vec<u64>,
    config: Arc<openraft::Config>,
    boxes: BTreeMap<u64, Durable>,
    running: BTreeMap<u64, Running>,
    members: Arc<Mutex<Members>>,
    /// Down members and the step they come back at.
    down: BTreeMap<u64, u64>,
    /// Members started blank, asking the others where they stand before their Raft
    /// starts (`rejoin::settle`, here over the simulated links).
    settling: BTreeSet<u64>,
    /// The member whose disk was wiped (or that starts late, blank), until it has
    /// caught up (one at a time: two members losing their disks together may lose what
    /// only they held), and the log it has caught up at: the furthest among the others
    /// when it settled (a member the leader let join without the catch-up gate has an
    /// open gate long before).
    amnesiac: Option<u64>,
    catch_up: Option<openraft::LogId<zlock_server::commit::raft::types::CommittedLeaderId>>,
    /// Of the members that settle while blank, the percentage after which the leader
    /// crashes at once (the rejoin gap: the two others must elect without it).
    leader_crash_odds: u32,
    /// The current step of the faulty phase, and whether it is over (no more crashes).
    step: u64,
    healed: bool,
    /// When the current partition heals.
    heal_at: Option<u64>,
    /// Per member: the election timeout (ms) now drawn, and when it last started one.
    timeout: BTreeMap<u64, u64>,
    elected_at: BTreeMap<u64, u64>,
    /// The odds (per mille per step) of each fault in this run, and the disk's.
    crash_odds: u32,
    /// Of the crashes, the percentage that wipe the member's disk.
    wipe_odds: u32,
    partition_odds: u32,
    weather_odds: u32,
    /// The longest time a member's log writer takes to get to what was queued and
    /// fsync it, in microseconds.
    fsync_us: u64,
    crashes: usize,
    wipes: usize,
    partitions: usize,
    /// The members' clocks: their own randomness (so that adding them changed no other
    /// draw of a seed), and the odds (per mille per step) that one jumps.
    clock_rng: StdRng,
    jump_odds: u32,
}

/// A directory for a member's vote and snapshots: in memory where there is a tmpfs
/// (the vote's fsync costs real time, not simulated time, on a disk).
fn scratch() -> tempfile::TempDir {
    let shm = std::path::Path::new("/dev/shm");
    if shm.is_dir() {
        if let Ok(d) = tempfile::tempdir_in(shm) {
            return d;
        }
    }
    tempfile::tempdir().unwrap()
}

fn config() -> Arc<openraft::Config> {
    let c = openraft::Config {
        cluster_name: "sim".into(),
        heartbeat_interval: 50,
        election_timeout_min: 150,
        election_timeout_max: 300,
        // Elections are the simulation's (see the crate doc).
        enable_elect: false,
        snapshot_policy: openraft::SnapshotPolicy::Never,
        max_payload_entries: 16,
        // As the server's (`RaftOptions::config`): wiped members rejoin blank, and a
        // restarted leader is elected again before it leads.
        allow_log_reversion: Some(true),
        enable_leader_restore: Some(false),
        ..openraft::Config::default()
    };
    Arc::new(c.validate().unwrap())
}

impl Sim {
    /// A simulation of members `ids` with no faults (each fault's odds zero, fsyncs of
    /// up to 1 ms); `rng_seed` seeds its randomness, `seed` its members' clocks'.
    fn calm(
        world: Shared,
        ids: Vec<u64>,
        members: Arc<Mutex<Members>>,
        rng_seed: u64,
        seed: u64,
    ) -> Sim {
        Sim {
            world,
            ids: ids.clone(),
            config: config(),
            boxes: ids.iter().map(|id| (*id, Durable::blank())).collect(),
            running: BTreeMap::new(),
            members,
            down: BTreeMap::new(),
            settling: BTreeSet::new(),
            amnesiac: None,
            catch_up: None,
            leader_crash_odds: 0,
            step: 0,
            healed: false,
            heal_at: None,
            timeout: BTreeMap::new(),
            elected_at: BTreeMap::new(),
            crash_odds: 0,
            wipe_odds: 0,
            partition_odds: 0,
            weather_odds: 0,
            fsync_us: 1_000,
            crashes: 0,
            wipes: 0,
            partitions: 0,
            rng: StdRng::seed_from_u64(rng_seed),
            clock_rng: StdRng::seed_from_u64(seed ^ 0xC10C_C10C),
            jump_odds: 0,
        }
    }

    fn now_ms(&self) -> u64 {
        lock(&self.world).now_ms()
    }

    fn event(&self, e: String) {
        lock(&self.world).event(e);
    }

    /// Starts `id` from what its disk kept; a blank one first settles how it joins.
    async fn start(&mut self, id: u64) {
        let b = &self.boxes[&id];
        let (log, _) =
            RaftLog::open_with_writer(MemDisk::default(), b.records.clone(), b.meta.path())
                .unwrap();
        if log.is_blank().unwrap() {
            self.settling.insert(id);
            self.event(format!("member {id} starts blank: asking the others"));
        } else {
            self.launch(id, None).await;
        }
    }

    /// What the blank members can decide: each asks every member it can reach now
    /// (blank ones answer blank, down ones not at all) and starts once `rejoin::decide`
    /// says how.
    async fn settle(&mut self) {
        let n = self.ids.len();
        for id in self.settling.clone() {
            // Who can be asked now: running members (their answer comes from their Raft
            // core), blank ones (they answer blank).
            let asked: Vec<(u64, Option<(Raft, Local)>)> = {
                let w = lock(&self.world);
                self.ids
                    .iter()
                    .filter(|&&o| o != id && !w.cut.contains(&(id, o)) && !w.cut.contains(&(o, id)))
                    .filter_map(|&o| match (w.rafts.get(&o), w.locals.get(&o)) {
                        (Some(raft), Some(local)) => Some((o, Some((raft.clone(), local.clone())))),
                        _ if self.settling.contains(&o) => Some((o, None)),
                        _ => None,
                    })
                    .collect()
            };
            let (mut answers, mut forgotten) = (BTreeMap::new(), BTreeMap::new());
            for (o, running) in asked {
                let answer = match running {
                    None => Some(Standing::default()),
                    Some((raft, local)) => {
                        let s =
                            tokio::time::timeout(Duration::from_millis(50), local.standing(&raft))
                                .await
                                .ok()
                                .flatten();
                        // A member that leads is asked to forget this one's earlier
                        // acknowledgements, as `rejoin::settle` asks.
                        if let Some(v) = s.filter(|s| s.leads).and_then(|_| local.forget(&raft, id))
                        {
                            forgotten.insert(o, v);
                        }
                        s
                    }
                };
                if let Some(a) = answer {
                    answers.insert(o, a);
                }
            }
            if let Some(found) = rejoin::decide(id, n, &answers, &forgotten) {
                self.settling.remove(&id);
                self.event(format!(
                    "member {id} settled: {found:?} from {answers:?} (forgotten by {forgotten:?})"
                ));
                if self.amnesiac == Some(id) {
                    self.catch_up = rejoin::furthest(&answers);
                }
                let rejoining = matches!(found, Found::Join { .. });
                self.launch(id, Some(found)).await;
                if rejoining && self.rng.gen_range(0..100) < self.leader_crash_odds {
                    self.crash_leader().await;
                }
            }
        }
    }

    async fn launch(&mut self, id: u64, found: Option<Found>) {
        let b = self.boxes.get_mut(&id).unwrap();
        let disk = MemDisk::with(&b.records);
        let (mut log, writer) =
            RaftLog::open_with_writer(disk.clone(), b.records.clone(), b.meta.path()).unwrap();
        lock(&self.world).disks.insert(id, disk.clone());
        let gate = Arc::new(Gate::open(b.meta.path()).unwrap());
        if let Some(Found::Join { floor, target }) = found {
            gate.close_until(target).unwrap();
            log.set_vote(&floor).unwrap();
        }
        let local = Local {
            view: log.view(),
            gate,
            acks: Arc::new(Acks::default()),
            snapshot_dir: b.meta.path().join("snapshots"),
            forwards: Arc::default(),
        };
        let host = SimHost::new(id, self.world.clone(), log.get_log_reader().await);
        let (sm, _applied) = StateMachine::open(
            host.clone(),
            b.snapshots.path().to_path_buf(),
            None,
            Default::default(),
        )
        .unwrap();
        let net = SimNetwork {
            world: self.world.clone(),
            from: id,
        };
        let raft = match Raft::new(id, self.config.clone(), net, log, sm).await {
            Ok(r) => r,
            Err(e) => {
                // What its disk kept is not a log openraft can start from.
                lock(&self.world).violation(format!("member {id} cannot restart: {e}"));
                return;
            }
        };
        // The disk: the writer runs on its own task, as the writer thread does, so no
        // call into openraft waits on the simulation's loop.
        let writer = Arc::new(Mutex::new(writer));
        let disk_task = {
            let writer = writer.clone();
            let mut rng = StdRng::seed_from_u64(self.rng.gen());
            let max = self.fsync_us;
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(Duration::from_micros(rng.gen_range(50..=max))).await;
                    writer.lock().unwrap().run_queued();
                }
            })
        };
        if found == Some(Found::Bootstrap) {
            let nodes: BTreeMap<u64, BasicNode> =
                self.ids.iter().map(|i| (*i, BasicNode::new(""))).collect();
            // Every member proposes the same membership, as RaftCommit::start does. Not
            // awaited here: it returns once the entry is flushed, i.e. once this loop
            // has run the member's log writer.
            let r = raft.clone();
            tokio::spawn(async move {
                let _ = r.initialize(nodes).await;
            });
        }
        {
            let mut w = lock(&self.world);
            w.rafts.insert(id, raft.clone());
            w.locals.insert(id, local);
            *w.incarnations.entry(id).or_default() += 1;
            let now = w.now_ms();
            w.heard.insert(id, now);
            w.event(format!("member {id} started"));
        }
        let desk = self.spawn_writer(id, &raft);
        {
            let mut m = self.members.lock().unwrap();
            m.running.insert(id, (raft.clone(), host.clone()));
            m.desks.insert(id, desk);
        }
        self.running.insert(
            id,
            Running {
                raft,
                writer,
                disk_task,
                disk,
                host,
            },
        );
    }

    /// Starts member `id`'s own writer (`write::Writer`, as `RaftCommit::start` does),
    /// stamping Txns with `id`'s clock, and its sequencer's part for it (`desk`); returns
    /// where clients hand the sequencer their batches.
    fn spawn_writer(
        &self,
        id: u64,
        raft: &Raft,
    ) -> tokio::sync::mpsc::UnboundedSender<crate::desk::Handed> {
        let (orders, orders_rx) = tokio::sync::mpsc::channel(2);
        let (troubles, troubles_rx) = tokio::sync::mpsc::unbounded_channel();
        let (desk, desk_rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(crate::desk::run(
            self.world.clone(),
            id,
            desk_rx,
            orders,
            troubles_rx,
        ));
        // Always in touch: the writer's patience decides instead.
        let (_, touch) = tokio::sync::watch::channel(true);
        let id_info = Identity {
            ensemble: "sim".into(),
            me: id,
            members: self.ids.iter().copied().collect(),
            open: false,
            links: Links::default(),
        };
        tokio::spawn(
            zlock_server::commit::raft::write::Writer {
                raft: raft.clone(),
                me: id,
                id: Arc::new(id_info),
                addrs: Addrs::new(raft.clone(), BTreeMap::new()),
                patience: WRITER_PATIENCE,
                silent: Duration::from_secs(3_600),
                touch,
                orders: orders_rx,
                troubles,
                failed: Arc::new(AtomicBool::new(false)),
                wall: crate::world::wall_of(&self.world, id),
                dial: Some(crate::forward::dial(self.world.clone(), id)),
            }
            .run(),
        );
        desk
    }

    /// Stops `id` as a `kill -9` would: its Raft is dropped, its disk keeps what was
    /// synced (and, if the power went during a sync, part of what was written).
    async fn crash(&mut self, id: u64) {
        let Some(r) = self.running.remove(&id) else {
            return;
        };
        {
            let mut w = lock(&self.world);
            w.rafts.remove(&id);
            w.locals.remove(&id);
        }
        {
            let mut m = self.members.lock().unwrap();
            m.running.remove(&id);
            // Its sequencer and writer end once they have answered what they hold.
            m.desks.remove(&id);
        }
        // The disk task still runs meanwhile: openraft may be waiting on its log.
        let _ = r.raft.shutdown().await;
        r.disk_task.abort();
        let torn = self.rng.gen_bool(0.5);
        if torn {
            r.disk.fail_next_sync();
            r.writer.lock().unwrap().run_queued();
        }
        let keep = if torn {
            self.rng.gen_range(0..=r.disk.unsynced())
        } else {
            0
        };
        let left = r.disk.crash(keep);
        self.event(format!(
            "member {id} crashed (torn write: {torn}, kept {keep} unsynced; {} records)",
            left.len()
        ));
        self.crashes += 1;
        let wipe = self.rng.gen_range(0..100) < self.wipe_odds;
        // One member without its data at a time: none wiped and not caught up yet, and
        // none still blank from the start (a member that never started holds nothing
        // either: it and a wiped member would be a majority of blanks, two disks lost
        // in effect, which no rule can tell from a first start).
        if wipe && self.amnesiac.is_none() && self.settling.is_empty() {
            self.boxes.insert(id, Durable::blank());
            self.amnesiac = Some(id);
            self.wipes += 1;
            self.event(format!("member {id}'s disk is lost: it restarts blank"));
            let mut w = lock(&self.world);
            w.disks.insert(id, MemDisk::default());
            w.lost.entry(id).or_default().push(MemDisk::with(&left));
        } else {
            // Down, its disk holds what survived (a torn tail's records included).
            lock(&self.world).disks.insert(id, MemDisk::with(&left));
            self.boxes.get_mut(&id).unwrap().records = left;
        }
    }

    /// Crashes the member that leads now, if one does, as a `kill -9` right after a
    /// blank member joined: before it has caught up.
    async fn crash_leader(&mut self) {
        if let Some(id) = self.leader().filter(|_| !self.healed) {
            self.event(format!(
                "the leader, member {id}, crashes as a blank member joins"
            ));
            self.crash(id).await;
            let out = self.rng.gen_range(5..200);
            self.down.insert(id, self.step + out);
        }
    }

    fn partition(&mut self, step: u64) {
        let n = self.ids.len();
        let mut cut = BTreeSet::new();
        let kind = self.rng.gen_range(0..4);
        let how = match kind {
            0 => {
                // One member cut off.
                let a = self.ids[self.rng.gen_range(0..n)];
                for &b in &self.ids {
                    if a != b {
                        cut.insert((a, b));
                        cut.insert((b, a));
                    }
                }
                format!("member {a} isolated")
            }
            1 => {
                // Two random sides.
                let side: BTreeSet<u64> = self
                    .ids
                    .iter()
                    .copied()
                    .filter(|_| self.rng.gen_bool(0.5))
                    .collect();
                for &a in &self.ids {
                    for &b in &self.ids {
                        if side.contains(&a) != side.contains(&b) {
                            cut.insert((a, b));
                        }
                    }
                }
                format!("split {side:?} from the rest")
            }
            2 => {
                // One direction of one link.
                let a = self.ids[self.rng.gen_range(0..n)];
                let b = self.ids[self.rng.gen_range(0..n)];
                if a != b {
                    cut.insert((a, b));
                }
                format!("link {a}->{b} cut")
            }
            _ => {
                // A member that reaches only one other (the others cannot reach it).
                let a = self.ids[self.rng.gen_range(0..n)];
                let keep = self.ids[self.rng.gen_range(0..n)];
                for &b in &self.ids {
                    if b != a && b != keep {
                        cut.insert((a, b));
                        cut.insert((b, a));
                    }
                }
                format!("member {a} reaches only {keep}")
            }
        };
        let lasts = self.rng.gen_range(30..300);
        self.heal_at = Some(step + lasts);
        self.partitions += 1;
        let mut w = lock(&self.world);
        w.cut = cut;
        w.event(format!("partition: {how}, for {lasts} steps"));
    }

    fn weather(&mut self) {
        let w = Weather {
            loss: *[0, 0, 10, 50, 200]
                .get(self.rng.gen_range(0..5))
                .unwrap_or(&0),
            dup: *[0, 10, 50].get(self.rng.gen_range(0..3)).unwrap_or(&0),
            late: *[0, 5, 30].get(self.rng.gen_range(0..3)).unwrap_or(&0),
            max_delay: *[1, 5, 20, 45].get(self.rng.gen_range(0..4)).unwrap_or(&1),
        };
        let mut world = lock(&self.world);
        world.weather = w;
        world.event(format!("weather {w:?}"));
    }

    /// Starts an election on a member that has heard from no leader for its timeout
    /// (and, rarely, on one that has: a spurious timeout), as openraft's own timer
    /// would, with the seed's timeouts.
    async fn elections(&mut self) {
        let now = self.now_ms();
        let ids: Vec<u64> = self.running.keys().copied().collect();
        for id in ids {
            let raft = self.running[&id].raft.clone();
            if raft.metrics().borrow_watched().state == ServerState::Leader {
                continue;
            }
            // As the server: a member whose catch-up gate is closed does not campaign
            // (`Local::may_campaign`; its openraft election timer is off meanwhile).
            let local = lock(&self.world).locals.get(&id).cloned();
            if local.is_some_and(|l| !l.may_campaign()) {
                continue;
            }
            let heard = lock(&self.world).heard.get(&id).copied().unwrap_or(0);
            let since = heard.max(self.elected_at.get(&id).copied().unwrap_or(0));
            let timeout = *self
                .timeout
                .entry(id)
                .or_insert_with(|| self.rng.gen_range(150..300));
            let spurious = self.rng.gen_range(0..1000) < 2;
            if now >= since + timeout || spurious {
                self.elected_at.insert(id, now);
                self.timeout.insert(id, self.rng.gen_range(150..300));
                self.event(format!(
                    "member {id} starts an election (spurious: {spurious})"
                ));
                let _ = raft.trigger().elect(false).await;
            }
        }
    }

    /// Leaders per term from every member's metrics, disk contract breaches, members
    /// openraft stopped.
    fn observe(&mut self) {
        let mut w = lock(&self.world);
        for (id, r) in &self.running {
            let m = r.raft.metrics().borrow_watched().clone();
            if m.state == ServerState::Leader {
                w.saw_leader(m.current_term, *id, "metrics");
            }
            if let Err(e) = &m.running_state {
                w.violation(format!("member {id} stopped: {e}"));
            }
            for e in r.disk.take_errors() {
                w.violation(format!("member {id}'s log writer: {e}"));
            }
        }
        if let Some(id) = self.amnesiac {
            // Its gate open and a log again (a member that rejoined a first start, before
            // any leader, has no target but no membership either until a leader sends
            // it: losing a second disk before then loses the ensemble's only copies of
            // the initial membership, two disks at once in effect).
            let caught_up = w.locals.get(&id).is_some_and(|l| {
                let last = l.view.last_log_id();
                l.gate.target().is_none() && last.is_some() && last >= self.catch_up
            });
            if caught_up {
                self.amnesiac = None;
                w.event(format!("member {id} has caught up after losing its disk"));
            }
        }
    }

    fn failed(&self) -> Option<Failure> {
        let first = lock(&self.world).violations.first().cloned();
        first.map(|v| self.failure(v))
    }

    /// A failure: what broke, with the latest events.
    fn failure(&self, what: String) -> Failure {
        let w = lock(&self.world);
        Failure {
            what,
            recent: w.trace.recent.iter().cloned().collect(),
        }
    }

    /// Draws the members' clocks: in half the runs all are right; otherwise each is
    /// right or off by 50 ms to 1.5 s either way, and jumps (by up to 2 s either way,
    /// never beyond 3 s off) at some odds per step.
    fn set_clocks(&mut self) {
        if self.clock_rng.gen_bool(0.5) {
            return;
        }
        self.jump_odds = [0, 2, 10][self.clock_rng.gen_range(0..3)];
        let mut w = lock(&self.world);
        for id in &self.ids {
            if self.clock_rng.gen_bool(0.5) {
                let off = self.clock_rng.gen_range(50..=1500);
                let off = if self.clock_rng.gen_bool(0.5) {
                    off
                } else {
                    -off
                };
                w.clocks.insert(*id, off);
            }
        }
        let clocks = format!("{:?}", w.clocks);
        w.event(format!(
            "clocks off by (ms) {clocks}, a jump {} per mille per step",
            self.jump_odds
        ));
    }

    /// One member's clock jumps forward or back.
    fn jump_clock(&mut self) {
        let id = self.ids[self.clock_rng.gen_range(0..self.ids.len())];
        let by = self.clock_rng.gen_range(-2000..=2000);
        let mut w = lock(&self.world);
        let from = w.clocks.get(&id).copied().unwrap_or(0);
        let to = (from + by).clamp(-3000, 3000);
        w.clocks.insert(id, to);
        w.event(format!(
            "member {id}'s clock jumps from {from} to {to} ms off"
        ));
    }

    /// One step of simulated time with faults.
    async fn faulty_step(&mut self, step: u64) {
        tokio::time::sleep(STEP).await;
        self.step = step;
        // Members due back.
        let back: Vec<u64> = self
            .down
            .iter()
            .filter(|(_, at)| **at <= step)
            .map(|(id, _)| *id)
            .collect();
        for id in back {
            self.down.remove(&id);
            self.start(id).await;
        }
        if self.heal_at.is_some_and(|at| at <= step) {
            self.heal_at = None;
            let mut w = lock(&self.world);
            w.cut.clear();
            w.event("partition healed".into());
        }
        if self.heal_at.is_none() && self.rng.gen_range(0..1000) < self.partition_odds {
            self.partition(step);
        }
        if self.rng.gen_range(0..1000) < self.weather_odds {
            self.weather();
        }
        if self.clock_rng.gen_range(0..1000) < self.jump_odds {
            self.jump_clock();
        }
        self.settle().await;
        if self.rng.gen_range(0..1000) < self.crash_odds {
            let up: Vec<u64> = self.running.keys().copied().collect();
            if !up.is_empty() {
                let id = up[self.rng.gen_range(0..up.len())];
                self.crash(id).await;
                let out = self.rng.gen_range(5..200);
                self.down.insert(id, step + out);
            }
        }
        self.elections().await;
        self.observe();
    }

    /// One step of simulated time without faults: blank members settle, elections,
    /// the checks.
    async fn calm_step(&mut self) -> Result<(), Failure> {
        tokio::time::sleep(STEP).await;
        self.settle().await;
        self.elections().await;
        self.observe();
        self.failed().map_or(Ok(()), Err)
    }

    /// The member that leads now, if one does.
    fn leader(&self) -> Option<u64> {
        self.running.iter().find_map(|(id, r)| {
            (r.raft.metrics().borrow_watched().state == ServerState::Leader).then_some(*id)
        })
    }

    /// Every member applied the leader's whole log, all agree on the leader.
    fn converged(&self) -> bool {
        if self.running.len() != self.ids.len() || self.amnesiac.is_some() {
            return false;
        }
        let ms: Vec<_> = self
            .running
            .values()
            .map(|r| r.raft.metrics().borrow_watched().clone())
            .collect();
        let Some(leader) = ms.iter().find(|m| m.state == ServerState::Leader) else {
            return false;
        };
        let last = leader.last_log_index;
        ms.iter().all(|m| {
            m.current_leader == Some(leader.id)
                && m.last_applied.map(|l| l.index) == last
                && m.last_log_index == last
        })
    }
}

/// Runs the simulation of `seed` (on the current runtime, which must be a
/// current-thread runtime with a paused clock).
pub async fn run(seed: u64, len: Length) -> Result<Outcome, Failure> {
    let mut rng = StdRng::seed_from_u64(seed);
    let n = if rng.gen_bool(0.25) { 5 } else { 3 };
    let ids: Vec<u64> = (1..=n).collect();
    let world = World::new(StdRng::seed_from_u64(rng.gen()));
    lock(&world).voters = ids.len();
    // From the seed's parity, not its RNG: every other draw of a seed stays as it was.
    lock(&world).streams = seed % 2 == 1;
    let members = Arc::new(Mutex::new(Members::default()));
    // Drawn in the order they always were: a seed runs as it did.
    let leader_crash_odds = [0, 50, 100][rng.gen_range(0..3)];
    let crash_odds = [0, 2, 5, 10][rng.gen_range(0..4)];
    let wipe_odds = [0, 20, 50][rng.gen_range(0..3)];
    let partition_odds = [0, 3, 10][rng.gen_range(0..3)];
    let weather_odds = [0, 5, 20][rng.gen_range(0..3)];
    let fsync_us = [1_000, 5_000, 30_000][rng.gen_range(0..3)];
    let mut sim = Sim::calm(world.clone(), ids.clone(), members.clone(), rng.gen(), seed);
    sim.leader_crash_odds = leader_crash_odds;
    sim.crash_odds = crash_odds;
    sim.wipe_odds = wipe_odds;
    sim.partition_odds = partition_odds;
    sim.weather_odds = weather_odds;
    sim.fsync_us = fsync_us;
    sim.set_clocks();
    // A member that starts late, blank, after the others have elected (the ensemble
    // counts it in its quorums, and it holds nothing: a member without its data until
    // it has caught up).
    let late = rng.gen_bool(0.25).then(|| ids[rng.gen_range(0..ids.len())]);
    sim.event(format!(
        "seed {seed}: {n} members, crash {} partition {} weather {} (per mille per step), \
         wipe {}% of crashes, fsync up to {} us, late start {late:?}, the leader crashes \
         after {}% of blank members' joins, appends {}",
        sim.crash_odds,
        sim.partition_odds,
        sim.weather_odds,
        sim.wipe_odds,
        sim.fsync_us,
        sim.leader_crash_odds,
        if lock(&world).streams {
            "pipelined"
        } else {
            "one at a time"
        }
    ));
    for id in ids.clone() {
        if Some(id) == late {
            sim.amnesiac = Some(id);
            let at = rng.gen_range(20..400);
            sim.down.insert(id, at);
        } else {
            sim.start(id).await;
        }
    }
    sim.weather();

    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..3 + n)
        .map(|c| {
            let client = Client::new(
                c,
                StdRng::seed_from_u64(rng.gen()),
                world.clone(),
                members.clone(),
                ledger.clone(),
                stop.clone(),
            );
            tokio::spawn(client.run(10_000))
        })
        .collect();

    for step in 0..len.faulty {
        sim.faulty_step(step).await;
        if let Some(f) = sim.failed() {
            return Err(f);
        }
    }

    // Heal: no partition, a calm network, every member back; clients stop.
    stop.store(true, Ordering::SeqCst);
    sim.healed = true;
    {
        let mut w = lock(&world);
        w.cut.clear();
        w.weather = Weather {
            max_delay: 2,
            ..Weather::default()
        };
        w.event("healed: no faults from here".into());
    }
    let down: Vec<u64> = std::mem::take(&mut sim.down).into_keys().collect();
    for id in down {
        sim.start(id).await;
    }
    let mut settled = false;
    for _ in 0..len.settle {
        sim.calm_step().await?;
        if clients.iter().all(|c| c.is_finished()) && sim.converged() {
            settled = true;
            break;
        }
    }
    if !settled {
        let states: Vec<String> = sim
            .running
            .iter()
            .map(|(id, r)| {
                let m = r.raft.metrics().borrow_watched().clone();
                format!(
                    "{id}: {:?} term {} leader {:?} log {:?} applied {:?}",
                    m.state, m.current_term, m.current_leader, m.last_log_index, m.last_applied
                )
            })
            .collect();
        let w = lock(&world);
        return Err(Failure {
            what: format!(
                "liveness: not converged {} steps after healing: {states:?}",
                len.settle
            ),
            recent: w.trace.recent.iter().cloned().collect(),
        });
    }
    let outcome = final_checks(&sim, &ledger.lock().unwrap());
    for id in sim.ids.clone() {
        sim.crash(id).await;
    }
    outcome
}

/// After healing: one history on every member, every acknowledged write in it once,
/// each session's writes in the order it sent them.
fn final_checks(sim: &Sim, ledger: &Ledger) -> Result<Outcome, Failure> {
    let fail = |what: String| {
        let w = lock(&sim.world);
        Failure {
            what,
            recent: w.trace.recent.iter().cloned().collect(),
        }
    };
    let histories: Vec<(u64, Vec<host::Rec>)> = sim
        .running
        .iter()
        .map(|(id, r)| (*id, host::lock(&r.host.inner).history.clone()))
        .collect();
    let applied = crate::check::histories(&histories, ledger).map_err(fail)?;
    let w = lock(&sim.world);
    Ok(Outcome {
        trace_hash: w.trace.hash,
        events: w.trace.events,
        members: sim.ids.len(),
        acked: ledger.acked.len(),
        unknown: ledger.unknown.len(),
        applied,
        groups: ledger.groups.len(),
        refused: ledger.refused,
        through_writer: ledger.through_writer,
        pipelined: ledger.pipelined,
        forwards: w.forwards,
        leaders: w.leaders.len(),
        shared_terms: {
            let terms: BTreeSet<u64> = w.leaders.iter().map(|(t, _)| *t).collect();
            w.leaders.len() - terms.len()
        },
        crashes: sim.crashes,
        wipes: sim.wipes,
        partitions: sim.partitions,
        lasted_checks: w.lasted_checks.clone(),
    })
}

/// A leader's lease lapses and comes back under the same leadership, between two writes
/// of one submitter (`submit::Submitter`): the first is refused, and the second must be
/// refused too, or it lands without the one before it (openraft takes it: the leader's
/// log appends it empty, and it is answered as refused). Three calm members; once one
/// leads, its followers' replies to it are cut (they still hear its heartbeats, so none
/// campaigns) until its lease has run out, then let through again. Returns what
/// happened, step by step.
pub async fn lease_lapse() -> Result<Vec<String>, Failure> {
    let ids: Vec<u64> = vec![1, 2, 3];
    let world = World::new(StdRng::seed_from_u64(1));
    lock(&world).voters = ids.len();
    let members = Arc::new(Mutex::new(Members::default()));
    let mut sim = Sim::calm(world.clone(), ids.clone(), members, 2, 3);
    for id in ids.clone() {
        sim.start(id).await;
    }
    // An elected leader every member follows, its first entries applied.
    let mut leader = None;
    for _ in 0..1_000 {
        sim.calm_step().await?;
        if sim.converged() {
            leader = sim.leader();
            break;
        }
    }
    let Some(l) = leader else {
        return Err(sim.failure("no leader within 10 s".into()));
    };
    let raft = sim.running[&l].raft.clone();
    let host = sim.running[&l].host.clone();
    let term = raft.metrics().borrow_watched().current_term;
    let mut said = Vec::new();
    let mut xid = 0;
    let mut session = |world: &Shared| {
        xid += 1;
        let t = zlock_core::Txn::new(
            zlock_core::Origin {
                member: zlock_core::MemberId(100),
                session: zlock_core::SessionId(0),
                xid,
            },
            0,
            zlock_core::TxnBody::CreateSession {
                passwd: vec![7; 16],
                timeout_ms: 30_000,
            },
        );
        lock(world).stamp(l, std::slice::from_ref(&t));
        (
            xid,
            vec![zlock_server::commit::raft::types::Proposal::from(vec![t])],
        )
    };
    let patience = Duration::from_secs(2);
    let mut submitter = zlock_server::commit::raft::submit::Submitter::new(raft.clone(), l);

    // 1. Taken while the lease runs.
    let (x1, p) = session(&world);
    let r = tokio::time::timeout(patience, submitter.submit(p, 0).await).await;
    said.push(format!("write {x1}, lease running: {r:?}"));
    if !matches!(r, Ok(Ok(_))) {
        return Err(sim.failure(format!("{said:?}")));
    }

    // 2. The followers' replies cut for longer than the lease: refused.
    {
        let mut w = lock(&world);
        for f in ids.iter().filter(|&&f| f != l) {
            w.cut.insert((*f, l));
        }
        w.event(format!("the followers' replies to leader {l} are cut"));
    }
    tokio::time::sleep(Duration::from_millis(450)).await;
    let (x2, p) = session(&world);
    let r = tokio::time::timeout(patience, submitter.submit(p, 0).await).await;
    said.push(format!("write {x2}, lease lapsed: {r:?}"));
    if !matches!(
        r,
        Ok(Err(
            zlock_server::commit::raft::peer::ForwardError::NotLeader(_)
        ))
    ) {
        return Err(sim.failure(format!("{said:?}")));
    }

    // 3. The replies let through again, the lease renewed: the same submitter still
    // refuses (it refused the one before), ...
    {
        let mut w = lock(&world);
        w.cut.clear();
        w.event("the followers' replies are let through again".into());
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    // (two writes handed over before either is answered: the first is appended empty
    // for the refusal before it, the second for following one appended empty)
    let (x3, p) = session(&world);
    let first = submitter.submit(p, 0).await;
    let (x3b, p) = session(&world);
    let second = submitter.submit(p, 0).await;
    let r = tokio::time::timeout(patience, first).await;
    let rb = tokio::time::timeout(patience, second).await;
    said.push(format!(
        "writes {x3} and {x3b}, same submitter, lease renewed: {r:?}, {rb:?}"
    ));
    let refused = [r, rb].iter().all(|r| {
        matches!(
            r,
            Ok(Err(
                zlock_server::commit::raft::peer::ForwardError::NotLeader(_)
            ))
        )
    });

    // 4. ... while a new one, under the same leadership, is taken (so the lease had come
    // back, and the refusal above was the submitter's own rule).
    let mut fresh = zlock_server::commit::raft::submit::Submitter::new(raft.clone(), l);
    let (x4, p) = session(&world);
    let r = tokio::time::timeout(patience, fresh.submit(p, 0).await).await;
    said.push(format!("write {x4}, new submitter: {r:?}"));
    let m = raft.metrics().borrow_watched().clone();
    said.push(format!(
        "leader {l} in term {term}; now {:?} in term {}",
        m.current_leader, m.current_term
    ));
    if !matches!(r, Ok(Ok(_))) || m.current_term != term || m.current_leader != Some(l) {
        return Err(sim.failure(format!("the lease did not come back as planned: {said:?}")));
    }
    if !refused {
        return Err(sim.failure(format!(
            "a write was taken after the one before it was refused: {said:?}"
        )));
    }
    // What the leader applied: the first and the last, not the two between.
    let created: Vec<i32> = {
        let h = host::lock(&host.inner);
        [x1, x2, x3, x3b, x4]
            .into_iter()
            .filter(|x| h.created.contains_key(&(100, *x)))
            .collect()
    };
    said.push(format!("sessions made by writes {created:?}"));
    if created != vec![x1, x4] {
        return Err(sim.failure(format!("{said:?}")));
    }
    for id in ids {
        sim.crash(id).await;
    }
    Ok(said)
}
