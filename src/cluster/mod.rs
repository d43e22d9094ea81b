//! Cluster-wide limits: `scope = "cluster"` sliding-window zones whose counts are shared
//! between nodes through Redis/Valkey, without a network call on the request path.
//!
//! Each node decides from its own table plus the last known counts of the other nodes (the
//! *remote table*: a second weir table, key hash → packed `(window, prev, cur)` of everybody
//! else, written only by the syncer, read lock-free by requests). One background syncer thread
//! per zone scans the local table every `sync_interval`, pushes what this node admitted since
//! its last push (`INCRBY` + `PEXPIRE` on `weir:{zone}:{keyhash}:{window}`) and reads back the
//! totals in the same pipeline. When Redis is down, slow or refuses us, the zone falls back to
//! `events ÷ expected_nodes` per node after `3 × sync_interval` without a successful sync.
//! The remote table, the *pushed table* (what this node already pushed) and the stats with the
//! health word form the zone's cluster region ([`ClusterShared`]): in the process, or in
//! shared memory that every process over the zone attaches (nginx workers), so that all of
//! them decide with one cluster view and any of them can take over the syncing.
//! docs/CLUSTER.md derives the over-admission bound and describes the host hooks.

mod connect;
pub mod gcra;
mod key_hash;
pub mod pool;
mod shared;
mod sync;

pub(crate) use connect::check_spec;
pub use shared::{shared_bytes, ClusterShared};

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::Duration;

use key_hash::KeyHash;
pub(crate) use key_hash::Pieces as KeyPieces;

use crate::limiter::packed::{self, Counts};
use crate::limiter::{RateStep, SlidingWindow, Verdict, MAX_COUNT};
use crate::region::Region;
use crate::table::Table;

/// Redis/Valkey settings of a cluster-scope zone (`scope = "cluster"`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterSpec {
    /// `redis://[user:password@]host:port/db` (or `rediss://`, `redis+unix://`): the server
    /// ([`RedisMode::Standalone`], one URL), seed nodes ([`RedisMode::Cluster`]) or Sentinels
    /// ([`RedisMode::Sentinel`]); never empty.
    pub redis: Vec<String>,
    /// How the URLs lead to the server holding the counters.
    pub mode: RedisMode,
    /// Overrides a password given in the URL (Sentinel: the master's password).
    pub password: Option<String>,
    /// TLS material for `rediss://` (read when the policy is compiled).
    pub tls: TlsFiles,
    /// How often the syncer pushes and pulls (default 100 ms).
    pub sync_interval: Duration,
    /// Nodes sharing the limit; each admits `events ÷ expected_nodes` while Redis is away.
    pub expected_nodes: u64,
    /// What to do without Redis.
    pub fallback: Fallback,
}

/// What the `redis` URLs name (`redis_mode`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RedisMode {
    /// One server (or a primary behind one address).
    Standalone,
    /// A Redis Cluster: the URLs are seed nodes; the slot map is read from them.
    Cluster,
    /// The URLs are Sentinels; the counters live on the master they name `master`.
    Sentinel { master: String },
}

/// PEM contents of the TLS files of a `rediss://` zone (`tls_ca_file`, `tls_cert_file`,
/// `tls_key_file`); empty for the system's trust store and no client certificate.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct TlsFiles {
    /// CA certificates trusted instead of the system's store.
    pub ca: Option<Vec<u8>>,
    /// Client certificate chain and private key (mutual TLS).
    pub client: Option<(Vec<u8>, Vec<u8>)>,
}

impl std::fmt::Debug for TlsFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("TlsFiles")
            .field("ca", &self.ca.as_ref().map(Vec::len))
            .field("client", &self.client.is_some())
            .finish()
    }
}

/// Behaviour while Redis cannot be reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fallback {
    /// Each node enforces its share `events ÷ expected_nodes` on its own counts.
    Local,
}

/// Default `sync_interval`.
pub const DEFAULT_SYNC_INTERVAL: Duration = Duration::from_millis(100);

