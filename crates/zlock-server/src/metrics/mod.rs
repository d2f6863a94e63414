//! Prometheus metrics over HTTP, the ZooKeeper 3.9 way: ZooKeeper's names, types and
//! labels, so that the "ZooKeeper by Prometheus" Grafana dashboard and the alert rules
//! of ZooKeeper's monitoring guide (`zookeeperMonitor.md`) work unchanged; plus zlock's
//! own lock metrics, prefixed `zlock_`. Off unless configured ([`MetricsConfig`]).
//!
//! # How ZooKeeper exports, and how zlock does the same
//!
//! ZooKeeper's Prometheus provider (`PrometheusMetricsProvider`, Prometheus simpleclient
//! 0.9) registers every metric under its bare name (no prefix, no `_total` added to a
//! counter), help text = name; a set (`CounterSet`, `SummarySet`, `GaugeSet`) has one
//! label, `key`. Summaries are rolling (10 minutes, 5 age buckets) with quantile 0.5 at
//! the BASIC detail level and 0.5, 0.9, 0.99 at ADVANCED, plus `_sum` and `_count`.
//! Gauges are callbacks sampled at scrape time.
//!
//! zlock renders with `metrics-exporter-prometheus` (text format 0.0.4, counters without
//! a suffix): one recorder for the ADVANCED summaries and everything else, one whose
//! quantile is 0.5 alone for the BASIC summaries, and two of gauges rendered only where
//! ZooKeeper registers them: on an ensemble member, and on the leader. Summaries roll
//! over 5 buckets of 2 minutes, as ZooKeeper's do.
//!
//! On the request path there are only counter updates: relaxed atomic adds into
//! [`Stats`] (already there for `mntr`), and a summary's observation, a lock-free append
//! to its bucket. Everything else is read at scrape time: the applied state through the
//! same sequencer query that `mntr` takes (`Item::Scrape`, answered in commit order
//! under the core's lock, which is held only to copy numbers and an O(1) copy of the
//! znodes; `approximate_data_size` is summed over that copy afterwards, off the lock).
//! The summaries' buckets are drained every 5 s ([`UPKEEP`]) whether or not anyone
//! scrapes, so memory stays bounded.
//!
//! # ZooKeeper's names exported
//!
//! - Gauges, every server: `avg_latency`, `min_latency`, `max_latency` (ms, since start
//!   or `srst`), `packets_received`, `packets_sent` (gauges in ZooKeeper too: `srst`
//!   resets them), `num_alive_connections`, `outstanding_requests` (queued for the
//!   sequencer plus waiting for their commit), `uptime` (ms), `znode_count`,
//!   `watch_count`, `ephemerals_count`, `approximate_data_size`, `global_sessions`,
//!   `local_sessions` (always 0: zlock has no local sessions, as ZooKeeper with
//!   `localSessionsEnabled=false`), and on Linux `open_file_descriptor_count`,
//!   `max_file_descriptor_count` (from `/proc/self`).
//! - Counters: `bytes_received_count`, `response_bytes`, `watch_bytes` (native lock
//!   grants count here too: zlock's notification of the same kind),
//!   `connection_request_count`, `connection_rejected` (`maxClientCnxns`),
//!   `stale_sessions_expired`, `looking_count` (0 on a single node, as in ZooKeeper),
//!   `snapshot_error_count`, `snapshot_rate_limited_count`, `restore_error_count`,
//!   `restore_rate_limited_count` (the AdminServer's `snapshot` and `restore`,
//!   ZooKeeper 3.9's).
//! - Summaries, 0.5/0.9/0.99: `readlatency`, `updatelatency` (ms, received to answered).
//! - Summaries, 0.5: `fsynctime` (ms per fsync of the log: the WAL's on a single node,
//!   the Raft log's on a member), `sync_processor_batch_size` (records per fsync, the
//!   group commit: Txns on a single node, log entries, each a proposed batch of Txns,
//!   on a member), `snapshottime` (ms; the single node's snapshots: a member's, which
//!   openraft asks for, are not timed yet), `election_time` (ms without a known leader
//!   until one is known, seen every 100 ms; count 0 on a single node, as in ZooKeeper).
//! - Ensemble members: `quorum_size` (voters), `synced_observers` (on the leader, the
//!   observers replicating close behind it; 0 elsewhere).
//! - The leader only: `learners` (followers and observers), `synced_followers`, `synced_non_voting_followers` (0),
//!   `pending_syncs`, `leader_uptime` (ms since it became leader).
//!
//! # ZooKeeper's names not exported, and why
//!
//! - JVM metrics (`jvm_*`, `process_*` of simpleclient_hotspot, `jvm_pause_time_ms`):
//!   there is no JVM; `exportJvmInfo` is ignored. The guide's `JvmMemoryFillingUp` rule
//!   has nothing to match.
//! - Stages zlock does not have: the prep, commit and final processors' queues and
//!   times (`prep_processor_*`, `*_commit_proc_*`, `*commitproc_time_ms`,
//!   `write_batch_time_in_commit_processor`, `read_final_proc_time_ms`, ...), the
//!   session queues (`requests_in_session_queue`, ...), `outstanding_changes_*`
//!   (zlock validates at apply: ARCHITECTURE.md), the response cache, the request and
//!   connection throttles (`throttled_ops`, `connection_token_deficit`, ...), TLS and
//!   SASL (`outstanding_tls_handshake`, `ensemble_auth_*`, `non_mtls_*`), quotas
//!   (`quota_*_per_namespace`), `digest_mismatches_count` (no digests), Netty buffers.
//! - ZooKeeper's quorum protocol, which Raft replaces: `proposal_*`, `ack_latency`,
//!   `quorum_ack_latency`, `commit_count`, `learner_*`, `diff_count`, `snap_count`,
//!   `follower_sync_time`, `observer_sync_time`, `inflight_*_count`,
//!   `last/min/max_proposal_size`, `commit_propagation_latency`,
//!   `propagation_latency`, `quit_leading_due_to_disloyal_voter`. Raft's own facts are
//!   in `zlock_raft_term` and `zlock_raft_last_log_index`.
//! - Not counted yet: `dbinittime`, `startup_*`, `restore_*`, `snapshot_error_count`,
//!   `unrecoverable_error_count`, `auth_failed_count`, `*_client_response_size`,
//!   `node_*_watch_count`, `read/write_per_namespace`, `connection_drop_*`,
//!   `revalidate_count`, `sessionless_connections_expired`, `unsuccessful_handshake`,
//!   `large_requests_rejected`, `stale_requests*`, `stale_replies`, `socket_closing_time`.
//!   Each is a counter or a summary in the place where it happens; none is needed by
//!   the dashboard or the guide's rules.
//!
//! # zlock's own
//!
//! - `zlock_native_lock_waiters` (gauge): native lock requests waiting for their grant.
//! - `zlock_lock_paths` (gauge): lock paths the native lock index follows.
//! - `zlock_lock_delays_running` (gauge): lock paths held back by a lock-delay.
//! - `zlock_lock_holders` (gauge): nodes under followed lock paths that hold (nothing
//!   before them blocks them: a granted native contender, or a standard-recipe one
//!   whose turn has come).
//! - `zlock_lock_longest_wait_ms` (gauge): how long the longest-waiting native lock
//!   request has waited (from its node's creation), 0 when none waits. The one to alert
//!   on for a stuck lock.
//! - `zlock_native_lock_requests_total` (counter): native lock requests received here.
//! - `zlock_native_lock_grants_total` (counter): grants pushed by this member (each one
//!   hand-over to a waiter connected here).
//! - `zlock_native_lock_failures_total` (counter): native lock requests of this member
//!   answered with an error (no node, bad arguments, a lock of another kind, ...).
//! - `zlock_lock_handover_ms` (summary, 0.5/0.9/0.99): from the releasing Txn's time
//!   (fixed when this member sequenced it) to the grant queued for the waiter; on the
//!   member that proposed the release (a release's commit and apply, as the waiter
//!   sees it, less the network).
//! - `zlock_raft_term`, `zlock_raft_last_log_index` (gauges, ensemble members).
//!
//! Not counted: lock timeouts (a client that stops waiting deletes its node: the server
//! cannot tell a timeout from a give-up), lock holders and the longest wait (the lock
//! index keeps neither a holder count nor a waiter's start time; a later change).

