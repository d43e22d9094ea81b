//! The syncer: one std thread per cluster zone and process. It may lock and allocate; the
//! request path never waits for it.
//!
//! Every `sync_interval`: scan the local table; for each key with counts in the current or
//! previous window, push the units admitted here since the last push (`INCRBY` + `PEXPIRE`)
//! or just read the total (`GET`), all in one pipeline (one round trip per 512 keys); the
//! others' counts are `total − what this node pushed`, stored into the remote table. Every
//! command touches one key, so against a Redis Cluster the pipeline is split by node with the
//! same meaning (src/cluster/connect.rs). On any
//! error the connection is dropped and retried with exponential backoff (interval … 2 s); the
//! zone falls back by itself once the last success is `3 × sync_interval` old.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::connect::{Conn, Lua, Source};
use super::gcra::{self, COUNT_MASK};
use super::{log, pool, ClusterZone, Shape};
use crate::clock::monotonic_ns;
use crate::limiter::packed::{self, Counts};
use crate::limiter::{SlidingWindow, MAX_COUNT};
use crate::table::Table;

const BATCH: usize = 512;
/// How long Redis keeps a GCRA key's TAT once it is past (it then means an empty bucket).
const GCRA_TTL_MS: u64 = 10_000;
const MAX_BACKOFF: Duration = Duration::from_secs(2);

pub(super) struct Syncer {
    zone: Arc<ClusterZone>,
    local: Table,
    client: Option<Source>,
    conn: Option<Conn>,
    backoff: Duration,
    failing: bool,
    /// xorshift64 state for a GCRA zone's jittered interval.
    jitter: u64,
}

impl Syncer {
    pub(super) fn new(zone: Arc<ClusterZone>, local: Table) -> Syncer {
        let client = match Source::new(&zone.spec, io_timeout(&zone)) {
            Ok(c) => Some(c),
            Err(e) => {
                log(&format!(
                    "cluster zone {}: bad redis settings: {e}",
                    zone.name
                ));
                None
            }
        };
        let backoff = zone.spec.sync_interval;
        Syncer {
            zone,
            local,
            client,
            conn: None,
            backoff,
            failing: false,
            jitter: (u64::from(std::process::id()) << 32) ^ monotonic_ns() | 1,
        }
    }

    fn io_timeout(&self) -> Duration {
        io_timeout(&self.zone)
    }

    /// Only one syncer per table syncs: several processes may share the zone's table (nginx
    /// workers over one shared-memory zone), and each pushing the same local counts would
    /// multiply them. The others wait, heartbeat-checking every interval, and take over when
    /// the leader's heartbeat is stale (a connect and a query may each block one I/O timeout).
    fn lead(&self, owner: u64) -> bool {
        let interval = self.zone.spec.sync_interval.as_nanos() as u64;
        let stale = 3 * interval + 2 * self.io_timeout().as_nanos() as u64;
        let leads = self.local.try_lead(owner, monotonic_ns(), stale);
        self.zone.leads.store(u64::from(leads), Relaxed);
        if !self.zone.shared {
            self.zone.stats.leader.store(u64::from(leads), Relaxed);
        }
        leads
    }

    pub(super) fn run(mut self) {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let owner = (u64::from(std::process::id()) << 32) | NEXT.fetch_add(1, Relaxed);
        let interval = self.zone.spec.sync_interval;
        while !self.zone.stop.load(Relaxed) {
            let started = Instant::now();
            if !self.lead(owner) {
                self.conn = None;
                self.pause(started + interval, owner, false);
                continue;
            }
            let wait = match self.sync_once() {
                Ok(keys) => {
                    let z = &self.zone.stats;
                    z.last_ok_ns.store(monotonic_ns(), Relaxed);
                    z.syncs_ok.fetch_add(1, Relaxed);
                    z.keys_synced.fetch_add(keys as u64, Relaxed);
                    z.leader_pid.store(u64::from(std::process::id()), Relaxed);
                    if self.failing {
                        log(&format!("cluster zone {}: sync resumed", self.zone.name));
                        self.failing = false;
                    }
                    self.backoff = interval;
                    self.next_interval(interval)
                }
                Err(e) => {
                    self.conn = None;
                    self.zone.stats.sync_errors.fetch_add(1, Relaxed);
                    let fallback = !self.zone.healthy(monotonic_ns());
                    log(&format!(
                        "cluster zone {}: sync failed ({}); {}; retrying in {:?}",
                        self.zone.name,
                        reason(&e, self.io_timeout()),
                        if fallback {
                            format!("deciding locally on {}", self.zone.fallback_text())
                        } else {
                            "still on the last remote counts".to_owned()
                        },
                        self.backoff
                    ));
                    self.failing = true;
                    let w = self.backoff;
                    self.backoff = (self.backoff * 2).min(MAX_BACKOFF.max(interval));
                    w
                }
            };
            self.pause(started + wait, owner, true);
        }
        self.local.resign(owner);
    }

