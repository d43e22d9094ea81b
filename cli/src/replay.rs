//! `weir replay`: access-log lines → the real engine, in log-time order, with the log's own
//! timestamps; counts per limit, top keys, distinct clients, verdicts and a timeline.
//!
//! Ordering: lines pass through a reordering buffer of `window` seconds of log time. A line is
//! evaluated once a line at least `window` later has been read (or at the end), so lines up to
//! `window` seconds out of order are replayed in time order. A line older than what was already
//! replayed ("late") is evaluated at once at the last replayed time and counted.
//!
//! Whole-second timestamps (`$time_local`, `$time_iso8601`): the requests of one second are
//! spread evenly over that second in log order (n requests at s, s + 1/n, …), so a rate limit
//! sees the second's real rate instead of n simultaneous requests (`--no-spread` turns it off).

use std::borrow::Cow;
use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::fmt::Write as _;
use std::io::{self, IsTerminal, Write};
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use weir::policy::config::Limit;
use weir::policy::counters::LimitCounts;
use weir::policy::engine::{Charges, Permits};
use weir::policy::key::KeyPart;
use weir::policy::{Action, Engine};

use crate::agreement::Agreement;
use crate::escape;
use crate::input::{self, Line, LineReader};
use crate::logfmt::{Entry, LogFormat};
use crate::reorder::{Pool, Reorder};
use crate::report::{ExemptionReport, KeyCount, LimitReport, Report, Timeline};
use crate::timefmt::{self, NS};
use crate::topn::{Distinct, SpaceSaving};
use crate::unlogged;

/// Replay settings.
pub struct Options {
    pub policy: PathBuf,
    pub format: String,
    /// Caddy: take `request.client_ip` as the peer.
    pub caddy_client_ip: bool,
    pub inputs: Vec<String>,
    /// Reordering window, seconds of log time.
    pub window_s: u64,
    /// Spread whole-second timestamps over their second.
    pub spread: bool,
    /// At most this many lines are held for reordering (older ones are then replayed early).
    pub max_buffered: usize,
    /// At most this many bytes of parsed lines are held for reordering (likewise).
    pub max_buffered_bytes: usize,
    /// Longest line parsed, in bytes; longer lines are malformed (and never held whole).
    pub max_line: usize,
    pub verdicts: Option<PathBuf>,
    /// Top keys / clients per limit in the report.
    pub top: usize,
    /// Progress bar (only drawn when stderr is a terminal).
    pub progress: bool,
    /// Malformed lines shown on stderr.
    pub show_malformed: usize,
}

/// Engine time of the first replayed request (any positive base; tables start empty).
const BASE_NS: u64 = 1_000_000_000_000;
/// Items tracked per limit by the heavy-hitter summaries.
const TOP_CAPACITY: usize = 1024;
/// Distinct counts are exact up to this many clients.
const DISTINCT_EXACT: usize = 65_536;

