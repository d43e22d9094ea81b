//! What an access log shows of a verdict (`$weir_limit`, `$weir_key`, `$weir_action`): the
//! action in the engine's words, the deciding limit's name, and its key rendered on demand
//! (only when a log line asks: the request path renders nothing).

use std::ffi::c_int;

use weir::policy::engine::LogAction;
use weir::policy::{Action, Engine};

use crate::evaluate::request;
use crate::outcome::{limit_word, WEIR_STYLE_CONN, WEIR_STYLE_POLICY, WEIR_STYLE_REQ};
use crate::{guard, weir_engine, weir_request, weir_verdict, MAX_LEN};
use crate::{WEIR_DELAY, WEIR_ERR_INVALID, WEIR_ERR_NULL, WEIR_OK, WEIR_QUEUE, WEIR_REJECT};

/// A verdict as an access log names it.
#[repr(C)]
pub struct weir_log_decision {
    /// The deciding limit's index (for `weir_engine_render_key`), or -1 when none decided.
    pub limit: i32,
    /// Its name in the style's words (policy mode: the limit's; nginx styles: its zone's),
    /// "" for none; static for the engine's life, not NUL-terminated.
    pub name: *const u8,
    pub name_len: usize,
    /// "pass", "exempt", "delay", "queue", "reject", "dry-run-delay" or "dry-run-reject";
    /// static, not NUL-terminated.
    pub action: *const u8,
    pub action_len: usize,
}

/// What a pass shows (no exemption, no dry run): no limit, "pass".
pub(crate) const PASS_DECISION: weir_log_decision = weir_log_decision {
    limit: -1,
    name: "".as_ptr(),
    name_len: 0,
    action: "pass".as_ptr(),
    action_len: 4,
};

fn action(code: i32) -> Action {
    match code {
        WEIR_DELAY => Action::Delay,
        WEIR_REJECT => Action::Reject,
        WEIR_QUEUE => Action::Queue,
        _ => Action::Pass,
    }
}

fn index(i: i32) -> Option<u16> {
    u16::try_from(i).ok()
}

/// The decision verdict `v` of engine `e` shows in an access log, with names in `style`
/// (WEIR_STYLE_*), into `*out`: the enforced limit that delayed, queued or refused the
/// request, else a dry-run limit that would have, else none. WEIR_ERR_NULL for a NULL argument,
/// WEIR_ERR_INVALID for an unknown style.
#[no_mangle]
pub unsafe extern "C" fn weir_engine_log_decision(
    e: *const weir_engine,
    v: *const weir_verdict,
    style: c_int,
    out: *mut weir_log_decision,
) -> c_int {
    guard(|| {
        if e.is_null() || v.is_null() || out.is_null() {
            return WEIR_ERR_NULL;
        }
        if ![WEIR_STYLE_POLICY, WEIR_STYLE_REQ, WEIR_STYLE_CONN].contains(&style) {
            return WEIR_ERR_INVALID;
        }
        *out = log_decision(&(*e).engine, &*v, style);
        WEIR_OK
    })
}

/// What `v` shows in an access log, in `style` (a known one).
pub(crate) fn log_decision(e: &Engine, v: &weir_verdict, style: c_int) -> weir_log_decision {
    let dry = index(v.dry_run_limit).map(|l| (l, action(v.dry_run_action)));
    let (act, limit) = LogAction::decide(action(v.action), index(v.limit), v.exempt >= 0, dry);
    let limit = limit.map_or(-1, i32::from);
    let name = limit_word(e, limit, style);
    let word = act.as_str();
    weir_log_decision {
        limit,
        name: name.as_ptr(),
        name_len: name.len(),
        action: word.as_ptr(),
        action_len: word.len(),
    }
}

/// Writes limit `limit`'s key for request `r` as logs show it (`203.0.113.0/24`,
/// `ip=192.0.2.7 path=/api`; docs/METRICS.md, "Key text") into `buf` (at most `cap` and 512
/// bytes, printable ASCII, not NUL-terminated; a longer key is cut, marked `(cut)`, and keeps
/// its reference) and its length into `*len`. `r` is the request as it was evaluated (the
/// same views and callbacks). Nothing is written for a limit index that names none.
/// Allocates: call it for a log line, not on the request path.
#[no_mangle]
pub unsafe extern "C" fn weir_engine_render_key(
    e: *const weir_engine,
    limit: i32,
    r: *const weir_request,
    buf: *mut u8,
    cap: usize,
    len: *mut usize,
) -> c_int {
    guard(|| {
        if e.is_null() || len.is_null() || (buf.is_null() && cap > 0) {
            return WEIR_ERR_NULL;
        }
        *len = 0;
        let req = match request(r) {
            Ok(r) => r,
            Err(code) => return code,
        };
        let Ok(limit) = usize::try_from(limit) else {
            return WEIR_OK;
        };
        let mut text = String::new();
        let max = cap.min(weir::policy::key_text::TEXT_MAX);
        (*e).engine.render_key_within(limit, &req, &mut text, max);
        let n = cut(&text, cap.min(MAX_LEN));
        if n > 0 {
            std::slice::from_raw_parts_mut(buf, n).copy_from_slice(&text.as_bytes()[..n]);
        }
        *len = n;
        WEIR_OK
    })
}

