//! Building an engine: zone layouts and schemas, tables, exact logs, cluster sides, key plans.

use super::*;

/// How a limit's key is made, decided when the engine is built.
#[derive(Clone, Copy)]
pub(super) enum KeyPlan {
    /// A key that reads nothing of the request (`global`): the hash of the bytes
    /// [`super::key::KeySpec::build`] writes, computed once.
    Fixed(u64),
    /// `ip` alone: the bytes `build` would write, written straight into a fixed buffer.
    Ip { v4_prefix: u8, v6_prefix: u8 },
    /// `var:NAME` alone, in a local zone whose limits all have this key: the value's bytes
    /// (nothing else shares the zone's keys, so no encoding is needed to keep them apart).
    /// The index is the variable's ([`Engine::var_names`]).
    Var(usize),
    /// `var:NAME` alone (unmasked) in a cluster zone: the cluster hash of the pieces before
    /// the value, kept, then the value's ([`super::key::KeySpec::var_prefix`]): the same hash
    /// as [`KeyPlan::General`]'s, so every node names the key alike whatever its plan.
    ClusterVar(usize, crate::cluster::KeyPieces),
    /// Anything else: the encoding's pieces hashed as they are produced
    /// ([`super::key::KeySpec::hash_pieces`]: no buffer to fill and read back), with the
    /// zone table's hasher, or in a cluster zone, whose keys every node must name alike, the
    /// cluster key hash.
    General,
    /// [`KeyPlan::General`] with `var:` parts, which must all be set for the limit to apply.
    GeneralVars,
}

/// Every header name `policy` reads, lowercase, each once: the forwarding header, header and
/// cookie tests of classes and exemptions, header and cookie key parts.
pub(super) fn read_headers(policy: &CompiledPolicy) -> Vec<Box<[u8]>> {
    let mut names: Vec<&[u8]> = Vec::new();
    names.extend(policy.client_ip.header_name());
    for shape in policy
        .classes
        .iter()
        .chain(&policy.exemptions)
        .flat_map(|c| &c.shapes)
    {
        names.extend(shape.headers.iter().map(|(n, _)| &n[..]));
        if !shape.cookies.is_empty() {
            names.push(b"cookie");
        }
    }
    for part in policy.limits.iter().flat_map(|l| l.key.parts.iter()) {
        match part {
            KeyPart::Header(n) => names.push(n),
            KeyPart::Cookie(_) => names.push(b"cookie"),
            _ => {}
        }
    }
    let mut out: Vec<Box<[u8]>> = Vec::new();
    for n in names {
        let n = n.to_ascii_lowercase().into_boxed_slice();
        if !out.contains(&n) {
            out.push(n);
        }
    }
    out
}

impl Drop for Engine {
    /// Stops the cluster syncers before the tables they scan are freed.
    fn drop(&mut self) {
        for c in self.clusters.iter().flatten() {
            c.shutdown();
        }
    }
}

/// What a zone's table must be created with (hosts that place tables in shared memory).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZoneLayout {
    pub name: String,
    pub bytes: usize,
    /// Identifies the meaning of the zone's states; a reload that changes it is refused.
    pub schema: u64,
    /// For a `scope = "cluster"` zone: bytes of its shared cluster region (remote counts,
    /// pushed counts, health and stats; [`ClusterShared`]), 0 for a local zone. Hosts with
    /// several processes over one table give it to [`Engine::with_shared`].
    pub cluster_bytes: usize,
}

/// A stable fingerprint of what a zone's states mean (algorithm and the parameters that give
/// states their meaning; a changed GCRA rate keeps its states usable, as nginx allows).
pub(super) fn zone_schema(z: &config::Zone) -> u64 {
    let (kind, param) = match z.algorithm {
        // A cluster GCRA zone's states also count admissions (src/cluster/gcra.rs); its rate
        // is part of their meaning (no rescaling on reload).
        config::Algorithm::Gcra { rate } if z.cluster.is_some() => {
            (7, rate.interval_ns().unwrap_or(0))
        }
        config::Algorithm::Gcra { .. } => (1u64, 0u64),
        // Cluster zones keep wall-clock window ids and cluster key hashes: another meaning.
        config::Algorithm::Sliding { window, .. } if z.cluster.is_some() => {
            (4, window.as_nanos() as u64)
        }
        config::Algorithm::Sliding { window, .. } => (2, window.as_nanos() as u64),
        // A cluster pool's keys are cluster key hashes.
        config::Algorithm::Concurrency { .. } if z.cluster.is_some() => {
            (6, z.lease.as_nanos() as u64)
        }
        config::Algorithm::Concurrency { .. } => (3, z.lease.as_nanos() as u64),
        // The log's record size depends on `events`: both are part of the layout.
        config::Algorithm::SlidingLog { events, window } => {
            (5 | events << 8, window.as_millis() as u64)
        }
    };
    // FNV-1a over the fields: stable across builds and processes.
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for b in kind.to_le_bytes().into_iter().chain(param.to_le_bytes()) {
        h = (h ^ b as u64).wrapping_mul(0x0100_0000_01b3);
    }
    h
}