pub(crate) mod http;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use metrics::{Counter, Gauge, Histogram};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle, PrometheusRecorder};

use crate::config::MetricsConfig;
use crate::stats::{Stats, Timings};

pub(crate) use http::serve;

/// How often the summaries' buckets are drained into them.
pub(crate) const UPKEEP: Duration = Duration::from_secs(5);

pub(crate) use crate::pipeline::Scrape;

/// A recorder and the handle that renders it.
struct Part {
    recorder: PrometheusRecorder,
    handle: PrometheusHandle,
}

impl Part {
    /// A recorder whose summaries have `quantiles` and roll over 5 buckets of 2 minutes.
    fn new(quantiles: &[f64]) -> Part {
        let five = std::num::NonZeroU32::new(5).unwrap_or(std::num::NonZeroU32::MIN);
        // These fail only on no quantiles or a zero duration, never with these constants.
        let builder = PrometheusBuilder::new()
            .set_bucket_count(five)
            .set_bucket_duration(Duration::from_secs(120))
            .and_then(|b| b.set_quantiles(quantiles))
            .unwrap_or_else(|_| PrometheusBuilder::new());
        let recorder = builder.build_recorder();
        let handle = recorder.handle();
        Part { recorder, handle }
    }

    fn gauge(&self, name: &'static str, help: &'static str) -> Gauge {
        metrics::with_local_recorder(&self.recorder, || {
            metrics::describe_gauge!(name, help);
            metrics::gauge!(name)
        })
    }