/// The longest prefix of `s` at most `cap` bytes that ends on a character boundary.
fn cut(s: &str, cap: usize) -> usize {
    if s.len() <= cap {
        return s.len();
    }
    (0..=cap)
        .rev()
        .find(|&i| s.is_char_boundary(i))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evaluate::empty_verdict;
    use weir::policy::{parse_policy, Engine};

    #[test]
    fn log_decision_refuses_unknown_styles() {
        let src = "[zones.z]\nsize = \"64k\"\nalgorithm = \"gcra\"\nrate = \"1r/s\"\n\
                   [[limit]]\nname = \"all\"\nclass = \"*\"\nzone = \"z\"\n";
        let e = weir_engine {
            engine: Engine::new(parse_policy(src, None).unwrap()).unwrap(),
        };
        let mut v = empty_verdict();
        v.action = WEIR_REJECT;
        v.limit = 0;
        // SAFETY: an all-zero weir_log_decision is valid (integers and null pointers).
        let mut d: weir_log_decision = unsafe { std::mem::zeroed() };
        for style in [WEIR_STYLE_POLICY, WEIR_STYLE_REQ, WEIR_STYLE_CONN] {
            // SAFETY: every pointer is valid for the call.
            assert_eq!(
                unsafe { weir_engine_log_decision(&e, &v, style, &mut d) },
                WEIR_OK
            );
            assert_eq!(d.limit, 0);
        }
        d.limit = 7;
        for style in [-1, 3, 42, c_int::MIN, c_int::MAX] {
            // SAFETY: as above.
            let rc = unsafe { weir_engine_log_decision(&e, &v, style, &mut d) };
            assert_eq!(rc, WEIR_ERR_INVALID, "style {style}");
            assert_eq!(d.limit, 7, "nothing written for style {style}");
        }
    }

    /// `weir_engine_outcome` carries the same decision `weir_engine_log_decision` gives,
    /// whatever the verdict and style (hosts read it there instead of asking again).
    #[test]
    fn the_outcome_carries_the_log_decision() {
        use crate::{weir_engine_outcome, weir_outcome, WEIR_DELAY, WEIR_PASS};
        let src = "[zones.z]\nsize = \"64k\"\nalgorithm = \"gcra\"\nrate = \"1r/s\"\n\
                   [[limit]]\nname = \"all\"\nclass = \"*\"\nzone = \"z\"\n\
                   [[limit]]\nname = \"dry\"\nclass = \"*\"\nzone = \"z\"\ndry_run = true\n";
        let e = weir_engine {
            engine: Engine::new(parse_policy(src, None).unwrap()).unwrap(),
        };
        let text = |p: *const u8, n: usize| {
            // SAFETY: the engine's words are static for its life.
            String::from_utf8_lossy(unsafe { std::slice::from_raw_parts(p, n) }).into_owned()
        };
        let mut seen = std::collections::HashSet::new();
        for (action, limit, dry, exempt) in [
            (WEIR_PASS, -1, -1, -1),
            (WEIR_PASS, -1, -1, 0),
            (WEIR_REJECT, 0, -1, -1),
            (WEIR_DELAY, 0, -1, -1),
            (WEIR_PASS, -1, 1, -1),
        ] {
            let mut v = empty_verdict();
            (v.action, v.limit, v.exempt) = (action, limit, exempt);
            (v.dry_run_limit, v.dry_run_action) = (dry, WEIR_REJECT);
            for style in [WEIR_STYLE_POLICY, WEIR_STYLE_REQ, WEIR_STYLE_CONN] {
                // SAFETY: all-zero structs of integers and null pointers are valid; every
                // pointer is valid for the calls.
                let (mut d, mut o): (weir_log_decision, weir_outcome) =
                    unsafe { (std::mem::zeroed(), std::mem::zeroed()) };
                unsafe {
                    assert_eq!(weir_engine_log_decision(&e, &v, style, &mut d), WEIR_OK);
                    assert_eq!(weir_engine_outcome(&e, &v, style, &mut o), WEIR_OK);
                }
                let words = (text(d.name, d.name_len), text(d.action, d.action_len));
                assert_eq!(o.log.limit, d.limit);
                assert_eq!(words.0, text(o.log.name, o.log.name_len));
                assert_eq!(words.1, text(o.log.action, o.log.action_len));
                seen.insert(words.1);
            }
        }
        assert!(
            seen.len() >= 4,
            "the verdicts show different decisions: {seen:?}"
        );
    }
}
