//! What a host does with a verdict: the action it takes (a dry run's delay or rejection is
//! only logged), how long it waits, the lines it logs and at which level, in the words of the
//! host's style: policy mode, or nginx's `limit_req` / `limit_conn` (whose lines nginx users
//! parse, byte for byte). Written into the caller's struct: no allocation.

use std::ffi::c_int;
use std::io::Write;

use weir::policy::config::LogLevel;
use weir::policy::Engine;

use crate::access_log::{log_decision, PASS_DECISION};
use crate::weir_log_decision;
use crate::{guard, weir_engine, weir_verdict, WEIR_ERR_INVALID, WEIR_ERR_NULL, WEIR_OK};
use crate::{WEIR_DELAY, WEIR_PASS, WEIR_QUEUE, WEIR_REJECT};

/// `weir_engine_outcome` styles: policy mode ("by weir limit"), nginx `limit_req` ("by zone",
/// with the excess) and nginx `limit_conn`.
pub const WEIR_STYLE_POLICY: c_int = 0;
pub const WEIR_STYLE_REQ: c_int = 1;
pub const WEIR_STYLE_CONN: c_int = 2;

/// `weir_log_line.level` beyond 0 info, 1 notice, 2 warn, 3 error: the host's own level for
/// rejections, and for delays (nginx's `limit_req_log_level` and the level below it).
pub const WEIR_LOG_HOST_REJECT: c_int = -1;
pub const WEIR_LOG_HOST_DELAY: c_int = -2;

/// Bytes of one log line; a longer one is cut.
pub const WEIR_LOG_LINE_MAX: usize = 320;

/// One line to log.
#[repr(C)]
pub struct weir_log_line {
    /// 0 info, 1 notice, 2 warn, 3 error, or WEIR_LOG_HOST_*.
    pub level: c_int,
    pub len: usize,
    pub text: [u8; WEIR_LOG_LINE_MAX],
}

/// What to do with a verdict.
#[repr(C)]
pub struct weir_outcome {
    /// WEIR_PASS (a dry run's delay or rejection included), WEIR_DELAY, WEIR_REJECT or
    /// WEIR_QUEUE.
    pub action: i32,
    /// WEIR_REJECT: the response status (policy mode: 503 when the verdict has none).
    pub status: u16,
    /// WEIR_DELAY: how long to hold the request; WEIR_QUEUE: how long to wait before asking
    /// again (`weir_engine_evaluate_queued`, which answers WEIR_REJECT once the limit's
    /// `timeout` has passed). Milliseconds, rounded up.
    pub wait_ms: u64,
    /// nginx styles: the request's `$limit_req_status` / `$limit_conn_status` word
    /// ("PASSED", "DELAYED_DRY_RUN", ...), static, not NUL-terminated; empty in policy mode.
    pub state: *const u8,
    pub state_len: usize,
    /// What access logs show of the verdict (as `weir_engine_log_decision` in this style).
    pub log: weir_log_decision,
    /// Lines to log, in order; a WEIR_QUEUE's own line is the last.
    pub lines: usize,
    pub line: [weir_log_line; 3],
}

/// The deciding limit's name (policy mode) or zone's (nginx styles); "" for none.
pub(crate) fn limit_word(e: &Engine, limit: i32, style: c_int) -> &str {
    let policy = e.policy();
    let Some(l) = usize::try_from(limit)
        .ok()
        .and_then(|i| policy.limits.get(i))
    else {
        return "";
    };
    if style == WEIR_STYLE_POLICY {
        return &l.name;
    }
    policy.zones.get(l.zone).map_or("", |z| z.name.as_str())
}

/// The deciding policy limit's level (its `log_level`); a delay's one level lower, as
/// `limit_req` logs them.
fn policy_level(e: &Engine, limit: i32, delay: bool) -> c_int {
    let lvl = usize::try_from(limit)
        .ok()
        .and_then(|i| e.policy().limits.get(i))
        .map_or(3, |l| match l.log_level {
            LogLevel::Info => 0,
            LogLevel::Notice => 1,
            LogLevel::Warn => 2,
            LogLevel::Error => 3,
        });
    if delay && lvl > 0 {
        lvl - 1
    } else {
        lvl
    }
}

impl weir_outcome {
    fn log(&mut self, level: c_int, args: std::fmt::Arguments) {
        let Some(line) = self.line.get_mut(self.lines) else {
            return;
        };
        let mut w = &mut line.text[..];
        // A line longer than the buffer is cut: write! stops at the end.
        let _ = w.write_fmt(args);
        line.len = WEIR_LOG_LINE_MAX - w.len();
        line.level = level;
        self.lines += 1;
    }