    /// The wait before the next sync: `interval`, or for a GCRA zone a random one between half
    /// and one and a half of it. With fixed phases, the node that syncs just after another
    /// always sees that one's admissions fresh while the other sees its own late, and the node
    /// with the staler view takes more of the slots; jittered, the phases average out.
    fn next_interval(&mut self, interval: Duration) -> Duration {
        if !matches!(self.zone.shape, Shape::Gcra { .. }) {
            return interval;
        }
        let mut x = self.jitter;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.jitter = x;
        interval / 2 + interval.mul_f64((x >> 11) as f64 / (1u64 << 53) as f64)
    }

    /// Sleeps until `deadline` or a stop; a leader keeps its heartbeat fresh meanwhile (backoff
    /// waits are longer than the staleness limit).
    fn pause(&self, deadline: Instant, owner: u64, leader: bool) {
        let beat = self.zone.spec.sync_interval;
        while !self.zone.stop.load(Relaxed) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            std::thread::park_timeout(left.min(beat));
            if leader {
                self.lead(owner);
            }
        }
    }

    fn connection(&mut self) -> redis::RedisResult<&mut Conn> {
        if self.conn.is_none() {
            let t = self.io_timeout();
            let client = self.client.as_mut().ok_or_else(|| {
                redis::RedisError::from((
                    redis::ErrorKind::InvalidClientConfig,
                    "bad redis settings",
                ))
            })?;
            self.conn = Some(client.connect(t)?);
        }
        Ok(self.conn.as_mut().expect("just connected"))
    }

    /// One sync; returns the number of keys synced.
    fn sync_once(&mut self) -> redis::RedisResult<usize> {
        let zone = Arc::clone(&self.zone);
        match &zone.shape {
            Shape::Window { sw, .. } => self.sync_window(sw),
            Shape::Pool(p) => self.sync_pool(p),
            Shape::Gcra { interval_ns } => self.sync_gcra(*interval_ns),
        }
    }

    /// A sliding zone's push + pull.
    fn sync_window(&mut self, sw: &SlidingWindow) -> redis::RedisResult<usize> {
        self.connection()?;
        let zone = Arc::clone(&self.zone);
        let w = sw.window_ns();
        let now = monotonic_ns()
            .wrapping_add(zone.offset)
            .saturating_sub(self.local.clock_base());
        let id = now / w;
        let mut keys: Vec<(u64, Counts)> = Vec::new();
        self.local.for_each(|tag, state| {
            let c = packed::read(state, id);
            if c.prev != 0 || c.cur != 0 {
                keys.push((tag, c));
            }
        });
        if keys.is_empty() {
            // Still prove Redis is there: the fallback should reflect reachability.
            self.connection()?.ping()?;
        }
        let ttl_ms = (2 * w + 2 * zone.spec.sync_interval.as_nanos() as u64) / 1_000_000 + 1000;
        let prev_id = id.wrapping_sub(1);
        // What this node pushed per key, as (previous, current) window of `id`: in the zone's
        // pushed table, which a newly elected syncer (another process) continues from.
        let pushed = &zone.pushed;
        for chunk in keys.chunks(BATCH) {
            let mut pipe = self.connection()?.pipe();
            // per key and window: units pushed after this batch, delta
            let mut plan = Vec::with_capacity(chunk.len() * 2);
            for &(tag, c) in chunk {
                let p = packed::read(pushed.peek(tag).unwrap_or(0), id);
                for (win, n, p) in [(prev_id, c.prev, p.prev), (id, c.cur, p.cur)] {
                    let d = n.saturating_sub(p);
                    let k = format!("weir:{}:{:016x}:{}", zone.name, tag, win);
                    if d > 0 {
                        pipe.incr(&k, d, ttl_ms);
                    } else {
                        pipe.get(&k);
                    }
                    plan.push((tag, p + d, d));
                }
            }
            let totals: Vec<Option<u64>> = self.connection()?.query(&pipe)?;
            let mut remote = [0u64; 2];
            let mut mine_now = [0u64; 2];
            for (i, (&(tag, mine, d), total)) in plan.iter().zip(totals).enumerate() {
                let total = total.unwrap_or(0);
                // A total below what this node pushed: Redis lost the counter (restarted
                // without persistence, or evicted it). Push the whole local count next time.
                mine_now[i % 2] = if total < mine { total.min(d) } else { mine };
                zone.stats.pushed_units.fetch_add(d, Relaxed);
                remote[i % 2] = total.saturating_sub(mine).min(MAX_COUNT);
                if i % 2 == 1 {
                    let state = packed::write(
                        id,
                        Counts {
                            prev: remote[0],
                            cur: remote[1],
                        },
                    );
                    zone.remote.store(sw, tag, state, now);
                    let mine = packed::write(
                        id,
                        Counts {
                            prev: mine_now[0].min(MAX_COUNT),
                            cur: mine_now[1].min(MAX_COUNT),
                        },
                    );
                    pushed.store(sw, tag, mine, now);
                }
            }
        }
        Ok(keys.len())
    }
}

