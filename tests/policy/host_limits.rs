//! Host-selected limits ([`Engine::evaluate_selected`]) against the directive semantics
//! nginx's `limit_req` / `limit_conn` have, written out here as a reference model over bare
//! zone tables: every listed limit is charged in order, a rejection gives back the charges
//! before it (nothing stays charged) and decides with its excess, an empty key skips its
//! limit, the longest delay wins with its own excess, and in dry-run the would-be verdict is
//! only reported (a would-be rejection still leaves nothing charged). Random locations,
//! keys and times; the engine and the model must agree on every request.

use weir::limiter::{Concurrency, Decision, Delay, Gcra, Permit, Rate, Verdict};
use weir::policy::config::Algorithm;
use weir::policy::engine::Permits;
use weir::policy::{Action, Engine, HostLimit, HostLimits, HostZone, OwnedRequest};
use weir::table::Table;

const S: u64 = 1_000_000_000;
const ZONE_BYTES: u64 = 64 * 1024;

/// xorshift64*: deterministic, no dependency (also the fast path's test's).
pub(super) struct Rng(pub(super) u64);

impl Rng {
    pub(super) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub(super) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// nginx's excess in milli-requests for a GCRA verdict (burst `b`, interval `t`).
fn gcra_excess(v: &Verdict, burst: u64, t: u64) -> u64 {
    let ahead = if v.decision == Decision::Reject {
        burst * t + v.retry_after_ns
    } else {
        v.reset_ns.saturating_sub(t)
    };
    ahead / t * 1000 + ahead % t * 1000 / t
}

/// One `limit_req zone=Z burst=B [delay=N|nodelay]` directive.
#[derive(Clone, Copy, Debug)]
struct ReqDirective {
    zone: usize,
    burst: u64,
    delay: Delay,
}

/// What nginx's handler ends with for one location's `limit_req` directives.
#[derive(Debug, PartialEq, Eq)]
enum ReqStatus {
    /// No key was set: no status at all.
    None,
    Passed,
    Delayed {
        limit: usize,
        wait_ns: u64,
        excess: u64,
    },
    Rejected {
        limit: usize,
        excess: u64,
    },
}

/// The reference: bare tables, charged and refunded as nginx's module does.
struct ReqModel {
    tables: Vec<Table>,
    rates: Vec<Rate>,
}

impl ReqModel {
    fn gcra(&self, d: &ReqDirective) -> Gcra {
        Gcra::new(self.rates[d.zone], d.burst, d.delay).unwrap()
    }