    fn counter(&self, name: &'static str, help: &'static str) -> Counter {
        metrics::with_local_recorder(&self.recorder, || {
            metrics::describe_counter!(name, help);
            metrics::counter!(name)
        })
    }

    fn summary(&self, name: &'static str, help: &'static str) -> Histogram {
        metrics::with_local_recorder(&self.recorder, || {
            metrics::describe_histogram!(name, help);
            metrics::histogram!(name)
        })
    }
}

/// Every metric this member exports, and the recorders that render them.
pub(crate) struct Registry {
    /// ADVANCED summaries (0.5, 0.9, 0.99), counters and gauges.
    main: Part,
    /// BASIC summaries (0.5).
    basic: Part,
    /// Rendered on ensemble members only.
    quorum: Part,
    /// Rendered on the leader only.
    leader: Part,
    timings: Timings,
    g: Gauges,
    c: Counters,
}

struct Gauges {
    avg_latency: Gauge,
    min_latency: Gauge,
    max_latency: Gauge,
    packets_received: Gauge,
    packets_sent: Gauge,
    num_alive_connections: Gauge,
    outstanding_requests: Gauge,
    uptime: Gauge,
    znode_count: Gauge,
    watch_count: Gauge,
    ephemerals_count: Gauge,
    approximate_data_size: Gauge,
    global_sessions: Gauge,
    local_sessions: Gauge,
    open_fds: Option<(Gauge, Gauge)>,
    lock_waiters: Gauge,
    lock_paths: Gauge,
    lock_delays: Gauge,
    lock_holders: Gauge,
    lock_longest_wait: Gauge,
    quorum_size: Gauge,
    synced_observers: Gauge,
    raft_term: Gauge,
    raft_last_log_index: Gauge,
    learners: Gauge,
    synced_followers: Gauge,
    synced_non_voting_followers: Gauge,
    pending_syncs: Gauge,
    leader_uptime: Gauge,
}

struct Counters {
    bytes_received: Counter,
    response_bytes: Counter,
    watch_bytes: Counter,
    connection_requests: Counter,
    connections_rejected: Counter,
    sessions_expired: Counter,
    looking: Counter,
    lock_requests: Counter,
    lock_grants: Counter,
    lock_failures: Counter,
    snapshot_errors: Counter,
    snapshots_rate_limited: Counter,
    restore_errors: Counter,
    restores_rate_limited: Counter,
}