crate::region::atomic_words! {
    /// Counters of one cluster zone (rendered through [`ClusterZone::counts`]). In a zone's shared
    /// region (nginx: one per cluster zone, every worker reads and adds to the same words) or
    /// in the process (`#[repr(C)]`: its layout is part of the shared region's, see
    /// [`ClusterShared`]).
    pub struct ClusterStats {
        /// CLOCK_MONOTONIC ns of the last successful sync (0 = never).
        pub last_ok_ns,
        pub syncs_ok,
        pub sync_errors,
        /// Requests decided on the local fallback share (Redis down, slow or refusing us).
        pub fallback_decisions,
        /// Cost units pushed to Redis.
        pub pushed_units,
        /// Keys pushed/pulled, summed over syncs.
        pub keys_synced,
        /// 1 while this process's syncer is the table's elected syncer (`Table::try_lead`); in
        /// a shared region it is not written (see [`ClusterZone::is_leader`]).
        pub leader,
        /// Process id of the syncer that synced last (any process sharing the zone).
        pub leader_pid,
        /// This node's id in a pool's Redis entries (random, set by the first syncer; kept
        /// across reloads with the region, so that a reload is no new node).
        pub node,
        /// A pool at the last sync: units this node may hold over its keys (floors and grants).
        pub share,
        /// A pool at the last sync: units in flight and queued here over its keys.
        pub demand,
        /// A pool at the last sync: units in flight here over its keys.
        pub in_flight,
        /// A pool at the last sync: keys reported.
        pub keys,
    }
}

const _: () = assert!(std::mem::size_of::<ClusterStats>() <= 128);

/// The zone's stats: in its shared region (after the identity words), or owned by the process.
enum StatsRef {
    #[cfg_attr(loom, allow(dead_code))]
    Shared(Region),
    Own(Box<ClusterStats>),
}

impl std::ops::Deref for StatsRef {
    type Target = ClusterStats;
    fn deref(&self) -> &ClusterStats {
        match self {
            StatsRef::Shared(r) => r.view(64),
            StatsRef::Own(b) => b,
        }
    }
}

type LogHook = fn(&str);
static LOG_HOOK: RwLock<Option<LogHook>> = RwLock::new(None);

/// Where the syncers' messages go (default: standard error). Hosts route them to their log
/// (nginx's error log, Caddy's zap logger). Messages come from syncer threads, at most one per
/// sync attempt (so at most one per `sync_interval`).
pub fn set_log_hook(hook: LogHook) {
    *LOG_HOOK.write().unwrap_or_else(|e| e.into_inner()) = Some(hook);
}

pub(crate) fn log(msg: &str) {
    match *LOG_HOOK.read().unwrap_or_else(|e| e.into_inner()) {
        Some(h) => h(msg),
        None => eprintln!("weir: {msg}"),
    }
}

/// What a cluster zone shares, by algorithm.
enum Shape {
    /// A sliding zone: its window (cluster-wide events) and each node's share while Redis is
    /// away; the remote table holds the others' counts.
    Window {
        sw: SlidingWindow,
        fallback: SlidingWindow,
    },
    /// A concurrency zone: its pool; the remote table holds this node's grants ([`pool`]).
    Pool(pool::Pool),
    /// A GCRA zone: its emission interval; the cluster's TAT is merged into the local states
    /// ([`gcra`]), the remote table is unused.
    Gcra { interval_ns: u64 },
}

/// The cluster side of one zone: the remote table, the syncer's health and the fallback.
pub struct ClusterZone {
    name: String,
    spec: ClusterSpec,
    shape: Shape,
    /// CLOCK_MONOTONIC ns when this side was made: a pool waits for its first sync this long
    /// on its floors before it falls back.
    born: u64,
    remote: Table,
    pushed: Table,
    /// True when remote, pushed and stats live in a region shared with other processes.
    shared: bool,
    /// 1 while this process's syncer leads (per process, whatever `stats` lives in).
    leads: AtomicU64,
    keys: KeyHash,
    /// Added to a CLOCK_MONOTONIC `now` so that the local table sees wall-clock time: window
    /// ids are then the same on every node (`realtime − monotonic + the table's clock base`).
    offset: u64,
    stale_after: u64,
    stats: StatsRef,
    stop: AtomicBool,
    thread: Mutex<Option<JoinHandle<()>>>,
}

fn realtime_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

impl ClusterZone {
    /// The cluster side of zone `name` (sliding `events` per `window_ns`) over `local`, the
    /// zone's table, with its remote counts, pushed counts and stats in this process. The
    /// syncer is not started yet (see [`ClusterZone::start`]).
    pub fn new(
        name: &str,
        spec: ClusterSpec,
        events: u64,
        window_ns: u64,
        local: &Table,
    ) -> Result<ClusterZone, String> {
        ClusterZone::with_shared(name, spec, events, window_ns, local, None)
    }