    fn run(&self, loc: &[ReqDirective], keys: &[Vec<u8>], now: u64) -> ReqStatus {
        let mut charged: Vec<(usize, u64)> = Vec::new();
        let (mut max_wait, mut max) = (0, None);
        for (i, d) in loc.iter().enumerate() {
            let key = &keys[d.zone];
            if key.is_empty() {
                continue;
            }
            let t = &self.tables[d.zone];
            let h = t.key_hash(key);
            let g = self.gcra(d);
            let v = t.check(&g, h, 1, now);
            if v.decision == Decision::Reject {
                for &(j, h) in charged.iter().rev() {
                    let dj = &loc[j];
                    self.tables[dj.zone].refund(&self.gcra(dj), h, 1, now);
                }
                let excess = gcra_excess(&v, d.burst, g.interval_ns());
                return ReqStatus::Rejected { limit: i, excess };
            }
            charged.push((i, h));
            let wait = if v.decision == Decision::Delay {
                v.wait_ns
            } else {
                0
            };
            if wait > max_wait {
                max_wait = wait;
                max = Some((i, gcra_excess(&v, d.burst, g.interval_ns())));
            }
        }
        match (charged.is_empty(), max) {
            (true, _) => ReqStatus::None,
            (false, None) => ReqStatus::Passed,
            (false, Some((limit, excess))) => ReqStatus::Delayed {
                limit,
                wait_ns: max_wait,
                excess,
            },
        }
    }
}

/// The engine's outcome in the model's terms (`dry`: the location is in dry-run mode).
fn req_status(o: &weir::policy::Outcome, dry: bool, index: &[u16]) -> ReqStatus {
    let pos = |l: u16| index.iter().position(|&x| x == l).expect("a listed limit");
    if o.unmatched {
        return ReqStatus::None;
    }
    if dry {
        assert_eq!(o.action, Action::Pass, "dry run never enforces");
        return match o.dry_run {
            None => ReqStatus::Passed,
            Some((l, Action::Reject)) => ReqStatus::Rejected {
                limit: pos(l),
                excess: o.dry_run_excess_milli,
            },
            // A dry-run delay is reported with its excess only (nginx logs no time).
            Some((l, Action::Delay)) => ReqStatus::Delayed {
                limit: pos(l),
                wait_ns: 0,
                excess: o.dry_run_excess_milli,
            },
            other => panic!("unexpected dry-run report {other:?}"),
        };
    }
    assert_eq!(o.dry_run, None);
    match o.action {
        Action::Pass => ReqStatus::Passed,
        Action::Delay => ReqStatus::Delayed {
            limit: pos(o.limit.unwrap()),
            wait_ns: o.wait_ns,
            excess: o.excess_milli,
        },
        Action::Reject => ReqStatus::Rejected {
            limit: pos(o.limit.unwrap()),
            excess: o.excess_milli,
        },
        Action::Queue => panic!("no queue in a directive"),
    }
}

/// Zones with var keys `z0` … (one variable per zone, as an nginx zone's key).
fn gcra_zones(b: &mut HostLimits) -> Vec<Rate> {
    let rates = [(2, 1), (1, 1), (5, 60)];
    rates
        .iter()
        .enumerate()
        .map(|(z, &(count, secs))| {
            let rate = Rate {
                count,
                period_ns: secs * S,
            };
            b.zone(
                &format!("z{z}"),
                HostZone {
                    size: ZONE_BYTES,
                    algorithm: Algorithm::Gcra { rate },
                },
            );
            rate
        })
        .collect()
}

fn request_with(engine: &Engine, keys: &[Vec<u8>], unset: &[bool]) -> OwnedRequest {
    let mut r = OwnedRequest::new("GET", "/", "192.0.2.1".parse().unwrap());
    for (z, k) in keys.iter().enumerate() {
        let name = format!("z{z}");
        let index = engine
            .var_names()
            .position(|n| n == name.as_bytes())
            .unwrap();
        // An empty value is sent as absent or as empty: both mean "no key".
        if !(k.is_empty() && unset[z]) {
            r = r.var(index, k);
        }
    }
    r
}

#[test]
fn limit_req_directives_as_nginx() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for round in 0..20 {
        let mut b = HostLimits::new();
        let rates = gcra_zones(&mut b);
        // Locations: 1 to 3 distinct zones each (nginx refuses a zone twice in one location).
        let mut locations: Vec<(Vec<ReqDirective>, Vec<u16>, bool)> = Vec::new();
        for _ in 0..4 {
            let dry = rng.below(4) == 0;
            let mut zones: Vec<usize> = (0..rates.len()).collect();
            let n = 1 + rng.below(3) as usize;
            let mut loc = Vec::new();
            let mut idx = Vec::new();
            for _ in 0..n {
                let zone = zones.remove(rng.below(zones.len() as u64) as usize);
                let burst = rng.below(4);
                let delay = match rng.below(3) {
                    0 => Delay::NoDelay,
                    1 => Delay::After(rng.below(burst + 1)),
                    _ => Delay::Delay,
                };
                let d = ReqDirective { zone, burst, delay };
                idx.push(b.limit(
                    &format!("z{zone}"),
                    HostLimit {
                        key: vec![format!("var:z{zone}")],
                        burst,
                        delay,
                        dry_run: dry,
                        status: 503,
                        ..HostLimit::default()
                    },
                ));
                loc.push(d);
            }
            locations.push((loc, idx, dry));
        }
        let policy = b.build().unwrap_or_else(|e| panic!("{e}"));
        let engine = Engine::new(policy).unwrap();
        let model = ReqModel {
            tables: rates
                .iter()
                .map(|_| Table::new(ZONE_BYTES as usize, 1, 0).unwrap())
                .collect(),
            rates,
        };
        let mut now = 1000 * S;
        for step in 0..300 {
            now += rng.below(400) * 1_000_000;
            let (loc, idx, dry) = &locations[rng.below(locations.len() as u64) as usize];
            let keys: Vec<Vec<u8>> = (0..model.rates.len())
                .map(|_| match rng.below(5) {
                    0 => Vec::new(),
                    k => format!("k{k}").into_bytes(),
                })
                .collect();
            let unset: Vec<bool> = keys.iter().map(|_| rng.below(2) == 0).collect();
            let req = request_with(&engine, &keys, &unset);
            let mut want = model.run(loc, &keys, now);
            if let (ReqStatus::Delayed { wait_ns, .. }, true) = (&mut want, *dry) {
                *wait_ns = 0;
            }
            let out = engine.evaluate_selected(&req, idx, now).unwrap();
            let got = req_status(&out, *dry, idx);
            assert_eq!(got, want, "round {round} step {step}: {loc:?} dry={dry}");
            if matches!(want, ReqStatus::Rejected { .. }) && !dry {
                assert_eq!(out.status, 503);
            }
        }
    }
}