impl Registry {
    pub fn new() -> Registry {
        let main = Part::new(&[0.5, 0.9, 0.99]);
        let basic = Part::new(&[0.5]);
        let quorum = Part::new(&[0.5]);
        let leader = Part::new(&[0.5]);
        let timings = Timings {
            update: main.summary("updatelatency", "Write latency, ms: received to answered."),
            read: main.summary("readlatency", "Read latency, ms: received to answered."),
            handover: main.summary(
                "zlock_lock_handover_ms",
                "Native lock hand-over, ms: the releasing Txn's time to the grant queued \
                 (on the member that proposed the release).",
            ),
            fsync: basic.summary("fsynctime", "One fsync of the log, ms."),
            batch: basic.summary(
                "sync_processor_batch_size",
                "Records made durable by one fsync of the log (group commit): Txns, or \
                 Raft entries on an ensemble member.",
            ),
            snapshot: basic.summary("snapshottime", "Writing one snapshot, ms."),
            election: basic.summary(
                "election_time",
                "Time without a known leader until one was known, ms (ensemble members).",
            ),
        };
        let fds = cfg!(target_os = "linux").then(|| {
            (
                main.gauge("open_file_descriptor_count", "Open file descriptors."),
                main.gauge("max_file_descriptor_count", "The file descriptor limit."),
            )
        });
        let g = Gauges {
            avg_latency: main.gauge("avg_latency", "Average request latency, ms."),
            min_latency: main.gauge("min_latency", "Smallest request latency, ms."),
            max_latency: main.gauge("max_latency", "Largest request latency, ms."),
            packets_received: main.gauge("packets_received", "Client packets received."),
            packets_sent: main.gauge("packets_sent", "Client packets sent."),
            num_alive_connections: main.gauge("num_alive_connections", "Client connections."),
            outstanding_requests: main.gauge(
                "outstanding_requests",
                "Requests received and not answered yet.",
            ),
            uptime: main.gauge("uptime", "Time since the server started, ms."),
            znode_count: main.gauge("znode_count", "Znodes."),
            watch_count: main.gauge("watch_count", "Watches."),
            ephemerals_count: main.gauge("ephemerals_count", "Ephemeral znodes."),
            approximate_data_size: main
                .gauge("approximate_data_size", "Bytes of znode paths and data."),
            global_sessions: main.gauge("global_sessions", "Sessions."),
            local_sessions: main.gauge("local_sessions", "Local sessions (none in zlock)."),
            open_fds: fds,
            lock_waiters: main.gauge(
                "zlock_native_lock_waiters",
                "Native lock requests waiting for their grant.",
            ),
            lock_paths: main.gauge(
                "zlock_lock_paths",
                "Lock paths the native lock index follows.",
            ),
            lock_delays: main.gauge(
                "zlock_lock_delays_running",
                "Lock paths held back by a running lock-delay.",
            ),
            lock_holders: main.gauge(
                "zlock_lock_holders",
                "Nodes under followed lock paths that hold their lock.",
            ),
            lock_longest_wait: main.gauge(
                "zlock_lock_longest_wait_ms",
                "How long the longest-waiting native lock request has waited, ms.",
            ),
            quorum_size: quorum.gauge("quorum_size", "Voting members of the ensemble."),
            synced_observers: quorum.gauge(
                "synced_observers",
                "Observers replicating close behind the leader (on the leader).",
            ),
            raft_term: quorum.gauge("zlock_raft_term", "The Raft term this member is in."),
            raft_last_log_index: quorum.gauge(
                "zlock_raft_last_log_index",
                "The last index of this member's Raft log.",
            ),
            learners: leader.gauge("learners", "Other voting members."),
            synced_followers: leader.gauge(
                "synced_followers",
                "Followers replicating close behind the leader.",
            ),
            synced_non_voting_followers: leader.gauge(
                "synced_non_voting_followers",
                "Non-voting followers (none in zlock).",
            ),
            pending_syncs: leader.gauge("pending_syncs", "Followers being sent a snapshot."),
            leader_uptime: leader
                .gauge("leader_uptime", "Time since this member became leader, ms."),
        };
        let c = Counters {
            bytes_received: main.counter("bytes_received_count", "Bytes of client frames read."),
            response_bytes: main.counter("response_bytes", "Bytes of replies sent."),
            watch_bytes: main.counter("watch_bytes", "Bytes of watch events and lock grants sent."),
            connection_requests: main.counter(
                "connection_request_count",
                "Connect requests (session handshakes) received.",
            ),
            connections_rejected: main.counter(
                "connection_rejected",
                "Client connections refused (maxClientCnxns).",
            ),
            sessions_expired: main.counter("stale_sessions_expired", "Sessions expired."),
            looking: main.counter(
                "looking_count",
                "Times this member found itself without a known leader.",
            ),
            lock_requests: main.counter(
                "zlock_native_lock_requests_total",
                "Native lock requests received.",
            ),
            lock_grants: main.counter(
                "zlock_native_lock_grants_total",
                "Native lock grants pushed (hand-overs to waiters connected here).",
            ),
            snapshot_errors: main.counter(
                "snapshot_error_count",
                "AdminServer snapshot commands that failed.",
            ),
            snapshots_rate_limited: main.counter(
                "snapshot_rate_limited_count",
                "AdminServer snapshot commands refused by admin.rateLimiterIntervalInMS.",
            ),
            restore_errors: main.counter(
                "restore_error_count",
                "AdminServer restore commands that failed.",
            ),
            restores_rate_limited: main.counter(
                "restore_rate_limited_count",
                "AdminServer restore commands refused by admin.rateLimiterIntervalInMS.",
            ),
            lock_failures: main.counter(
                "zlock_native_lock_failures_total",
                "Native lock requests answered with an error.",
            ),
        };
        Registry {
            main,
            basic,
            quorum,
            leader,
            timings,
            g,
            c,
        }
    }

