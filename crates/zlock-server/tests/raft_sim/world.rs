//! What the simulated members, network and clients share: the network's state, the
//! event trace, and what the checks have found. One `Arc<Mutex<World>>`, never held
//! across an await.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use rand::rngs::StdRng;
use rand::Rng;
use zlock_server::commit::raft::codec;
use zlock_server::commit::raft::peer::Local;
use zlock_server::commit::raft::types::{Entry, Raft};
use zlock_server::commit::raft::write::WallClock;

use crate::disk::MemDisk;

/// How the network treats messages in the current phase (per mille, milliseconds).
#[derive(Debug, Clone, Copy, Default)]
pub struct Weather {
    /// A request or a reply is lost.
    pub loss: u32,
    /// A request is delivered twice.
    pub dup: u32,
    /// A message is late: held 40-400 ms (after its sender gave up on it).
    pub late: u32,
    /// The usual one-way delay, 0..=max_delay ms.
    pub max_delay: u64,
}

/// The event trace: a hash of every event (to compare two runs of one seed) and the
/// latest few, printed when a seed fails.
#[derive(Default)]
pub struct Trace {
    pub hash: u64,
    pub events: u64,
    pub recent: VecDeque<String>,
}

const RECENT: usize = 80;

/// `ZLOCK_SIM_TRACE=1` prints every event as it happens.
static PRINT: std::sync::LazyLock<bool> =
    std::sync::LazyLock::new(|| std::env::var_os("ZLOCK_SIM_TRACE").is_some());

impl Trace {
    pub fn add(&mut self, now_ms: u64, event: String) {
        // FNV-1a: fixed, so one seed hashes the same in every run and build.
        let mut h = if self.events == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.hash
        };
        for b in now_ms.to_le_bytes().iter().chain(event.as_bytes()) {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        self.hash = h;
        self.events += 1;
        if *PRINT {
            eprintln!("{now_ms:>7} ms  {event}");
        }
        if self.recent.len() == RECENT {
            self.recent.pop_front();
        }
        self.recent.push_back(format!("{now_ms:>7} ms  {event}"));
    }
}

/// What one log position held when a member first applied it: every member (and every
/// later run of one) must apply the same there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fact {
    /// The Txn's encoding (empty: not a Txn).
    pub txn: Vec<u8>,
    /// Its outcome: reply code and body, and the grants it made.
    pub outcome: String,
}

pub struct World {
    /// The network's randomness (one stream: tasks run in a fixed order).
    pub rng: StdRng,
    pub weather: Weather,
    /// Cut links, `(from, to)`: a message on one is lost.
    pub cut: BTreeSet<(u64, u64)>,
    /// The running members' Rafts: where messages are delivered.
    pub rafts: BTreeMap<u64, Raft>,
    /// Their logs' ends and catch-up gates (what the peer server reads besides Raft).
    pub locals: BTreeMap<u64, Local>,
    /// When each member last took an AppendEntries from a leader (for the elections
    /// the simulation triggers).
    pub heard: BTreeMap<u64, u64>,
    pub trace: Trace,
    /// The first applied fact at each log position (and place in its entry).
    pub applied: BTreeMap<(u64, usize), Fact>,
    /// The voters (all members).
    pub voters: usize,
    /// Every member's disk, up or down: after a crash what it kept, after a wipe a
    /// blank one, none before its first start. [`World::check_durable`] reads them.
    pub disks: BTreeMap<u64, MemDisk>,
    /// The disks each member lost, as they were when lost: what they held had been
    /// durable on them, and still counts in [`World::check_durable`].
    pub lost: BTreeMap<u64, Vec<MemDisk>>,
    /// Granted votes: who granted each leader id `(term, candidate)`.
    pub grants: BTreeMap<(u64, u64), BTreeSet<u64>>,
    /// Each member's latest granted vote (kept across its restarts).
    pub granted: BTreeMap<u64, (u64, u64)>,
    /// Leaders seen, by leader id `(term, member)` (from every member's metrics and
    /// every AppendEntries).
    pub leaders: BTreeSet<(u64, u64)>,
    pub violations: Vec<String>,
    /// The simulated time, in ms since the start.
    pub start: tokio::time::Instant,
    /// Each member's wall clock: its offset (ms) from the simulated time (a member not
    /// listed is right). Drawn per run, and jumped now and then (`Sim::jump_clock`).
    pub clocks: BTreeMap<u64, i64>,
    /// When each Txn was stamped, by its origin `(member, session, xid)`: the simulated
    /// time, and the offset of the clock of the member that stamped it as leader.
    pub stamps: BTreeMap<(u64, i64, i32), (u64, i64)>,
    /// The highest offset of any member's clock when it stamped a Txn as leader.
    pub max_stamp_offset: i64,
    /// How many ends [`World::check_lasted`] checked, by kind.
    pub lasted_checks: BTreeMap<&'static str, usize>,
    /// Whether appends go as pipelined streams (one simulated connection each, in
    /// order, several in flight, as `commit::raft::stream` sends them) or one at a
    /// time as messages (lost, late, duplicated independently): half the seeds each.
    pub streams: bool,
    /// How many times each member has started: a forwarding connection to one lives as
    /// long as the incarnation it was opened to (`forward`).
    pub incarnations: BTreeMap<u64, u64>,
    /// Frames leaders took from forwarding connections, and frames refused there for
    /// coming on a stale connection (`submit::Fence`).
    pub forwards: (usize, usize),
}