impl Syncer {
    /// A pool's sync: for every key this node holds a grant for or wants one for, report its
    /// demand and run the allocator ([`pool::ALLOCATE`]); store the grants it answers, each a
    /// lease from the time the request was sent (so it ends before Redis forgets it).
    fn sync_pool(&mut self, p: &pool::Pool) -> redis::RedisResult<usize> {
        let zone = Arc::clone(&self.zone);
        let node = self.node_id();
        let sent = monotonic_ns();
        let rel = sent.saturating_sub(self.local.clock_base());
        let in_flight = |h: u64| p.permits.in_flight(self.local.peek(h).unwrap_or(0), rel);
        let mut keys: Vec<(u64, [u64; 3])> = Vec::new();
        zone.remote.for_each(|tag, e| keys.push((tag, [0, 0, e])));
        for (tag, [demand, held, e]) in &mut keys {
            *held = in_flight(*tag);
            let queued = in_flight(*tag ^ crate::limiter::QUEUE_SALT);
            let refused = zone.pool_refused(&self.local, *tag, sent);
            *demand = (*held + queued + refused).min(p.permits.max());
            *e = pool::granted(*e, sent).unwrap_or(0);
        }
        if keys.is_empty() {
            self.connection()?.ping()?;
        }
        let lease_ms = p.grant_lease_ns / 1_000_000;
        let (mut share, mut demand, mut held) = (0, 0, 0);
        static SCRIPT: std::sync::OnceLock<Lua> = std::sync::OnceLock::new();
        let script = SCRIPT.get_or_init(|| Lua::new(pool::ALLOCATE));
        for chunk in keys.chunks(BATCH) {
            let calls: Vec<(String, [u64; 7])> = chunk
                .iter()
                .map(|&(tag, [d, h, using])| {
                    let k = format!("weir:{}:pool:{:016x}", zone.name, tag);
                    let max = p.permits.max();
                    (k, [node, d, h, max, p.expected, lease_ms, using])
                })
                .collect();
            let replies = self.eval(script, &calls)?;
            for (&(tag, [d, h, _]), r) in chunk.iter().zip(replies) {
                let grant = u64::try_from(r).ok().and_then(|r| r.checked_sub(1));
                zone.pool_store(tag, grant, sent + p.grant_lease_ns, monotonic_ns());
                share += grant.map_or(0, |g| g + pool::FLOOR);
                (demand, held) = (demand + d, held + h);
            }
        }
        let z = &zone.stats;
        z.share.store(share, Relaxed);
        z.demand.store(demand, Relaxed);
        z.in_flight.store(held, Relaxed);
        z.keys.store(keys.len() as u64, Relaxed);
        Ok(keys.len())
    }