    /// A line of `pieces` (cut at the buffer's end) without `core::fmt`, whose machinery cost
    /// a refused request more than the engine's whole decision (a flood's hot path).
    fn log_pieces(&mut self, level: c_int, pieces: &[&str]) {
        let Some(line) = self.line.get_mut(self.lines) else {
            return;
        };
        let mut len = 0;
        for p in pieces {
            let n = p.len().min(WEIR_LOG_LINE_MAX - len);
            line.text[len..len + n].copy_from_slice(&p.as_bytes()[..n]);
            len += n;
        }
        line.len = len;
        line.level = level;
        self.lines += 1;
    }

    fn state(&mut self, word: &'static str) {
        self.state = word.as_ptr();
        self.state_len = word.len();
    }
}

/// `milli` thousandths as nginx logs an excess ("1.500"), written into `buf`.
fn excess(buf: &mut [u8; 24], milli: u64) -> &str {
    let mut ints = itoa::Buffer::new();
    let int = ints.format(milli / 1000).as_bytes();
    let r = milli % 1000;
    let digit = |d: u64| b'0' + d as u8; // d < 10
    let frac = [b'.', digit(r / 100), digit(r / 10 % 10), digit(r % 10)];
    buf[..int.len()].copy_from_slice(int);
    buf[int.len()..int.len() + 4].copy_from_slice(&frac);
    std::str::from_utf8(&buf[..int.len() + 4]).unwrap_or("")
}

fn policy_outcome(e: &Engine, v: &weir_verdict, o: &mut weir_outcome) {
    let known = |i: i32| usize::try_from(i).is_ok_and(|i| i < e.policy().limits.len());
    if known(v.dry_run_limit) {
        let (level, what) = if v.dry_run_action == WEIR_REJECT {
            (3, "limiting requests")
        } else {
            (2, "delaying request")
        };
        let name = limit_word(e, v.dry_run_limit, WEIR_STYLE_POLICY);
        o.log(
            level,
            format_args!("{what}, dry run, by weir limit \"{name}\""),
        );
    }
    let name = limit_word(e, v.limit, WEIR_STYLE_POLICY);
    match v.action {
        WEIR_PASS => o.action = WEIR_PASS,
        WEIR_DELAY => {
            o.action = WEIR_DELAY;
            let ms = v.wait_ns / 1_000_000;
            o.log(
                policy_level(e, v.limit, true),
                format_args!("delaying request, {ms}ms, by weir limit \"{name}\""),
            );
        }
        WEIR_QUEUE => {
            o.action = WEIR_QUEUE;
            o.log(2, format_args!("queueing request by weir limit \"{name}\""));
        }
        _ => {
            o.action = WEIR_REJECT;
            o.status = if v.status == 0 { 503 } else { v.status };
            let why = if v.queue_timeout != 0 {
                ", queue timeout,"
            } else {
                ""
            };
            let why = if v.banned != 0 { ", banned key," } else { why };
            let level = policy_level(e, v.limit, false);
            o.log_pieces(
                level,
                &["limiting requests", why, " by weir limit \"", name, "\""],
            );
            if v.ban_s > 0 {
                let listed = usize::try_from(v.ban_entry)
                    .ok()
                    .and_then(|entry| e.listed_ban(entry, 0))
                    .filter(|(l, _)| i32::try_from(*l) == Ok(v.limit));
                let key = listed.map_or_else(|| "?".to_owned(), |(_, b)| b.key);
                o.log(
                    level,
                    format_args!(
                        "banning key \"{}\" for {}s by weir limit \"{name}\"",
                        key.escape_debug(),
                        v.ban_s
                    ),
                );
            }
        }
    }
}