/// Wall-clock time at the simulation's start (ms since the epoch).
pub const EPOCH_MS: i64 = 1_700_000_000_000;

pub type Shared = Arc<Mutex<World>>;

impl World {
    pub fn new(rng: StdRng) -> Shared {
        Arc::new(Mutex::new(World {
            rng,
            weather: Weather::default(),
            cut: BTreeSet::new(),
            rafts: BTreeMap::new(),
            locals: BTreeMap::new(),
            heard: BTreeMap::new(),
            trace: Trace::default(),
            applied: BTreeMap::new(),
            voters: 0,
            disks: BTreeMap::new(),
            lost: BTreeMap::new(),
            grants: BTreeMap::new(),
            granted: BTreeMap::new(),
            leaders: BTreeSet::new(),
            violations: Vec::new(),
            start: tokio::time::Instant::now(),
            clocks: BTreeMap::new(),
            stamps: BTreeMap::new(),
            max_stamp_offset: 0,
            lasted_checks: BTreeMap::new(),
            streams: false,
            incarnations: BTreeMap::new(),
            forwards: (0, 0),
        }))
    }

    pub fn now_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    /// `member`'s wall clock now (ms since the epoch).
    pub fn clock_of(&self, member: u64) -> i64 {
        EPOCH_MS + self.now_ms() as i64 + self.clocks.get(&member).copied().unwrap_or(0)
    }

    /// Records that `leader` stamps `txns` now (see [`World::stamps`]).
    pub fn stamp(&mut self, leader: u64, txns: &[zlock_core::Txn]) {
        let offset = self.clocks.get(&leader).copied().unwrap_or(0);
        let now = self.now_ms();
        for t in txns {
            let o = t.origin;
            self.stamps
                .insert((o.member.0, o.session.0, o.xid), (now, offset));
        }
        self.max_stamp_offset = self.max_stamp_offset.max(offset);
    }

    /// Something that must last `length` ms of the leaders' time (a lock-delay, until a
    /// grant; a TTL node, from its last change until its removal as expired), started
    /// by the Txn of origin `start` and ended by the Txn of origin `end`: the end must
    /// come no sooner than `length` after the start, in simulated (true) time, less what
    /// the leaders' clocks being ahead of the start's stamper can take off it (a
    /// follower's clock takes nothing off: leaders stamp every Txn). Ended early, a
    /// lock-delay lets the next holder in while a paused holder may still act; a TTL
    /// node goes while its owner still counts on it.
    pub fn check_lasted(
        &mut self,
        kind: &'static str,
        what: &str,
        length: i64,
        start: (u64, i64, i32),
        end: (u64, i64, i32),
    ) {
        let (Some(&(started, off)), Some(&(ended, _))) =
            (self.stamps.get(&start), self.stamps.get(&end))
        else {
            return;
        };
        *self.lasted_checks.entry(kind).or_default() += 1;
        let slack = (self.max_stamp_offset - off).max(0);
        let lasted = ended as i64 - started as i64;
        if lasted < length - slack {
            self.violation(format!(
                "{kind} {what} of {length} ms ended after {lasted} ms (the leaders' clocks allow \
                 {slack} ms less)"
            ));
        }
    }

    pub fn event(&mut self, e: String) {
        let now = self.now_ms();
        self.trace.add(now, e);
    }

    pub fn violation(&mut self, v: String) {
        self.event(format!("VIOLATION {v}"));
        self.violations.push(v);
    }