pub(super) fn limiter_for(
    zone: &config::Zone,
    limit: &Limit,
    cluster: Option<&Arc<ClusterZone>>,
    log: Option<&Arc<LogTable>>,
) -> Result<Limiter, String> {
    let err = |e: crate::limiter::ParamError| format!("limit {}: {e}", limit.name);
    if let Some(l) = log {
        return Ok(Limiter::Rate(RateAlg::Log(Arc::clone(l))));
    }
    if let (Some(c), config::Algorithm::Gcra { rate }) = (cluster, zone.algorithm) {
        // Each node's share while Redis is away: rate and burst ÷ expected_nodes.
        let n = c.spec().expected_nodes.max(1);
        let share = crate::limiter::Rate {
            count: rate.count,
            period_ns: rate.period_ns.saturating_mul(n),
        };
        let burst = limit.burst / n;
        let delay = match limit.delay {
            crate::limiter::Delay::After(d) => crate::limiter::Delay::After(d.min(burst)),
            d => d,
        };
        let main = Gcra::new(rate, limit.burst, limit.delay).map_err(err)?;
        let fallback = Gcra::new(share, burst, delay).map_err(err)?;
        return Ok(Limiter::Rate(RateAlg::ClusterGcra(
            Arc::clone(c),
            Box::new([main, fallback]),
        )));
    }
    if let Some(c) = cluster.filter(|c| c.window().is_some()) {
        if limit.cost > c.fallback_events() {
            return Err(format!(
                "limit {}: cost {} exceeds zone {}'s fallback share of {} events per node",
                limit.name,
                limit.cost,
                c.name(),
                c.fallback_events()
            ));
        }
        return Ok(Limiter::Rate(RateAlg::Cluster(Arc::clone(c))));
    }
    Ok(match zone.algorithm {
        config::Algorithm::Gcra { rate } => Limiter::Rate(RateAlg::Gcra(
            Gcra::new(rate, limit.burst, limit.delay).map_err(err)?,
        )),
        config::Algorithm::Sliding { events, window } => Limiter::Rate(RateAlg::Sliding(
            SlidingWindow::new(events, window.as_nanos() as u64).map_err(err)?,
        )),
        config::Algorithm::Concurrency { max } => Limiter::Concurrency(
            Concurrency::new(limit.max.unwrap_or(max), zone.lease.as_nanos() as u64)
                .map_err(err)?,
        ),
        config::Algorithm::SlidingLog { .. } => unreachable!("sliding_log zones have their table"),
    })
}

/// The exact sliding log of an `algorithm = "sliding_log"` zone. It lives in the zone's region after
/// the slot table's 1152-byte header (whose seed gives the key hashes and whose identity the
/// hosts validate on reload); the slot area, never used by a sliding_log zone, holds the log table,
/// created there or attached with its state like the header.
pub(super) fn log_for(zone: &config::Zone, table: &Table) -> Result<Option<Arc<LogTable>>, String> {
    let config::Algorithm::SlidingLog { events, window } = zone.algorithm else {
        return Ok(None);
    };
    let log = SlidingLog::new(events, window.as_nanos() as u64)
        .map_err(|e| format!("zone {}: {e}", zone.name))?;
    let skip = Table::bytes_for(0) - crate::table::MIN_CAPACITY * crate::table::SLOT_BYTES;
    let too_small = |bytes: usize| {
        format!(
            "zone {}: size {bytes} holds no log record; a sliding_log zone of {events} events needs at least {} bytes ({} per key)",
            zone.name,
            skip + LogTable::bytes_for(&log, 1),
            log.record_bytes()
        )
    };
    #[cfg(not(loom))]
    {
        let len = table.region_len();
        if len < skip + LogTable::bytes_for(&log, 1) {
            return Err(too_small(len));
        }
        let t = table
            .log_in_slots(log)
            .map_err(|e| format!("zone {}: {e}", zone.name))?;
        Ok(Some(Arc::new(t)))
    }
    #[cfg(loom)]
    {
        let _ = too_small;
        Ok(Some(Arc::new(
            LogTable::new(zone.size as usize, log, table.clock_base())
                .map_err(|e| format!("zone {}: {e}", zone.name))?,
        )))
    }
}