/// One location's `limit_conn` directives (zone, max), their limit indexes, and dry run.
type ConnLocation = (Vec<(usize, u64)>, Vec<u16>, bool);
/// A request in flight: the model's permits (zone, max, permit), the engine's, the step it ends.
type InFlight = (Vec<(usize, u64, Permit)>, Permits, u64);

/// `limit_conn`: permits taken in order, a full one gives back those taken before it.
#[test]
fn limit_conn_directives_as_nginx() {
    let mut rng = Rng(0x0123_4567_89ab_cdef);
    for round in 0..20 {
        let mut b = HostLimits::new();
        for z in 0..3 {
            b.zone(
                &format!("c{z}"),
                HostZone {
                    size: ZONE_BYTES,
                    algorithm: Algorithm::Concurrency { max: 0 },
                },
            );
        }
        // Per location: its directives (zone, max), their limit indexes, dry run.
        let mut locations: Vec<ConnLocation> = Vec::new();
        for _ in 0..4 {
            let dry = rng.below(4) == 0;
            let mut zones: Vec<usize> = (0..3).collect();
            let n = 1 + rng.below(3) as usize;
            let (mut loc, mut idx) = (Vec::new(), Vec::new());
            for _ in 0..n {
                let zone = zones.remove(rng.below(zones.len() as u64) as usize);
                let max = 1 + rng.below(3);
                idx.push(b.limit(
                    &format!("c{zone}"),
                    HostLimit {
                        key: vec![format!("var:c{zone}")],
                        max: Some(max),
                        dry_run: dry,
                        ..HostLimit::default()
                    },
                ));
                loc.push((zone, max));
            }
            locations.push((loc, idx, dry));
        }
        let engine = Engine::new(b.build().unwrap_or_else(|e| panic!("{e}"))).unwrap();
        let tables: Vec<Table> = (0..3)
            .map(|_| Table::new(ZONE_BYTES as usize, 3, 0).unwrap())
            .collect();
        let lease = weir::limiter::concurrency::DEFAULT_LEASE_NS;
        // In flight: (model permits, engine permits, step it ends).
        let mut open: Vec<InFlight> = Vec::new();
        let mut now = 1000 * S;
        for step in 0..300u64 {
            now += rng.below(50) * 1_000_000;
            // Requests whose response is complete release their permits.
            let mut k = 0;
            while k < open.len() {
                if open[k].2 <= step {
                    let (held, permits, _) = open.swap_remove(k);
                    for (z, max, p) in held {
                        let c = Concurrency::new(max, lease).unwrap();
                        tables[z].release(&c, p, now);
                    }
                    engine.release(permits, now);
                } else {
                    k += 1;
                }
            }
            let (loc, idx, dry) = &locations[rng.below(locations.len() as u64) as usize];
            let keys: Vec<Vec<u8>> = (0..3)
                .map(|_| match rng.below(4) {
                    0 => Vec::new(),
                    k => format!("k{k}").into_bytes(),
                })
                .collect();
            let mut req = OwnedRequest::new("GET", "/", "192.0.2.1".parse().unwrap());
            for (z, key) in keys.iter().enumerate() {
                let name = format!("c{z}");
                let i = engine.var_names().position(|n| n == name.as_bytes());
                if let Some(i) = i {
                    req = req.var(i, key);
                }
            }
            // The model: nginx's ngx_http_limit_conn_handler.
            let mut held: Vec<(usize, u64, Permit)> = Vec::new();
            let mut applied = false;
            let mut rejected = None;
            for (i, &(z, max)) in loc.iter().enumerate() {
                if keys[z].is_empty() {
                    continue;
                }
                applied = true;
                let c = Concurrency::new(max, lease).unwrap();
                match tables[z].acquire(&c, tables[z].key_hash(&keys[z]), now) {
                    (_, Some(p)) => held.push((z, max, p)),
                    (_, None) => {
                        for (z, max, p) in held.drain(..) {
                            tables[z].release(&Concurrency::new(max, lease).unwrap(), p, now);
                        }
                        rejected = Some(i);
                        break;
                    }
                }
            }
            let mut out = engine.evaluate_selected(&req, idx, now).unwrap();
            let ctx = format!("round {round} step {step}: {loc:?} dry={dry}");
            assert_eq!(out.unmatched, !applied, "{ctx}");
            let pos = |l: u16| idx.iter().position(|&x| x == l);
            match (rejected, dry) {
                (None, _) => {
                    assert_eq!((out.action, out.dry_run), (Action::Pass, None), "{ctx}")
                }
                (Some(i), false) => {
                    assert_eq!(out.action, Action::Reject, "{ctx}");
                    assert_eq!(out.limit.and_then(pos), Some(i), "{ctx}");
                    assert_eq!(out.excess_milli, 1000, "{ctx}");
                }
                (Some(i), true) => {
                    assert_eq!(out.action, Action::Pass, "{ctx}");
                    let (l, a) = out.dry_run.expect("reported");
                    assert_eq!((pos(l), a), (Some(i), Action::Reject), "{ctx}");
                }
            }
            let permits = std::mem::take(&mut out.permits);
            open.push((held, permits, step + 1 + rng.below(6)));
        }
    }
}