    /// Records that `member` granted its vote to the leader id `(term, candidate)`:
    /// a member's grants only rise (openraft orders leader ids by term, then member),
    /// restarts included, or its vote was not durable.
    pub fn saw_grant(&mut self, member: u64, term: u64, candidate: u64) {
        let id = (term, candidate);
        if let Some(last) = self.granted.get(&member).copied() {
            if id < last {
                self.violation(format!(
                    "member {member} granted its vote to {id:?} after granting it to {last:?}"
                ));
            }
        }
        self.granted.insert(member, id);
        self.grants.entry(id).or_default().insert(member);
    }

    /// Records that `leader` leads `term`. Election safety in openraft's terms: a
    /// leader id `(term, leader)` leads only once a quorum granted it (the grants
    /// delivered are a superset of those the candidate counted). Two leaders of one
    /// term are not a violation: openraft's default ("advanced") leader ids allow
    /// that, the higher member id superseding (its `single-term-leader` feature would
    /// not, and changes the log's format).
    pub fn saw_leader(&mut self, term: u64, leader: u64, how: &str) {
        if !self.leaders.insert((term, leader)) {
            return;
        }
        self.event(format!("leader {leader} of term {term} ({how})"));
        let mut voted = self
            .grants
            .get(&(term, leader))
            .cloned()
            .unwrap_or_default();
        voted.insert(leader);
        if voted.len() <= self.voters / 2 {
            self.violation(format!(
                "member {leader} leads term {term} with the votes of {voted:?} only"
            ));
        }
    }

    /// Nothing visible before a majority has it on disk: `member` applies `entry` (so
    /// may reply, fire a watch, grant a lock), which must already be synced, the same
    /// record at the same index, on a majority of the voters' disks. Checked as it
    /// applies: a crash or a truncation later may take copies away. A disk lost in a
    /// wipe still counts with what it held when lost: the copy was made, and a lagging
    /// member (or one restarted, which applies from the start) may apply an entry
    /// after a wipe took one of its copies, and a leader may count an acknowledgement
    /// that was on its way when the disk went (no leader can tell it from a live
    /// member's); the rejoin protocol, not the commit, is what restores the copies.
    pub fn check_durable(&mut self, member: u64, entry: &Entry) {
        let index = entry.log_id.index;
        let record = match codec::encode_entry(entry) {
            Ok(r) => r,
            Err(e) => {
                self.violation(format!("member {member} applied {index}: encoding: {e}"));
                return;
            }
        };
        // The Raft entry's WAL index (`commit::raft::log`).
        let at = index + 1;
        let mut durable = Vec::new();
        let mut other = Vec::new();
        for (id, disk) in &self.disks {
            let mut lost = self.lost.get(id).into_iter().flatten();
            if lost.any(|d| d.durable_at(at).as_ref() == Some(&record)) {
                durable.push(format!("{id} (on a disk it lost)"));
                continue;
            }
            match disk.durable_at(at) {
                Some(r) if r == record => durable.push(id.to_string()),
                Some(r) => {
                    let held = codec::decode_entry(&r)
                        .map_or_else(|e| format!("undecodable: {e}"), |e| e.log_id.to_string());
                    other.push(format!("member {id} {held}"));
                }
                None => {}
            }
        }
        if durable.len() <= self.voters / 2 {
            self.violation(format!(
                "member {member} applied {index} ({}) durable on [{}] only, of {} voters \
                 (other entries durable there: {other:?})",
                entry.log_id,
                durable.join(", "),
                self.voters
            ));
        }
    }

    /// A draw of `per_mille` odds.
    pub fn odds(&mut self, per_mille: u32) -> bool {
        per_mille > 0 && self.rng.gen_range(0..1000) < per_mille
    }
}

/// `member`'s wall clock, as it stamps Txns (its writer's, or as a leader taking
/// forwarded frames): each reading raises `World::max_stamp_offset` to its offset.
pub fn wall_of(world: &Shared, member: u64) -> WallClock {
    let world = world.clone();
    Arc::new(move || {
        let mut w = lock(&world);
        let off = w.clocks.get(&member).copied().unwrap_or(0);
        w.max_stamp_offset = w.max_stamp_offset.max(off);
        w.clock_of(member)
    })
}

pub fn lock(w: &Shared) -> MutexGuard<'_, World> {
    w.lock().unwrap_or_else(|p| p.into_inner())
}