/// The cluster side of a `scope = "cluster"` zone (its remote counts in `shared` when given),
/// its syncer started over `table` when `start`.
pub(super) fn cluster_for(
    zone: &config::Zone,
    table: &Table,
    shared: Option<ClusterShared>,
    start: bool,
) -> Result<Option<Arc<ClusterZone>>, String> {
    let Some(spec) = &zone.cluster else {
        return Ok(None);
    };
    let (name, spec) = (&zone.name, spec.clone());
    let c = Arc::new(match zone.algorithm {
        config::Algorithm::Sliding { events, window } => {
            let w = window.as_nanos() as u64;
            ClusterZone::with_shared(name, spec, events, w, table, shared)?
        }
        config::Algorithm::Concurrency { max } => {
            let permits = Concurrency::new(max, zone.lease.as_nanos() as u64)
                .map_err(|e| format!("zone {name}: {e}"))?;
            ClusterZone::pool(name, spec, permits, table, shared)?
        }
        config::Algorithm::Gcra { rate } => {
            let t = rate
                .interval_ns()
                .map_err(|e| format!("zone {name}: {e}"))?;
            ClusterZone::gcra(name, spec, t, table, shared)?
        }
        _ => return Ok(None),
    });
    if start {
        c.start(table.alias())?;
    }
    Ok(Some(c))
}

impl Engine {
    /// Zone tables in this process's memory, on the CLOCK_MONOTONIC time base.
    pub fn new(policy: CompiledPolicy) -> Result<Engine, String> {
        let tables = Engine::layouts(&policy)
            .iter()
            .map(|z| Table::new(z.bytes, z.schema, 0).map_err(|e| format!("zone {}: {e}", z.name)))
            .collect::<Result<Vec<_>, _>>()?;
        Engine::with_tables(policy, tables)
    }

    /// The tables a policy needs, in zone order.
    pub fn layouts(policy: &CompiledPolicy) -> Vec<ZoneLayout> {
        policy
            .zones
            .iter()
            .map(|z| ZoneLayout {
                name: z.name.clone(),
                bytes: z.size as usize,
                schema: zone_schema(z),
                cluster_bytes: if z.cluster.is_some() {
                    crate::cluster::shared_bytes(Table::capacity_for(z.size as usize))
                } else {
                    0
                },
            })
            .collect()
    }

    /// An engine over tables the host created or attached (one per zone, in zone order, as
    /// [`Engine::layouts`] describes them).
    pub fn with_tables(policy: CompiledPolicy, tables: Vec<Table>) -> Result<Engine, String> {
        let counters = Counters::new(policy.limits.len());
        Engine::with_tables_and_counters(policy, tables, counters)
    }

    /// Like [`Engine::with_tables`], with the counters in a block the host shares between
    /// processes ([`Engine::counters_layout`] gives its size and fingerprint).
    pub fn with_tables_and_counters(
        policy: CompiledPolicy,
        tables: Vec<Table>,
        counters: Counters,
    ) -> Result<Engine, String> {
        let shared = (0..tables.len()).map(|_| None).collect();
        Engine::with_shared(policy, tables, shared, counters, true)
    }