/// A listed index that names no limit is refused before anything is charged.
#[test]
fn unknown_limits_are_refused() {
    let mut b = HostLimits::new();
    b.zone(
        "z",
        HostZone {
            size: ZONE_BYTES,
            algorithm: Algorithm::Gcra {
                rate: Rate {
                    count: 1,
                    period_ns: 60 * S,
                },
            },
        },
    );
    let l = b.limit("z", HostLimit::default());
    let engine = Engine::new(b.build().unwrap()).unwrap();
    let req = OwnedRequest::new("GET", "/", "192.0.2.1".parse().unwrap());
    assert!(engine.evaluate_selected(&req, &[l, 7], S).is_err());
    // Nothing was charged: the limit still admits its one request.
    let out = engine.evaluate_selected(&req, &[l], S).unwrap();
    assert_eq!(out.action, Action::Pass);
    let out = engine.evaluate_selected(&req, &[l], S).unwrap();
    assert_eq!(out.action, Action::Reject);
    // Host-selected limits never apply on their own.
    let out = engine.evaluate(&req, S).unwrap();
    assert!(out.unmatched);
}

/// The error of `src` whose message contains `needle`: (line, column, message).
fn policy_error(src: &str, needle: &str) -> (usize, usize, String) {
    match weir::policy::config::check_policy(src, Some("p.toml")) {
        Ok(_) => panic!("expected an error in {src}"),
        Err(errs) => errs
            .into_iter()
            .find(|e| e.message.contains(needle))
            .map(|e| (e.line, e.column, e.message))
            .unwrap_or_else(|| panic!("no error with {needle:?} in {src}")),
    }
}

const GCRA_ZONE: &str = "[zones.z]\nsize = \"64k\"\nalgorithm = \"gcra\"\nrate = \"1r/s\"\n";
const CONC_ZONE: &str = "[zones.c]\nsize = \"64k\"\nalgorithm = \"concurrency\"\nmax = 5\n";