fn req_outcome(e: &Engine, v: &weir_verdict, o: &mut weir_outcome) {
    // a dry-run location reports what its limits would have done
    let (action, limit, excess, dry) = if v.dry_run_limit >= 0 {
        (
            v.dry_run_action,
            v.dry_run_limit,
            v.dry_run_excess_milli,
            ", dry run",
        )
    } else {
        (v.action, v.limit, v.excess_milli, "")
    };
    let zone = limit_word(e, limit, WEIR_STYLE_REQ);
    let mut buf = [0; 24];
    match action {
        WEIR_REJECT => {
            let excess = self::excess(&mut buf, excess);
            o.log_pieces(
                WEIR_LOG_HOST_REJECT,
                &[
                    "limiting requests",
                    dry,
                    ", excess: ",
                    excess,
                    " by zone \"",
                    zone,
                    "\"",
                ],
            );
            if dry.is_empty() {
                o.action = WEIR_REJECT;
                o.status = v.status;
                o.state("REJECTED");
            } else {
                o.state("REJECTED_DRY_RUN");
            }
        }
        WEIR_DELAY => {
            let excess = self::excess(&mut buf, excess);
            o.log_pieces(
                WEIR_LOG_HOST_DELAY,
                &[
                    "delaying request",
                    dry,
                    ", excess: ",
                    excess,
                    ", by zone \"",
                    zone,
                    "\"",
                ],
            );
            if dry.is_empty() {
                o.action = WEIR_DELAY;
                o.state("DELAYED");
            } else {
                o.state("DELAYED_DRY_RUN");
            }
        }
        _ => o.state("PASSED"),
    }
}

fn conn_outcome(e: &Engine, v: &weir_verdict, o: &mut weir_outcome) {
    if v.dry_run_limit >= 0 && v.dry_run_action == WEIR_REJECT {
        let zone = limit_word(e, v.dry_run_limit, WEIR_STYLE_CONN);
        o.log(
            WEIR_LOG_HOST_REJECT,
            format_args!("limiting connections, dry run, by zone \"{zone}\""),
        );
        o.state("REJECTED_DRY_RUN");
    } else if v.action == WEIR_REJECT {
        let zone = limit_word(e, v.limit, WEIR_STYLE_CONN);
        o.log(
            WEIR_LOG_HOST_REJECT,
            format_args!("limiting connections by zone \"{zone}\""),
        );
        o.action = WEIR_REJECT;
        o.status = v.status;
        o.state("REJECTED");
    } else {
        o.state("PASSED");
    }
}

/// The general rules of [`weir_engine_outcome`] (`style` a known one).
fn fill(e: &Engine, v: &weir_verdict, style: c_int, o: &mut weir_outcome) {
    o.action = WEIR_PASS;
    o.status = 0;
    o.wait_ms = v.wait_ns.div_ceil(1_000_000);
    o.state("");
    o.log = log_decision(e, v, style);
    o.lines = 0;
    match style {
        WEIR_STYLE_POLICY => policy_outcome(e, v, o),
        WEIR_STYLE_REQ => req_outcome(e, v, o),
        _ => conn_outcome(e, v, o),
    }
}