    /// Like [`ClusterZone::new`], with the remote counts, pushed counts and stats in `shared`
    /// (a region every process over the same local table attaches: they all decide with one
    /// cluster view, and any of them can take over syncing).
    pub fn with_shared(
        name: &str,
        spec: ClusterSpec,
        events: u64,
        window_ns: u64,
        local: &Table,
        shared: Option<ClusterShared>,
    ) -> Result<ClusterZone, String> {
        let sw = SlidingWindow::new(events, window_ns).map_err(|e| e.0)?;
        let share = (events / spec.expected_nodes.max(1)).max(1);
        let fallback = SlidingWindow::new(share, window_ns).map_err(|e| e.0)?;
        ClusterZone::build(name, spec, Shape::Window { sw, fallback }, local, shared)
    }

    /// The cluster side of GCRA zone `name` (emission interval `interval_ns`) over `local`,
    /// its stats and health in `shared` when given.
    pub fn gcra(
        name: &str,
        spec: ClusterSpec,
        interval_ns: u64,
        local: &Table,
        shared: Option<ClusterShared>,
    ) -> Result<ClusterZone, String> {
        ClusterZone::build(name, spec, Shape::Gcra { interval_ns }, local, shared)
    }

    /// The cluster side of concurrency zone `name` (`permits`: its cluster-wide `max` and
    /// permit lease) over `local`, its grants, stats and health in `shared` when given.
    pub fn pool(
        name: &str,
        spec: ClusterSpec,
        permits: crate::limiter::Concurrency,
        local: &Table,
        shared: Option<ClusterShared>,
    ) -> Result<ClusterZone, String> {
        let p = pool::Pool::new(
            permits,
            spec.expected_nodes,
            spec.sync_interval.as_nanos() as u64,
        );
        ClusterZone::build(name, spec, Shape::Pool(p), local, shared)
    }

    fn build(
        name: &str,
        spec: ClusterSpec,
        shape: Shape,
        local: &Table,
        shared: Option<ClusterShared>,
    ) -> Result<ClusterZone, String> {
        let is_shared = shared.is_some();
        let (remote, pushed, stats) = match shared {
            Some(s) => (s.remote, s.pushed, s.stats),
            None => {
                // One remote (and pushed) entry per local key: the same number of slots.
                let table = || {
                    Table::new(Table::bytes_for(local.capacity()), 0, 0)
                        .map_err(|e| format!("zone {name}: remote table: {e}"))
                };
                (table()?, table()?, StatsRef::Own(Box::default()))
            }
        };
        let password = spec
            .password
            .clone()
            .or_else(|| spec.redis.first().and_then(|u| url_password(u)));
        let keys = KeyHash::new(name, password.as_deref());
        let offset = realtime_ns()
            .wrapping_sub(crate::clock::monotonic_ns())
            .wrapping_add(local.clock_base());
        let stale_after = 3 * spec.sync_interval.as_nanos() as u64;
        Ok(ClusterZone {
            name: name.to_owned(),
            spec,
            shape,
            born: crate::clock::monotonic_ns(),
            remote,
            pushed,
            shared: is_shared,
            leads: AtomicU64::new(0),
            keys,
            offset,
            stale_after,
            stats,
            stop: AtomicBool::new(false),
            thread: Mutex::new(None),
        })
    }

    /// Starts the zone's syncer thread over `local` (a handle on the zone's table that stays
    /// valid until [`ClusterZone::shutdown`] returns). Does nothing while one runs.
    pub fn start(self: &Arc<Self>, local: Table) -> Result<(), String> {
        let mut slot = self.thread.lock().unwrap_or_else(|e| e.into_inner());
        if slot.is_some() {
            return Ok(());
        }
        self.stop.store(false, Relaxed);
        let zone = Arc::clone(self);
        let h = std::thread::Builder::new()
            .name(format!("weir-sync-{}", self.name))
            .spawn(move || sync::Syncer::new(zone, local).run())
            .map_err(|e| format!("zone {}: cannot start syncer: {e}", self.name))?;
        *slot = Some(h);
        Ok(())
    }