    /// A GCRA zone's sync: for every key that admitted here since the last push or whose
    /// bucket is not empty, push the units admitted here into the key's cluster-wide TAT in
    /// Redis ([`gcra::EXCHANGE`]) and merge that TAT into the local state
    /// (`TAT := max(TAT, now + ahead)`). The pushed table keeps each key's count at its last
    /// push.
    fn sync_gcra(&mut self, interval_ns: u64) -> redis::RedisResult<usize> {
        let zone = Arc::clone(&self.zone);
        let now = monotonic_ns();
        let rel = now.saturating_sub(self.local.clock_base());
        // (key, count, units to push)
        let mut keys: Vec<(u64, u64, u64)> = Vec::new();
        self.local.for_each(|tag, state| {
            let (tat, count) = gcra::unpack(state, rel);
            let pushed = zone.pushed.peek(tag).unwrap_or(0);
            // A count below the one pushed: the key was reset, or evicted and seen again.
            let delta = unpushed(count, pushed).unwrap_or(0);
            if delta > 0 || tat > rel {
                keys.push((tag, count, delta));
            }
        });
        if keys.is_empty() {
            self.connection()?.ping()?;
        }
        static SCRIPT: std::sync::OnceLock<Lua> = std::sync::OnceLock::new();
        let script = SCRIPT.get_or_init(|| Lua::new(gcra::EXCHANGE));
        let t_us = interval_ns.div_ceil(1000);
        let since_us = match zone.stats.last_ok_ns.load(Relaxed) {
            0 => zone.spec.sync_interval.as_nanos() as u64,
            ok => now.saturating_sub(ok),
        } / 1000;
        for chunk in keys.chunks(BATCH) {
            let calls: Vec<(String, [u64; 4])> = chunk
                .iter()
                .map(|&(tag, _, delta)| {
                    let k = format!("weir:{}:gcra:{:016x}", zone.name, tag);
                    (k, [delta, t_us, GCRA_TTL_MS, since_us])
                })
                .collect();
            let replies = self.eval(script, &calls)?;
            let at = monotonic_ns();
            for (&(tag, count, delta), ahead_us) in chunk.iter().zip(replies) {
                zone.stats.pushed_units.fetch_add(delta, Relaxed);
                let ahead = u64::try_from(ahead_us).unwrap_or(0).saturating_mul(1000);
                if ahead > 0 {
                    self.local.update(
                        tag,
                        at,
                        |s, now| gcra::unpack(s, now).0.saturating_sub(now),
                        |s, now| (gcra::merge(s, now, ahead), ()),
                        false,
                    );
                }
                // The mark bit tells a count of 0 from no entry.
                let c = (count & COUNT_MASK) | 1 << 63;
                zone.pushed
                    .update(tag, at, |p, _| u64::from(p != 0), |_, _| (c, ()), true);
            }
        }
        Ok(keys.len())
    }

    /// Runs `script` once per `(key, args)` in one pipeline; sends its code when Redis does
    /// not know it yet (a first sync, a restart, a flush, a failover).
    fn eval<const N: usize>(
        &mut self,
        script: &Lua,
        calls: &[(String, [u64; N])],
    ) -> redis::RedisResult<Vec<i64>> {
        let mut load = false;
        loop {
            let mut pipe = self.connection()?.pipe();
            for (k, args) in calls {
                pipe.eval(script, load, k, args);
            }
            match self.connection()?.query(&pipe) {
                Err(e) if e.kind() == redis::ErrorKind::NoScriptError && !load => load = true,
                r => return r,
            }
        }
    }

    /// This node's id in the pool's entries: one for every process over the zone's region.
    fn node_id(&self) -> u64 {
        let id = &self.zone.stats.node;
        if id.load(Relaxed) == 0 {
            let seed =
                (u64::from(std::process::id()) << 40) ^ super::realtime_ns() ^ monotonic_ns();
            let (fresh, _) = super::key_hash::seed(&self.zone.name, Some(&seed.to_string()));
            let _ = id.compare_exchange(0, fresh.max(1), Relaxed, Relaxed);
        }
        id.load(Relaxed)
    }
}

/// Units a GCRA key admitted since its last push (`pushed`: the pushed table's entry, 0 for
/// none): its count less the count pushed, modulo the count's width; `None` for a count below
/// the one pushed (the key was reset, or evicted and seen again).
fn unpushed(count: u64, pushed: u64) -> Option<u64> {
    let d = count.wrapping_sub(pushed & COUNT_MASK) & COUNT_MASK;
    (d <= COUNT_MASK / 2).then_some(d)
}

/// What went wrong, for the log: an I/O timeout (whose error reads "Resource temporarily
/// unavailable") as "timed out" with the timeout, other errors as Redis words them.
pub(super) fn reason(e: &redis::RedisError, timeout: Duration) -> String {
    if e.is_timeout() {
        format!("timed out: no answer from Redis within {timeout:?}")
    } else {
        e.to_string()
    }
}

/// The I/O timeout: never longer than the zone tolerates before falling back anyway.
fn io_timeout(zone: &ClusterZone) -> Duration {
    (zone.spec.sync_interval * 2).clamp(Duration::from_millis(50), Duration::from_secs(2))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_read_timed_out() {
        let t = Duration::from_millis(200);
        // SO_RCVTIMEO expiring: EAGAIN (os error 11), or ETIMEDOUT.
        for io in [
            std::io::Error::from_raw_os_error(libc::EAGAIN),
            std::io::Error::from(std::io::ErrorKind::TimedOut),
        ] {
            let r = reason(&redis::RedisError::from(io), t);
            assert_eq!(r, "timed out: no answer from Redis within 200ms");
        }
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let r = reason(&redis::RedisError::from(refused), t);
        assert!(!r.contains("timed out"), "{r}");
    }
}
