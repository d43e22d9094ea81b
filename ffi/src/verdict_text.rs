//! A verdict as one line of text, for hosts' test hooks.

use std::io::Write;
use std::panic::{catch_unwind, AssertUnwindSafe};

use weir::policy::Engine;

use crate::{limit_word, weir_engine, weir_verdict, WEIR_REJECT, WEIR_STYLE_POLICY};

/// Writes verdict `v` of engine `e` as "action=A limit=L wait_ns=N exempt=E status=S
/// dry_run=D" into `buf` (`cap` bytes, cut to fit, not NUL-terminated), for hosts' test
/// hooks; the number of bytes written (0 for a NULL argument).
#[no_mangle]
pub unsafe extern "C" fn weir_verdict_text(
    e: *const weir_engine,
    v: *const weir_verdict,
    buf: *mut u8,
    cap: usize,
) -> usize {
    if e.is_null() || v.is_null() || buf.is_null() {
        return 0;
    }
    catch_unwind(AssertUnwindSafe(|| {
        verdict_text(&(*e).engine, &*v, buf, cap)
    }))
    .unwrap_or(0)
}

unsafe fn verdict_text(e: &Engine, v: &weir_verdict, buf: *mut u8, cap: usize) -> usize {
    let out = std::slice::from_raw_parts_mut(buf, cap);
    let mut w = &mut out[..];
    let action = ["pass", "delay", "reject", "queue"]
        .get(usize::try_from(v.action).unwrap_or(usize::MAX))
        .unwrap_or(&"unknown");
    let limit = limit_word(e, v.limit, WEIR_STYLE_POLICY);
    let limit = if limit.is_empty() {
        "-"
    } else {
        let mut end = limit.len().min(200);
        while !limit.is_char_boundary(end) {
            end -= 1;
        }
        &limit[..end]
    };
    let dry = match (v.dry_run_limit, v.dry_run_action) {
        (l, _) if l < 0 => "-",
        (_, WEIR_REJECT) => "reject",
        _ => "delay",
    };
    let _ = write!(
        w,
        "action={action} limit={limit} wait_ns={} exempt={} status={} dry_run={dry}",
        v.wait_ns, v.exempt, v.status
    );
    cap - w.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evaluate::empty_verdict;
    use crate::outcome::tests::engine;

    #[test]
    fn verdict_text_for_test_hooks() {
        let e = engine();
        let mut v = empty_verdict();
        v.limit = 1;
        v.dry_run_limit = 0;
        v.dry_run_action = WEIR_REJECT;
        let mut buf = [0u8; 128];
        let n = unsafe { weir_verdict_text(&e, &v, buf.as_mut_ptr(), buf.len()) };
        assert_eq!(
            std::str::from_utf8(&buf[..n]).unwrap(),
            "action=pass limit=hold wait_ns=0 exempt=-1 status=200 dry_run=reject"
        );
        v.limit = -1;
        v.action = 7;
        let n = unsafe { weir_verdict_text(&e, &v, buf.as_mut_ptr(), 20) };
        assert_eq!(
            std::str::from_utf8(&buf[..n]).unwrap(),
            "action=unknown limit"
        );
    }
}