    /// Stops the syncer and waits for it (the engine does this when dropped).
    pub fn shutdown(&self) {
        self.stop.store(true, Relaxed);
        let h = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(h) = h {
            h.thread().unpark();
            let _ = h.join();
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn spec(&self) -> &ClusterSpec {
        &self.spec
    }

    pub fn stats(&self) -> &ClusterStats {
        &self.stats
    }

    /// True while this process's syncer is the zone's elected syncer.
    pub fn is_leader(&self) -> bool {
        self.leads.load(Relaxed) != 0
    }

    /// True when the zone's remote counts and stats live in a shared region.
    pub fn is_shared(&self) -> bool {
        self.shared
    }

    /// A sliding zone's window (cluster-wide `events`).
    pub fn window(&self) -> Option<&SlidingWindow> {
        match &self.shape {
            Shape::Window { sw, .. } => Some(sw),
            _ => None,
        }
    }

    /// What each node admits while Redis is away: a sliding zone's events per window, a
    /// pool's units per key; 0 for a GCRA zone (each limit's rate ÷ expected_nodes).
    pub fn fallback_events(&self) -> u64 {
        match &self.shape {
            Shape::Window { fallback, .. } => fallback.events(),
            Shape::Pool(p) => p.fallback,
            Shape::Gcra { .. } => 0,
        }
    }

    /// What each node admits while Redis is away, for the log.
    pub(crate) fn fallback_text(&self) -> String {
        let n = self.spec.expected_nodes;
        match &self.shape {
            Shape::Window { fallback, .. } => format!("{} per node", fallback.events()),
            Shape::Pool(p) => format!("{} per key and node once grants end", p.fallback),
            Shape::Gcra { .. } => format!("each limit's rate and burst ÷ {n} per node"),
        }
    }

    /// A concurrency zone's pool.
    pub fn pool_params(&self) -> Option<&pool::Pool> {
        match &self.shape {
            Shape::Pool(p) => Some(p),
            _ => None,
        }
    }

    /// A GCRA zone's emission interval.
    pub fn gcra_interval(&self) -> Option<u64> {
        match self.shape {
            Shape::Gcra { interval_ns } => Some(interval_ns),
            _ => None,
        }
    }

    /// The stable keyed hash a cluster zone's keys are stored under, on every node alike.
    #[inline]
    pub fn key_hash(&self, key: &[u8]) -> u64 {
        self.keys.hash(key)
    }

    /// The same hash, for a key written in pieces (`KeySpec::hash_pieces`).
    #[inline]
    pub(crate) fn key_hasher(&self) -> KeyPieces {
        self.keys.pieces()
    }

    /// True while the last successful sync is recent (`now`: CLOCK_MONOTONIC ns).
    #[inline]
    pub fn healthy(&self, now: u64) -> bool {
        let ok = self.stats.last_ok_ns.load(Relaxed);
        ok != 0 && now.saturating_sub(ok) <= self.stale_after
    }

    /// What the others admitted for `key_hash`, as last pulled (packed `(window, prev, cur)`).
    #[inline]
    pub fn remote_state(&self, key_hash: u64) -> u64 {
        self.remote.peek(key_hash).unwrap_or(0)
    }

    #[inline]
    fn zone_now(&self, now: u64) -> u64 {
        now.wrapping_add(self.offset)
    }

    /// [`Table::predict`] on the local table with the remote counts added (or on the fallback
    /// share when Redis is away). Lock-free, allocation-free, no I/O. A sliding zone's.
    #[inline]
    pub fn predict(&self, t: &Table, h: u64, cost: u64, now: u64) -> Verdict {
        let Shape::Window { sw, fallback } = &self.shape else {
            return Verdict::refused(0);
        };
        let zn = self.zone_now(now);
        if self.healthy(now) {
            let alg = WithRemote {
                sw,
                remote: self.remote_state(h),
            };
            t.predict(&alg, h, cost, zn)
        } else {
            t.predict(fallback, h, cost, zn)
        }
    }

    /// [`Table::check`] likewise; a decision on the fallback share is counted here (the engine
    /// charges each matched rate limit once per request).
    #[inline]
    pub fn check(&self, t: &Table, h: u64, cost: u64, now: u64) -> Verdict {
        let Shape::Window { sw, fallback } = &self.shape else {
            return Verdict::refused(0);
        };
        let zn = self.zone_now(now);
        if self.healthy(now) {
            let alg = WithRemote {
                sw,
                remote: self.remote_state(h),
            };
            t.check(&alg, h, cost, zn)
        } else {
            self.stats.fallback_decisions.fetch_add(1, Relaxed);
            t.check(fallback, h, cost, zn)
        }
    }

    /// [`Table::refund`] (the local counts only; the syncer pushes no more than it sees).
    #[inline]
    pub fn refund(&self, t: &Table, h: u64, cost: u64, now: u64) {
        if let Shape::Window { sw, .. } = &self.shape {
            t.refund(sw, h, cost, self.zone_now(now));
        }
    }
}

/// A URL's password (`redis://:secret@host/` or `redis://user:secret@host/`).
pub(crate) fn url_password(url: &str) -> Option<String> {
    use redis::IntoConnectionInfo;
    url.into_connection_info().ok()?.redis.password
}

/// The sliding window over local + remote counts; only the local counts are stored.
struct WithRemote<'a> {
    sw: &'a SlidingWindow,
    remote: u64,
}

impl RateStep for WithRemote<'_> {
    #[inline]
    fn step(&self, state: u64, now: u64, cost: u64) -> (u64, Verdict) {
        let w = self.sw.window_ns();
        let id = packed::window(state, now / w);
        // A clock just behind the state's window acts at that window's start.
        let now = if id == now / w { now } else { id * w };
        let local = packed::read(state, id);
        let remote = packed::read(self.remote, id);
        let both = Counts {
            prev: (local.prev + remote.prev).min(MAX_COUNT),
            cur: (local.cur + remote.cur).min(MAX_COUNT),
        };
        let (_, v) = self.sw.step(packed::write(id, both), now, cost);
        if !v.admitted() {
            return (state, v);
        }
        let next = Counts {
            prev: local.prev,
            cur: (local.cur + cost).min(MAX_COUNT),
        };
        (packed::write(id, next), v)
    }