/// What a host does with verdict `v` of engine `e`, in `style` (WEIR_STYLE_*), into `*out`.
/// WEIR_ERR_NULL for a NULL argument, WEIR_ERR_INVALID for an unknown style.
#[no_mangle]
pub unsafe extern "C" fn weir_engine_outcome(
    e: *const weir_engine,
    v: *const weir_verdict,
    style: c_int,
    out: *mut weir_outcome,
) -> c_int {
    guard(|| {
        if e.is_null() || v.is_null() || out.is_null() {
            return WEIR_ERR_NULL;
        }
        let (e, v, o) = (&(*e).engine, &*v, &mut *out);
        if ![WEIR_STYLE_POLICY, WEIR_STYLE_REQ, WEIR_STYLE_CONN].contains(&style) {
            return WEIR_ERR_INVALID;
        }
        if v.action == WEIR_PASS && v.dry_run_limit < 0 && v.exempt < 0 {
            // The common pass (nothing to log, no limit to name) without the general rules'
            // work: what they give for it (a test compares).
            o.action = WEIR_PASS;
            o.status = 0;
            o.wait_ms = v.wait_ns.div_ceil(1_000_000);
            o.state(if style == WEIR_STYLE_POLICY {
                ""
            } else {
                "PASSED"
            });
            o.log = PASS_DECISION;
            o.lines = 0;
        } else {
            fill(e, v, style, o);
        }
        WEIR_OK
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::evaluate::empty_verdict;
    use weir::limiter::Rate;
    use weir::policy::config::Algorithm;
    use weir::policy::{HostLimit, HostLimits, HostZone};

    /// Limit 0 `web.0` on gcra zone "web" (warn); limit 1 `hold` on concurrency zone "conn"
    /// with a queue.
    pub(crate) fn engine() -> weir_engine {
        let mut b = HostLimits::new();
        let rate = Rate {
            count: 1,
            period_ns: 1_000_000_000,
        };
        b.zone(
            "web",
            HostZone {
                size: 1 << 20,
                algorithm: Algorithm::Gcra { rate },
            },
        );
        b.zone(
            "conn",
            HostZone {
                size: 1 << 20,
                algorithm: Algorithm::Concurrency { max: 1 },
            },
        );
        let warn = HostLimit {
            log_level: LogLevel::Warn,
            ..HostLimit::default()
        };
        b.limit("web", warn);
        let queued = HostLimit {
            name: Some("hold".into()),
            queue: 5,
            timeout: Some(std::time::Duration::from_millis(1500)),
            ..HostLimit::default()
        };
        b.limit("conn", queued);
        weir_engine {
            engine: Engine::new(b.build().unwrap()).unwrap(),
        }
    }

    fn outcome(e: &weir_engine, v: &weir_verdict, style: c_int) -> (weir_outcome, Vec<String>) {
        // SAFETY: an all-zero weir_outcome is valid (integers, a null pointer, byte arrays).
        let mut o: weir_outcome = unsafe { std::mem::zeroed() };
        assert_eq!(unsafe { weir_engine_outcome(e, v, style, &mut o) }, WEIR_OK);
        let lines = o.line[..o.lines]
            .iter()
            .map(|l| format!("{} {}", l.level, String::from_utf8_lossy(&l.text[..l.len])))
            .collect();
        (o, lines)
    }

    fn state(o: &weir_outcome) -> &str {
        // SAFETY: state points at a static word of state_len bytes.
        let b = unsafe { std::slice::from_raw_parts(o.state, o.state_len) };
        std::str::from_utf8(b).unwrap()
    }

    #[test]
    fn a_started_ban_is_logged_once_with_its_key() {
        let src = "[zones.z]\nsize = \"64k\"\nalgorithm = \"gcra\"\nrate = \"1r/m\"\n\
                   [[limit]]\nname = \"login\"\nclass = \"*\"\nzone = \"z\"\nlog_level = \"warn\"\n\
                   ban = { after = 1, within = \"1m\", duration = \"10m\" }\n";
        let e = weir_engine {
            engine: Engine::new(weir::policy::parse_policy(src, None).unwrap()).unwrap(),
        };
        let req = weir::policy::OwnedRequest::new("GET", "/", "192.0.2.1".parse().unwrap());
        let now = 1_000_000_000_000;
        e.engine.evaluate(&req, now).unwrap();
        let out = e.engine.evaluate(&req, now).unwrap();
        let started = out.ban_started.unwrap();
        let mut v = empty_verdict();
        v.action = WEIR_REJECT;
        v.status = 429;
        v.limit = 0;
        v.ban_s = 600;
        v.ban_entry = i32::from(started.entry.unwrap());
        let (_, lines) = outcome(&e, &v, WEIR_STYLE_POLICY);
        assert_eq!(
            lines,
            [
                "2 limiting requests by weir limit \"login\"",
                "2 banning key \"192.0.2.1\" for 600s by weir limit \"login\""
            ]
        );
        // The requests the ban refuses say so, and start nothing.
        assert!(e.engine.evaluate(&req, now).unwrap().banned);
        v.ban_s = 0;
        v.banned = 1;
        let (_, lines) = outcome(&e, &v, WEIR_STYLE_POLICY);
        assert_eq!(
            lines,
            ["2 limiting requests, banned key, by weir limit \"login\""]
        );
    }

    #[test]
    fn excess_is_written_as_nginx_logs_it() {
        let mut buf = [0; 24];
        for (milli, text) in [
            (0, "0.000"),
            (7, "0.007"),
            (90, "0.090"),
            (999, "0.999"),
            (1000, "1.000"),
            (2500, "2.500"),
            (u64::MAX, "18446744073709551.615"),
        ] {
            assert_eq!(excess(&mut buf, milli), text);
        }
    }

    #[test]
    fn limit_req_and_limit_conn_words() {
        let e = engine();
        let mut v = empty_verdict();
        v.action = WEIR_DELAY;
        v.limit = 0;
        v.wait_ns = 1_500_001;
        v.excess_milli = 2500;
        let (o, lines) = outcome(&e, &v, WEIR_STYLE_REQ);
        assert_eq!((o.action, o.wait_ms, state(&o)), (WEIR_DELAY, 2, "DELAYED"));
        assert_eq!(
            lines,
            ["-2 delaying request, excess: 2.500, by zone \"web\""]
        );

        v.dry_run_limit = 0;
        v.dry_run_action = WEIR_REJECT;
        v.dry_run_excess_milli = 1000;
        let (o, lines) = outcome(&e, &v, WEIR_STYLE_REQ);
        assert_eq!((o.action, state(&o)), (WEIR_PASS, "REJECTED_DRY_RUN"));
        assert_eq!(
            lines,
            ["-1 limiting requests, dry run, excess: 1.000 by zone \"web\""]
        );

        let (o, lines) = outcome(&e, &v, WEIR_STYLE_CONN);
        assert_eq!((o.action, state(&o)), (WEIR_PASS, "REJECTED_DRY_RUN"));
        assert_eq!(lines, ["-1 limiting connections, dry run, by zone \"web\""]);

        let mut v = empty_verdict();
        v.action = WEIR_REJECT;
        v.status = 503;
        v.limit = 1;
        let (o, lines) = outcome(&e, &v, WEIR_STYLE_CONN);
        assert_eq!(
            (o.action, o.status, state(&o)),
            (WEIR_REJECT, 503, "REJECTED")
        );
        assert_eq!(lines, ["-1 limiting connections by zone \"conn\""]);
        let (o, lines) = outcome(&e, &empty_verdict(), WEIR_STYLE_REQ);
        assert_eq!((o.action, state(&o), lines.len()), (WEIR_PASS, "PASSED", 0));
    }

    #[test]
    fn a_plain_pass_is_what_the_general_rules_give() {
        let e = engine();
        let text = |p: *const u8, n: usize| unsafe { std::slice::from_raw_parts(p, n) }.to_vec();
        for (limit, wait_ns) in [(-1, 0), (0, 0), (1, 0), (1, 2_500_000)] {
            let mut v = empty_verdict();
            v.limit = limit;
            v.wait_ns = wait_ns;
            for style in [WEIR_STYLE_POLICY, WEIR_STYLE_REQ, WEIR_STYLE_CONN] {
                let (fast, lines) = outcome(&e, &v, style);
                // SAFETY: as in `outcome`.
                let mut general: weir_outcome = unsafe { std::mem::zeroed() };
                fill(&e.engine, &v, style, &mut general);
                let seen = |o: &weir_outcome| {
                    let l = &o.log;
                    (
                        (o.action, o.status, o.wait_ms, o.lines),
                        text(o.state, o.state_len),
                        (
                            l.limit,
                            text(l.name, l.name_len),
                            text(l.action, l.action_len),
                        ),
                    )
                };
                assert_eq!(seen(&fast), seen(&general), "limit {limit}, style {style}");
                assert!(lines.is_empty());
            }
        }
    }

    #[test]
    fn policy_words_and_levels() {
        let e = engine();
        let mut v = empty_verdict();
        v.action = WEIR_DELAY;
        v.limit = 0;
        v.wait_ns = 1_999_999;
        v.dry_run_limit = 1;
        v.dry_run_action = WEIR_DELAY;
        let (o, lines) = outcome(&e, &v, WEIR_STYLE_POLICY);
        assert_eq!((o.action, o.wait_ms, state(&o)), (WEIR_DELAY, 2, ""));
        assert_eq!(
            lines,
            [
                "2 delaying request, dry run, by weir limit \"hold\"",
                "1 delaying request, 1ms, by weir limit \"web.0\""
            ]
        );

        v.action = WEIR_QUEUE;
        v.limit = 1;
        v.dry_run_limit = -1;
        v.wait_ns = 10_000_000;
        let (o, lines) = outcome(&e, &v, WEIR_STYLE_POLICY);
        assert_eq!((o.action, o.wait_ms), (WEIR_QUEUE, 10));
        assert_eq!(lines, ["2 queueing request by weir limit \"hold\""]);

        v.action = WEIR_REJECT;
        v.status = 503;
        v.queue_timeout = 1;
        let (o, lines) = outcome(&e, &v, WEIR_STYLE_POLICY);
        assert_eq!((o.action, o.status), (WEIR_REJECT, 503));
        assert_eq!(
            lines,
            ["3 limiting requests, queue timeout, by weir limit \"hold\""]
        );
        v.queue_timeout = 0;

        v.action = WEIR_REJECT;
        v.status = 0;
        v.limit = -1;
        let (o, lines) = outcome(&e, &v, WEIR_STYLE_POLICY);
        assert_eq!((o.action, o.status), (WEIR_REJECT, 503));
        assert_eq!(lines, ["3 limiting requests by weir limit \"\""]);

        assert_eq!(
            unsafe { weir_engine_outcome(&e, &v, 9, std::ptr::null_mut()) },
            WEIR_ERR_NULL
        );
    }
}