    /// The most general constructor, for hosts whose processes share the tables (nginx
    /// workers): `shared` gives, per zone in zone order, the shared region of a cluster zone
    /// (`None`: in this process; local zones take `None`). With `start_syncers` false the
    /// cluster syncers wait for [`Engine::start_syncers`] (nginx builds the engine in its
    /// master and starts the syncers in each worker: threads do not survive `fork`).
    pub fn with_shared(
        policy: CompiledPolicy,
        tables: Vec<Table>,
        shared: Vec<Option<ClusterShared>>,
        counters: Counters,
        start_syncers: bool,
    ) -> Result<Engine, String> {
        if tables.len() != policy.zones.len() || shared.len() != policy.zones.len() {
            return Err(format!(
                "{} tables and {} cluster regions for {} zones",
                tables.len(),
                shared.len(),
                policy.zones.len()
            ));
        }
        let clusters = policy
            .zones
            .iter()
            .zip(&tables)
            .zip(shared)
            .map(|((z, t), s)| cluster_for(z, t, s, start_syncers))
            .collect::<Result<Vec<_>, _>>()?;
        let logs = policy
            .zones
            .iter()
            .zip(&tables)
            .map(|(z, t)| log_for(z, t))
            .collect::<Result<Vec<_>, _>>()?;
        let limiters = policy
            .limits
            .iter()
            .map(|l| {
                let z = l.zone;
                limiter_for(&policy.zones[z], l, clusters[z].as_ref(), logs[z].as_ref())
            })
            .collect::<Result<Vec<_>, _>>()?;
        // A GCRA zone attached with another rate keeps each key's excess in requests (done
        // last: a refused engine changes no state).
        let now = crate::clock::monotonic_ns();
        for (z, t) in policy.zones.iter().zip(&tables) {
            // A parsed rate always has an interval (count 1..=MAX_RATE_COUNT per second or more).
            if let (config::Algorithm::Gcra { rate }, None) = (z.algorithm, &z.cluster) {
                if let Ok(interval) = rate.interval_ns() {
                    t.set_gcra_interval(interval, now);
                }
            }
        }
        let header_names = read_headers(&policy);
        // Permits and deferred charges are handed back through the ledger.
        let ledger = Ledger::new(
            limiters
                .iter()
                .any(|l| matches!(l, Limiter::Concurrency(_)))
                || policy.limits.iter().any(|l| !l.charge_on_status.is_empty()),
        );
        let mut counters = counters;
        counters.exposure = policy.status_clients;
        counters.hide = policy.key_hide.clone();
        counters.record_keys = policy.status_top_keys;
        let mut engine = Engine {
            ledger,
            headers: HeaderPlan::new(header_names.iter().map(|n| &n[..])),
            header_names,
            classes: ClassSet::new(&policy.classes, &policy.exemptions),
            policy,
            tables,
            limiters,
            counters,
            clusters,
            logs,
            keys: Vec::new(),
            traits: Vec::new(),
            fast_policy: None,
            fast_on: true,
            policy_reads: Reads::default(),
            any_ban: false,
            ban_ids: Vec::new(),
            any_deferred: false,
            samplers: Vec::new(),
            laned: Box::default(),
        };
        engine.samplers = Engine::samplers(&engine.policy, &engine.limiters);
        engine.laned = (engine.policy.class_lanes.iter().enumerate())
            .filter_map(|(c, l)| l.map(|l| (c, l)))
            .collect();
        engine.any_ban = engine.policy.limits.iter().any(|l| l.ban.is_some());
        engine.any_deferred = (engine.policy.limits.iter()).any(|l| !l.charge_on_status.is_empty());
        engine.keys = engine.key_plans();
        engine.traits = engine.limit_traits();
        engine.policy_reads = engine.policy_reads();
        engine.fast_policy = engine.fast_policy(&engine.traits);
        engine.ban_ids = engine.ban_ids(now);
        engine.counters.ban_ids = engine.ban_ids.clone();
        Ok(engine)
    }

    /// What [`Engine::evaluate`] reads of the target: the path if a class, an exemption or a
    /// key tests it, the query if a class or an exemption does.
    fn policy_reads(&self) -> Reads {
        let p = &self.policy;
        let shapes = || (p.classes.iter().chain(&p.exemptions)).flat_map(|c| &c.shapes);
        let path_key =
            (p.limits.iter()).any(|l| !l.selected && l.key.parts.contains(&KeyPart::Path));
        Reads {
            path: path_key || shapes().any(|s| !s.path.is_empty()),
            query: shapes().any(|s| !s.query.is_empty()),
        }
    }

    pub(super) fn key_plans(&self) -> Vec<KeyPlan> {
        let anyone = OwnedRequest::new("GET", "/", std::net::Ipv4Addr::UNSPECIFIED.into());
        self.policy
            .limits
            .iter()
            .map(|l| match &l.key.parts[..] {
                [KeyPart::Ip {
                    v4_prefix,
                    v6_prefix,
                }] => KeyPlan::Ip {
                    v4_prefix: *v4_prefix,
                    v6_prefix: *v6_prefix,
                },
                [KeyPart::Var { index, mask, .. }]
                    if mask.is_none()
                        && self.clusters[l.zone].is_none()
                        && self
                            .policy
                            .limits
                            .iter()
                            .all(|o| o.zone != l.zone || o.key == l.key) =>
                {
                    KeyPlan::Var(*index)
                }
                parts if parts.iter().any(|p| matches!(p, KeyPart::Var { .. })) => {
                    match self.clusters[l.zone]
                        .as_ref()
                        .and_then(|c| l.key.var_prefix(c.key_hasher()))
                    {
                        Some((index, prefix)) => KeyPlan::ClusterVar(index, prefix),
                        None => KeyPlan::GeneralVars,
                    }
                }
                parts if parts.iter().all(|p| *p == KeyPart::Global) => {
                    let req = PreparedRequest::new(&anyone, b"/", b"", anyone.peer);
                    let mut key = [0u8; KEY_BUF_LEN];
                    let len = l.key.build(&req, &mut key);
                    KeyPlan::Fixed(self.key_hash(l.zone, &key[..len]))
                }
                _ => KeyPlan::General,
            })
            .collect()
    }

    /// The size in bytes and the fingerprint of a shared counter block for this policy.
    pub fn counters_layout(policy: &CompiledPolicy) -> (usize, u64) {
        (
            Counters::bytes_for(policy.limits.len()),
            fingerprint(policy.limits.iter().map(|l| l.name.as_str())),
        )
    }
}