    #[inline]
    fn residual(&self, state: u64, now: u64) -> u64 {
        self.sw.residual(state, now)
    }

    #[inline]
    fn refund(&self, state: u64, now: u64, cost: u64) -> u64 {
        self.sw.refund(state, now, cost)
    }
}

/// One cluster zone's counters at one instant, as plain numbers (the metrics snapshot,
/// `policy::metrics`, renders them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClusterCounts {
    pub syncs: u64,
    pub sync_errors: u64,
    pub fallback_decisions: u64,
    pub pushed_units: u64,
    /// Remote counts evicted for lack of room (remote table overflow).
    pub remote_evictions_active: u64,
    /// 1 while this process's syncer is the zone's elected syncer.
    pub leader: u64,
    /// Process id of the syncer that synced last.
    pub leader_pid: u64,
    /// 1 while the zone decides on the local fallback share (not [`ClusterZone::healthy`]).
    pub fallback_active: u64,
    /// Milliseconds since the last successful sync (0 before the first).
    pub sync_age_ms: u64,
    /// A pool, at the last sync: units this node may hold over its keys (floors and grants).
    pub share: u64,
    /// A pool, at the last sync: units in flight and queued here over its keys.
    pub demand: u64,
    /// A pool, at the last sync: units in flight here over its keys.
    pub in_flight: u64,
    /// A pool, at the last sync: keys this node holds or wants a grant for.
    pub leased_keys: u64,
}

impl ClusterZone {
    /// The zone's counters at `now` (CLOCK_MONOTONIC ns).
    pub fn counts(&self, now: u64) -> ClusterCounts {
        let s = &self.stats;
        ClusterCounts {
            syncs: s.syncs_ok.load(Relaxed),
            sync_errors: s.sync_errors.load(Relaxed),
            fallback_decisions: s.fallback_decisions.load(Relaxed),
            pushed_units: s.pushed_units.load(Relaxed),
            remote_evictions_active: self.remote.stats().evicted_active,
            leader: u64::from(self.is_leader()),
            leader_pid: s.leader_pid.load(Relaxed),
            fallback_active: u64::from(!self.healthy(now)),
            sync_age_ms: match s.last_ok_ns.load(Relaxed) {
                0 => 0,
                ok => now.saturating_sub(ok) / 1_000_000,
            },
            share: s.share.load(Relaxed),
            demand: s.demand.load(Relaxed),
            in_flight: s.in_flight.load(Relaxed),
            leased_keys: s.keys.load(Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::NS_PER_SEC;

    #[test]
    fn remote_counts_take_room_but_are_not_stored() {
        let sw = SlidingWindow::new(10, NS_PER_SEC).unwrap();
        let now = 5 * NS_PER_SEC + 1;
        let remote = packed::write(5, Counts { prev: 0, cur: 7 });
        let alg = WithRemote { sw: &sw, remote };
        let mut s = 0;
        for _ in 0..3 {
            let (n, v) = alg.step(s, now, 1);
            assert!(v.admitted());
            s = n;
        }
        assert_eq!(packed::read(s, 5), Counts { prev: 0, cur: 3 });
        assert!(!alg.step(s, now, 1).1.admitted());
        // The remote counts of an older window are not current any more.
        let old = WithRemote {
            sw: &sw,
            remote: packed::write(3, Counts { prev: 0, cur: 10 }),
        };
        assert!(old.step(s, now, 1).1.admitted());
    }
}