/// Concurrency permits, and deferred charges with the logged status, held until the logged
/// request duration has passed.
struct Held {
    end: u64,
    seq: u64,
    permits: Permits,
    charges: Charges,
    status: u16,
}
impl PartialEq for Held {
    fn eq(&self, o: &Self) -> bool {
        (self.end, self.seq) == (o.end, o.seq)
    }
}
impl Eq for Held {}
impl PartialOrd for Held {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Held {
    fn cmp(&self, o: &Self) -> Ordering {
        (o.end, o.seq).cmp(&(self.end, self.seq)) // min-heap
    }
}

struct LimitStats {
    top_keys: SpaceSaving<String>,
    top_clients: SpaceSaving<IpAddr>,
    clients: Distinct<IpAddr>,
}

/// The replay state behind the reordering buffer.
struct Sim {
    engine: Engine,
    origin: Option<i64>,
    last_t: i64,
    first_t: Option<i64>,
    held: BinaryHeap<Held>,
    seq: u64,
    snaps: Vec<LimitCounts>,
    limits: Vec<LimitStats>,
    exempt_by: Vec<u64>,
    clients: Distinct<IpAddr>,
    counts: Counts,
    timeline: Timeline,
    verdicts: Option<io::BufWriter<std::fs::File>>,
    line_buf: String,
    key_buf: String,
    agreement: Agreement,
    file_names: Vec<String>,
    bad_shown: usize,
    show: usize,
}

#[derive(Default)]
struct Counts {
    lines: u64,
    requests: u64,
    malformed: u64,
    bad_target: u64,
    reordered: u64,
    late: u64,
    passed: u64,
    delayed: u64,
    rejected: u64,
    queued: u64,
    exempt: u64,
    unmatched: u64,
    dry_run_limited: u64,
}

impl Sim {
    fn eval(&mut self, e: &Entry, t: i64) -> io::Result<()> {
        let origin = *self.origin.get_or_insert(t);
        self.first_t.get_or_insert(t);
        self.last_t = t;
        let now = BASE_NS + (t - origin).max(0) as u64;
        while self.held.peek().is_some_and(|h| h.end <= now) {
            let h = self.held.pop().expect("peeked");
            self.engine.charge_response(h.charges, h.status, now);
            self.engine.release(h.permits, now);
        }
        self.counts.requests += 1;
        // A logged peer always has an address, so resolution always gives one.
        let client = self.engine.policy().client_ip(e).unwrap_or(e.peer);
        let client = client.to_canonical();
        self.clients.add(&client);
        let verdict: &str;
        let mut decided: Option<usize> = None;
        let mut dry: Option<usize> = None;
        match self.engine.evaluate(e, now) {
            Err(err) => {
                self.counts.bad_target += 1;
                verdict = "bad_target";
                if self.bad_shown < self.show {
                    self.bad_shown += 1;
                    eprintln!(
                        "{}:{}: {err}; counted as bad_target",
                        self.file_names[e.file as usize], e.line
                    );
                }
            }
            Ok(out) => {
                verdict = match (out.exempt, out.unmatched, out.action) {
                    (Some(i), _, _) => {
                        self.counts.exempt += 1;
                        self.exempt_by[i as usize] += 1;
                        "exempt"
                    }
                    (_, true, _) => {
                        self.counts.unmatched += 1;
                        "unmatched"
                    }
                    (_, _, Action::Pass) => {
                        self.counts.passed += 1;
                        "pass"
                    }
                    (_, _, Action::Delay) => {
                        self.counts.delayed += 1;
                        "delay"
                    }
                    (_, _, Action::Reject) => {
                        self.counts.rejected += 1;
                        "reject"
                    }
                    (_, _, Action::Queue) => {
                        self.counts.queued += 1;
                        "queue"
                    }
                };
                let (action, limit) = out.log_decision();
                let name = limit.map(|l| self.engine.limit_name(usize::from(l)));
                self.agreement
                    .add(e.logged_limit(), e.logged_action, (action, name));
                decided = out.limit.map(usize::from);
                dry = out.dry_run.map(|d| usize::from(d.0));
                if dry.is_some() {
                    self.counts.dry_run_limited += 1;
                }
                if let Some(ticket) = out.ticket {
                    // Replay has no waiting room: a queued request gives its place back.
                    self.engine.abandon(ticket, now);
                }
                // charge_on_status limits are charged with the logged status (none: nothing).
                let status = e.status.unwrap_or(0);
                match e.duration_ns {
                    Some(d) if !out.permits.is_empty() || !out.charges.is_empty() => {
                        self.seq += 1;
                        self.held.push(Held {
                            end: now + d,
                            seq: self.seq,
                            permits: out.permits,
                            charges: out.charges,
                            status,
                        })
                    }
                    _ => {
                        self.engine.charge_response(out.charges, status, now);
                        self.engine.release(out.permits, now);
                    }
                }
            }
        }
        // Per-limit effects of this request, from the engine's own counters.
        let mut key_for_verdict = false;
        for l in 0..self.snaps.len() {
            let s = self.engine.counters(l);
            let p = std::mem::replace(&mut self.snaps[l], s);
            let ok = (s.passed - p.passed) + (s.delayed - p.delayed);
            let limited = (s.rejected - p.rejected) + (s.queued - p.queued);
            let dry_limited =
                (s.dry_run_rejected - p.dry_run_rejected) + (s.dry_run_delayed - p.dry_run_delayed);
            if ok + limited + dry_limited == 0 {
                continue;
            }
            self.timeline
                .add(l, t, ok, limited, s.dry_run_rejected - p.dry_run_rejected);
            if limited + (s.dry_run_rejected - p.dry_run_rejected) > 0 {
                self.key_buf.clear();
                self.engine.render_key(l, e, &mut self.key_buf);
                let st = &mut self.limits[l];
                st.top_keys.add_with(&self.key_buf);
                st.top_clients.add_with(&client);
                st.clients.add(&client);
                key_for_verdict |= decided == Some(l);
            }
        }
        if let Some(w) = &mut self.verdicts {
            let b = &mut self.line_buf;
            b.clear();
            b.push_str("{\"file\":");
            json_str(b, self.file_names[e.file as usize].as_bytes());
            let _ = write!(b, ",\"line\":{},\"time\":\"", e.line);
            timefmt::format_rfc3339(t, b);
            let _ = write!(b, "\",\"client\":\"{client}\",\"method\":");
            json_str(b, e.method_str());
            b.push_str(",\"target\":");
            json_str(b, e.target_str());
            let _ = write!(b, ",\"verdict\":\"{verdict}\",\"limit\":");
            match decided {
                Some(l) => json_str(b, self.engine.limit_name(l).as_bytes()),
                None => b.push_str("null"),
            }
            if key_for_verdict {
                b.push_str(",\"key\":");
                json_str(b, self.key_buf.as_bytes());
            }
            b.push_str(",\"dry_run\":");
            match dry {
                Some(l) => json_str(b, self.engine.limit_name(l).as_bytes()),
                None => b.push_str("null"),
            }
            b.push_str("}\n");
            w.write_all(b.as_bytes())?;
        }
        Ok(())
    }
}

/// Appends `b` as a JSON string (invalid UTF-8 replaced).
pub fn json_str(out: &mut String, b: &[u8]) {
    out.push('"');
    for c in String::from_utf8_lossy(b).chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Runs a replay; progress and malformed lines go to stderr.
pub fn run(opts: &Options) -> Result<(Report, Timeline), String> {
    let policy = weir::policy::load_policy(&opts.policy).map_err(|e| e.to_string())?;
    let format = LogFormat::from_spec(&opts.format)?;
    let format = match format {
        LogFormat::Caddy(mut c) => {
            c.use_client_ip = opts.caddy_client_ip;
            LogFormat::Caddy(c)
        }
        f => f,
    };
    let engine = Engine::new(policy).map_err(|e| format!("{}: {e}", opts.policy.display()))?;
    let warnings = unlogged::warnings(engine.policy(), &format, &opts.format);
    for w in &warnings {
        eprintln!("{}: warning: {w}", opts.policy.display());
    }
    let nlimits = engine.policy().limits.len();
    let nexempt = engine.policy().exemptions.len();
    let verdicts = match &opts.verdicts {
        Some(p) => Some(io::BufWriter::with_capacity(
            1 << 16,
            std::fs::File::create(p).map_err(|e| format!("{}: {e}", p.display()))?,
        )),
        None => None,
    };
    let mut sim = Sim {
        engine,
        origin: None,
        last_t: 0,
        first_t: None,
        held: BinaryHeap::new(),
        seq: 0,
        snaps: vec![LimitCounts::default(); nlimits],
        limits: (0..nlimits)
            .map(|_| LimitStats {
                top_keys: SpaceSaving::new(TOP_CAPACITY),
                top_clients: SpaceSaving::new(TOP_CAPACITY),
                clients: Distinct::new(DISTINCT_EXACT / 8),
            })
            .collect(),
        exempt_by: vec![0; nexempt],
        clients: Distinct::new(DISTINCT_EXACT),
        counts: Counts::default(),
        timeline: Timeline::new(nlimits),
        verdicts,
        line_buf: String::new(),
        key_buf: String::new(),
        agreement: Agreement::default(),
        file_names: opts.inputs.clone(),
        bad_shown: 0,
        show: opts.show_malformed,
    };
    let mut ro = Reorder::new(
        opts.window_s as i64 * NS,
        opts.spread,
        opts.max_buffered.max(1),
        opts.max_buffered_bytes,
    );

    let read = Arc::new(AtomicU64::new(0));
    let total: u64 = opts
        .inputs
        .iter()
        .filter(|p| *p != "-")
        .filter_map(|p| std::fs::metadata(p).ok().map(|m| m.len()))
        .sum();
    let bar = (opts.progress && io::stderr().is_terminal() && (total > 32 << 20 || total == 0))
        .then(|| {
            let b = indicatif::ProgressBar::with_draw_target(
                (total > 0).then_some(total),
                indicatif::ProgressDrawTarget::stderr(),
            );
            b.set_style(
                indicatif::ProgressStyle::with_template(
                    "{spinner} [{elapsed_precise}] {bar:40} {binary_bytes}/{binary_total_bytes} {msg}",
                )
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            b
        });

    let mut pool = Pool::default();
    let mut cur = Entry::default();
    let mut arrival = 0u64;
    let mut shown = 0usize;
    let io_err = |e: io::Error| format!("{e}");
    for (fi, path) in opts.inputs.iter().enumerate() {
        let (r, _) = input::open(path, read.clone()).map_err(|e| format!("{path}: {e}"))?;
        let mut lr = LineReader::new(r, opts.max_line);
        let mut line_no = 0u64;
        while let Some(line) = lr.next_line().map_err(|e| format!("{path}: {e}"))? {
            line_no += 1;
            // Err: why the line is malformed, and its beginning.
            let parsed: Result<(), (Cow<str>, &[u8])> = match line {
                Line::Text([]) => continue,
                Line::Text(l) => format.parse(l, &mut cur).map_err(|why| (why.into(), l)),
                Line::TooLong { head, len } => Err((
                    format!("{len} bytes, over --max-line-bytes {}", opts.max_line).into(),
                    head,
                )),
            };
            sim.counts.lines += 1;
            if let Err((why, l)) = parsed {
                sim.counts.malformed += 1;
                if shown < opts.show_malformed {
                    shown += 1;
                    let l = String::from_utf8_lossy(&l[..l.len().min(160)]);
                    let (why, l) = (escape::line(&why), escape::line(&l));
                    eprintln!("{path}:{line_no}: malformed ({why}): {l}");
                }
                continue;
            }
            cur.file = fi as u32;
            cur.line = line_no;
            arrival += 1;
            cur.seq = arrival;
            let e = std::mem::replace(&mut cur, pool.get());
            if let Some(late) = ro.push(e) {
                let t = sim.last_t;
                sim.eval(&late, t).map_err(io_err)?;
                pool.put(late);
            }
            while let Some((e, t)) = ro.pop(false) {
                sim.eval(&e, t).map_err(io_err)?;
                pool.put(e);
            }
            if let Some(b) = &bar {
                if line_no % 65_536 == 0 {
                    b.set_position(read.load(Relaxed));
                    b.set_message(format!("{} lines", sim.counts.lines));
                }
            }
        }
    }
    while let Some((e, t)) = ro.pop(true) {
        sim.eval(&e, t).map_err(io_err)?;
        pool.put(e);
    }
    (sim.counts.reordered, sim.counts.late) = (ro.reordered, ro.late);
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    if let Some(mut w) = sim.verdicts.take() {
        w.flush().map_err(io_err)?;
    }
    if sim.counts.malformed > shown as u64 {
        eprintln!(
            "… {} malformed lines in all (first {shown} shown)",
            sim.counts.malformed
        );
    }
    if sim.counts.late > 0 {
        eprintln!(
            "{} lines were more than {} s out of order and were replayed at the last replayed time \
             (raise --reorder-window)",
            sim.counts.late, opts.window_s
        );
    }
    Ok(build_report(&sim, opts.top, warnings))
}

fn build_report(sim: &Sim, top: usize, warnings: Vec<String>) -> (Report, Timeline) {
    let p = sim.engine.policy();
    let c = &sim.counts;
    let (distinct, exact) = sim.clients.count();
    let limits = p
        .limits
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let k = sim.engine.counters(i);
            let st = &sim.limits[i];
            LimitReport {
                name: l.name.clone(),
                zone: p.zones[l.zone].name.clone(),
                key: describe_key(l),
                dry_run: l.dry_run,
                counts: k,
                distinct_rejected_clients: st.clients.count().0,
                top_exact: st.top_keys.exact() && st.top_clients.exact(),
                top_keys: st
                    .top_keys
                    .top(top)
                    .into_iter()
                    .map(|(key, n, error)| KeyCount {
                        key,
                        rejected: n,
                        error,
                    })
                    .collect(),
                top_clients: st
                    .top_clients
                    .top(top)
                    .into_iter()
                    .map(|(ip, n, error)| KeyCount {
                        key: ip.to_string(),
                        rejected: n,
                        error,
                    })
                    .collect(),
            }
        })
        .collect();
    let report = Report {
        schema: 1,
        lines: c.lines,
        requests: c.requests,
        malformed: c.malformed,
        bad_target: c.bad_target,
        reordered: c.reordered,
        late: c.late,
        passed: c.passed,
        delayed: c.delayed,
        rejected: c.rejected,
        queued: c.queued,
        exempt: c.exempt,
        unmatched: c.unmatched,
        dry_run_limited: c.dry_run_limited,
        distinct_clients: distinct,
        distinct_clients_exact: exact,
        first_time: sim.first_t.map(timefmt::rfc3339),
        last_time: sim.first_t.map(|_| timefmt::rfc3339(sim.last_t)),
        exemptions: p
            .exemptions
            .iter()
            .zip(&sim.exempt_by)
            .map(|(e, n)| ExemptionReport {
                name: e.name.clone(),
                requests: *n,
            })
            .collect(),
        limits,
        warnings,
        agreement: sim.agreement.report(),
    };
    (report, sim.timeline.clone())
}

/// `ip/24`, `global`, `ip+path`, `header:x-api-key`, …
pub fn describe_key(l: &Limit) -> String {
    l.key
        .parts
        .iter()
        .map(|p| match p {
            KeyPart::Ip {
                v4_prefix,
                v6_prefix,
            } => {
                if (*v4_prefix, *v6_prefix) == (32, 64) {
                    "ip".to_string()
                } else {
                    format!("ip(/{v4_prefix},/{v6_prefix})")
                }
            }
            KeyPart::Global => "global".into(),
            KeyPart::Path => "path".into(),
            KeyPart::Method => "method".into(),
            KeyPart::Header(n) => format!("header:{}", String::from_utf8_lossy(n)),
            KeyPart::Cookie(n) => format!("cookie:{}", String::from_utf8_lossy(n)),
            KeyPart::Var { name, .. } => format!("var:{}", String::from_utf8_lossy(name)),
        })
        .collect::<Vec<_>>()
        .join("+")
}