#[test]
fn policy_format_for_vars_and_host_limits() {
    let ok = format!(
        "{GCRA_ZONE}{CONC_ZONE}[[limit]]\nclass = \"@host\"\nzone = \"z\"\nname = \"a\"\nkey = [\"var:tenant\", \"ip\", \"var:$host\"]\n\
         [[limit]]\nclass = \"*\"\nzone = \"c\"\nkey = \"var:tenant\"\nmax = 2\n"
    );
    let p = weir::policy::parse_policy(&ok, None).unwrap_or_else(|e| panic!("{e}"));
    assert!(p.limits[0].selected && !p.limits[1].selected);
    assert_eq!(p.limits[1].max, Some(2));
    assert_eq!(p.vars, ["tenant", "$host"]);
    // Tests on variables in classes number their names after the key parts'.
    let with_class = format!(
        "{GCRA_ZONE}[classes.c]\nmatch = [{{ var.tier = {{ equals = \"free\" }}, var.tenant = {{ present = true }} }}]\n\
         [[limit]]\nclass = \"c\"\nzone = \"z\"\nkey = \"var:tenant\"\n"
    );
    let q = weir::policy::parse_policy(&with_class, None).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(q.vars, ["tenant", "tier"]);
    let engine_q = Engine::new(q).unwrap();
    let req = |tier: &str| {
        OwnedRequest::new("GET", "/", "192.0.2.1".parse().unwrap())
            .var(0, "t")
            .var(1, tier)
    };
    assert!(!engine_q.evaluate(&req("free"), S).unwrap().unmatched);
    assert!(engine_q.evaluate(&req("paid"), S).unwrap().unmatched);
    let engine = Engine::new(p).unwrap();
    let names: Vec<&[u8]> = engine.var_names().collect();
    assert_eq!(names, [&b"tenant"[..], b"$host"]);

    for (src, line, col, needle) in [
        (
            format!("{GCRA_ZONE}[[limit]]\nclass = [\"@host\", \"*\"]\nzone = \"z\"\n"),
            6,
            9,
            "\"@host\"",
        ),
        (
            format!("{GCRA_ZONE}[[limit]]\nclass = \"*\"\nzone = \"z\"\nkey = \"var:a b\"\n"),
            8,
            7,
            "invalid variable name \"a b\"",
        ),
        (
            format!("{GCRA_ZONE}[[limit]]\nclass = \"*\"\nzone = \"z\"\nkey = \"var:\"\n"),
            8,
            7,
            "invalid variable name \"\"",
        ),
        (
            format!("{GCRA_ZONE}[classes.c]\nmatch = [{{ var.\"a b\" = {{ present = true }} }}]\n[[limit]]\nclass = \"c\"\nzone = \"z\"\n"),
            6,
            16,
            "invalid variable name \"a b\"",
        ),
        (
            format!("{GCRA_ZONE}[[limit]]\nclass = \"*\"\nzone = \"z\"\nmax = 2\n"),
            8,
            7,
            "`max` applies only to concurrency zones",
        ),
        (
            format!("{CONC_ZONE}[[limit]]\nclass = \"*\"\nzone = \"c\"\nmax = 0\n"),
            8,
            7,
            "max must be between 1 and",
        ),
        (
            format!("{CONC_ZONE}[[limit]]\nclass = \"*\"\nzone = \"c\"\nmax = 2\ncost = 3\n"),
            9,
            8,
            "exceeds the limit's max = 2",
        ),
    ] {
        let (l, c, m) = policy_error(&src, needle);
        assert_eq!((l, c), (line, col), "{m}");
    }
}

#[test]
fn builder_errors_name_their_item() {
    let mut b = HostLimits::new();
    b.zone(
        "z",
        HostZone {
            size: 100,
            algorithm: Algorithm::Gcra {
                rate: Rate {
                    count: 1,
                    period_ns: S,
                },
            },
        },
    );
    b.zone(
        "c",
        HostZone {
            size: ZONE_BYTES,
            algorithm: Algorithm::Concurrency { max: 0 },
        },
    );
    b.limit("nowhere", HostLimit::default());
    b.limit(
        "z",
        HostLimit {
            key: vec!["var:".into()],
            ..HostLimit::default()
        },
    );
    let e = b.build().unwrap_err();
    for needle in [
        "zone \"z\": size 100",
        "limit 0 (zone \"nowhere\"): unknown zone \"nowhere\"",
        "limit 1 (zone \"z\"): invalid variable name \"\"",
    ] {
        assert!(e.contains(needle), "{e:?} lacks {needle:?}");
    }
    // A limit on a zone without a max of its own needs one (found before compiling).
    b.limit("c", HostLimit::default());
    let e = b.build().unwrap_err();
    assert_eq!(
        e,
        "limit 2 (zone \"c\"): zone \"c\" has no max of its own, so each of its limits needs one"
    );
}