    /// The summaries for the request path ([`Stats::timings`]).
    pub fn timings(&self) -> Timings {
        self.timings.clone()
    }

    /// Drains the summaries' buckets.
    pub fn upkeep(&self) {
        for p in [&self.main, &self.basic] {
            p.handle.run_upkeep();
        }
    }

    /// The exposition, from the counters, `s` (the core's facts) and `queued` (items
    /// waiting for the sequencer).
    pub fn render(&self, stats: &Stats, s: &Scrape, data_size: u64, queued: usize) -> String {
        let g = &self.g;
        let n = |v: usize| v as f64;
        g.avg_latency.set(s.latency.avg());
        g.min_latency.set(s.latency.min.unwrap_or(0.0));
        g.max_latency.set(s.latency.max);
        g.packets_received
            .set(stats.packets_received.load(Ordering::Relaxed) as f64);
        g.packets_sent
            .set(stats.packets_sent.load(Ordering::Relaxed) as f64);
        g.num_alive_connections.set(n(stats.conn_count()));
        g.outstanding_requests.set(n(s.waiting + queued));
        g.uptime.set(stats.started.elapsed().as_millis() as f64);
        g.znode_count.set(n(s.znode_count));
        g.watch_count.set(n(s.watch_count));
        g.ephemerals_count.set(n(s.ephemerals_count));
        g.approximate_data_size.set(data_size as f64);
        g.global_sessions.set(n(s.global_sessions));
        g.local_sessions.set(0.0);
        if let Some((open, max)) = &g.open_fds {
            if let Some((o, m)) = file_descriptors() {
                open.set(o as f64);
                max.set(m as f64);
            }
        }
        g.lock_waiters.set(n(s.lock_waiters));
        g.lock_paths.set(n(s.lock_paths));
        g.lock_delays.set(n(s.lock_delays));
        g.lock_holders.set(n(s.lock_holders));
        g.lock_longest_wait
            .set(s.lock_longest_wait_ms.max(0) as f64);

        let c = &self.c;
        let load = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        c.bytes_received.absolute(load(&stats.bytes_received));
        c.response_bytes.absolute(load(&stats.response_bytes));
        c.watch_bytes.absolute(load(&stats.watch_bytes));
        c.connection_requests
            .absolute(load(&stats.connect_requests));
        c.connections_rejected
            .absolute(load(&stats.connections_rejected));
        c.sessions_expired.absolute(load(&stats.sessions_expired));
        c.looking.absolute(load(&stats.looking));
        c.lock_requests.absolute(load(&stats.lock_requests));
        c.lock_grants.absolute(load(&stats.lock_grants));
        c.lock_failures.absolute(load(&stats.lock_failures));
        c.snapshot_errors.absolute(load(&stats.snapshot_errors));
        c.snapshots_rate_limited
            .absolute(load(&stats.snapshots_rate_limited));
        c.restore_errors.absolute(load(&stats.restore_errors));
        c.restores_rate_limited
            .absolute(load(&stats.restores_rate_limited));

        let mut out = self.main.handle.render();
        out.push_str(&self.basic.handle.render());
        if let Some(e) = &s.ensemble {
            g.quorum_size.set(n(e.voters));
            g.synced_observers.set(n(e.synced_observers));
            g.raft_term.set(e.term as f64);
            g.raft_last_log_index.set(e.last_log_index as f64);
            out.push_str(&self.quorum.handle.render());
            if let Some(since) = s.led_since {
                g.learners.set(n(e.followers + e.observers));
                g.synced_followers.set(n(e.synced_followers));
                g.synced_non_voting_followers.set(0.0);
                g.pending_syncs.set(n(e.pending_syncs));
                g.leader_uptime.set(since.elapsed().as_millis() as f64);
                out.push_str(&self.leader.handle.render());
            }
        }
        out
    }
}

/// Open file descriptors and their limit (Linux: `/proc/self`).
pub(crate) fn file_descriptors() -> Option<(usize, u64)> {
    let open = std::fs::read_dir("/proc/self/fd").ok()?.count();
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let max = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))?
        .split_whitespace()
        .nth(3)?
        .parse()
        .ok()?;
    Some((open, max))
}

/// Starts the registry when metrics are on.
pub(crate) fn registry(config: &MetricsConfig) -> Option<Arc<Registry>> {
    config.enabled.then(|| Arc::new(Registry::new()))
}
