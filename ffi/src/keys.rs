//! Key operations on the JSON status endpoint (`weir::policy::keyops`): inspect one key of a
//! limit, reset it, lift its ban. The engine parses the query, applies the method rules,
//! renders the JSON answer and the audit line; the host passes the request's method and raw
//! query and writes back what comes out.

use std::ffi::c_int;
use std::ptr;

use weir::policy::config::LogLevel;
use weir::policy::keyops;

use crate::metrics::engine_list;
use crate::outcome::{weir_log_line, WEIR_LOG_LINE_MAX};
use crate::{bytes, guard, weir_engine, WEIR_ERR_INVALID, WEIR_ERR_NULL, WEIR_OK};

/// The smallest `cap` weir_key_request accepts: every answer fits.
pub const WEIR_KEY_ANSWER_MAX: usize = 16384;
const _: () = assert!(WEIR_KEY_ANSWER_MAX == keyops::MAX_ANSWER);

/// Whether the raw query `query[0..query_len]` (without `?`) has a `key` argument, i.e. the
/// status request is a key operation for weir_key_request: 1 or 0 (0 for NULL with a length).
#[no_mangle]
pub unsafe extern "C" fn weir_key_query(query: *const u8, query_len: usize) -> c_int {
    let q = match bytes(query, query_len) {
        Ok(q) => q,
        Err(_) => return 0,
    };
    std::panic::catch_unwind(|| c_int::from(keyops::has_key(q))).unwrap_or(0)
}

/// Answers a key operation on the JSON status endpoint (docs/METRICS.md, "Key operations"):
/// `GET`/`HEAD ?limit=NAME&key=TEXT` inspects the key's state, `POST ...&action=reset` forgets
/// it, `POST ...&action=unban` lifts its ban. `engines[0..n]` (NULL entries skipped): the
/// first one with a limit named NAME is acted on. `method` as sent, `query` raw (without
/// `?`), `now` CLOCK_MONOTONIC ns.
///
/// Writes the JSON answer (`application/json`) into `buf` (`*written` bytes, no NUL) and its
/// HTTP status into `*status` (200, 400, 404 or 405; errors are `{"error": "..."}` too). When a
/// change was carried out, `*audit` is the line to log at its level (the limit's `log_level`:
/// 0 info .. 3 error); otherwise `audit->len` is 0. `cap` must be at least
/// WEIR_KEY_ANSWER_MAX, or WEIR_ERR_INVALID is returned before anything is done (a change is
/// never carried out without its answer). Returns WEIR_OK whenever an answer was written.
#[no_mangle]
pub unsafe extern "C" fn weir_key_request(
    engines: *const *const weir_engine,
    n: usize,
    method: *const u8,
    method_len: usize,
    query: *const u8,
    query_len: usize,
    now: u64,
    buf: *mut u8,
    cap: usize,
    written: *mut usize,
    status: *mut u16,
    audit: *mut weir_log_line,
) -> c_int {
    guard(|| {
        if written.is_null()
            || status.is_null()
            || audit.is_null()
            || buf.is_null()
            || (engines.is_null() && n > 0)
        {
            return WEIR_ERR_NULL;
        }
        if cap < WEIR_KEY_ANSWER_MAX || n > 1024 {
            return WEIR_ERR_INVALID;
        }
        let (method, query) = match (bytes(method, method_len), bytes(query, query_len)) {
            (Ok(m), Ok(q)) => (m, q),
            (Err(e), _) | (_, Err(e)) => return e,
        };
        // SAFETY: the caller passes n readable entries (checked non-NULL above), each NULL or
        // a live engine handle.
        let list = engine_list(engines, n);
        let answer = keyops::key_request(&list, method, query, now);
        let body = answer.body.as_bytes();
        let len = body.len().min(cap);
        // SAFETY: buf holds cap bytes (not NULL, checked above).
        ptr::copy_nonoverlapping(body.as_ptr(), buf, len);
        *written = len;
        *status = answer.status;
        // SAFETY: audit points at a writable weir_log_line (checked non-NULL above).
        let line = &mut *audit;
        line.len = 0;
        line.level = 3;
        if let Some(a) = answer.audit {
            let text = a.line.as_bytes();
            let mut n = text.len().min(WEIR_LOG_LINE_MAX);
            while n < text.len() && n > 0 && (text[n] & 0xc0) == 0x80 {
                n -= 1;
            }
            line.text[..n].copy_from_slice(&text[..n]);
            line.len = n;
            line.level = match a.level {
                LogLevel::Info => 0,
                LogLevel::Notice => 1,
                LogLevel::Warn => 2,
                LogLevel::Error => 3,
            };
        }
        WEIR_OK
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::WEIR_ERR_NULL;
    use weir::policy::{parse_policy, Engine, OwnedRequest};

    fn engine() -> weir_engine {
        let src = "[zones.z]\nsize = \"64k\"\nalgorithm = \"gcra\"\nrate = \"1r/m\"\n\
                   [[limit]]\nname = \"api\"\nclass = \"*\"\nzone = \"z\"\nlog_level = \"notice\"\n";
        weir_engine {
            engine: Engine::new(parse_policy(src, None).unwrap()).unwrap(),
        }
    }

    /// Calls weir_key_request on `engines`: its code, status, body and audit line.
    fn call(
        engines: &[*const weir_engine],
        method: &str,
        query: &str,
    ) -> (c_int, u16, String, Option<(c_int, String)>) {
        let mut buf = vec![0u8; WEIR_KEY_ANSWER_MAX];
        let (mut written, mut status) = (0usize, 0u16);
        let mut audit = weir_log_line {
            level: 0,
            len: 99,
            text: [0; WEIR_LOG_LINE_MAX],
        };
        // SAFETY: every pointer is valid for the call.
        let rc = unsafe {
            weir_key_request(
                engines.as_ptr(),
                engines.len(),
                method.as_ptr(),
                method.len(),
                query.as_ptr(),
                query.len(),
                2_000_000_000_000,
                buf.as_mut_ptr(),
                buf.len(),
                &mut written,
                &mut status,
                &mut audit,
            )
        };
        let line = (audit.len > 0).then(|| {
            (
                audit.level,
                String::from_utf8_lossy(&audit.text[..audit.len]).into_owned(),
            )
        });
        (
            rc,
            status,
            String::from_utf8_lossy(&buf[..written]).into_owned(),
            line,
        )
    }

    #[test]
    fn inspect_reset_and_the_audit_line() {
        let e = engine();
        let req = OwnedRequest::new("GET", "/", "192.0.2.1".parse().unwrap());
        for _ in 0..2 {
            e.engine.evaluate(&req, 2_000_000_000_000).unwrap();
        }
        let engines = [std::ptr::null(), &e as *const weir_engine];
        let (rc, status, body, line) = call(&engines, "GET", "limit=api&key=192.0.2.1");
        assert_eq!((rc, status, line), (WEIR_OK, 200, None));
        assert!(
            body.contains("\"remaining\":0") && body.contains("\"retry_after_s\":60"),
            "{body}"
        );
        let (rc, status, body, line) =
            call(&engines, "POST", "limit=api&key=192.0.2.1&action=reset");
        assert_eq!((rc, status), (WEIR_OK, 200), "{body}");
        assert!(
            body.contains("\"changed\":true") && body.contains("\"remaining\":1"),
            "{body}"
        );
        assert_eq!(
            line,
            Some((
                1,
                "resetting key \"192.0.2.1\" of weir limit \"api\"".to_owned()
            ))
        );
        let (_, status, body, _) = call(&engines, "GET", "limit=nope&key=x");
        assert_eq!(status, 404, "{body}");
        assert!(body.starts_with("{\"error\":"), "{body}");
        // 1 for a key operation, 0 for the status itself (and for NULL).
        // SAFETY: valid (pointer, length) pairs, or NULL.
        unsafe {
            assert_eq!(weir_key_query(b"limit=a&key=b".as_ptr(), 13), 1);
            assert_eq!(weir_key_query(b"format=json".as_ptr(), 11), 0);
            assert_eq!(weir_key_query(std::ptr::null(), 3), 0);
        }
    }

    #[test]
    fn bad_pointers_and_small_buffers_do_nothing() {
        let e = engine();
        let engines = [&e as *const weir_engine];
        let q = "limit=api&key=192.0.2.1&action=reset";
        let (mut written, mut status) = (0usize, 0u16);
        let mut audit = weir_log_line {
            level: 0,
            len: 0,
            text: [0; WEIR_LOG_LINE_MAX],
        };
        let mut small = [0u8; 64];
        // SAFETY: every pointer is valid or NULL, as each case says.
        unsafe {
            let m = b"POST";
            let run =
                |buf: *mut u8, cap: usize, w: *mut usize, s: *mut u16, a: *mut weir_log_line| {
                    weir_key_request(
                        engines.as_ptr(),
                        1,
                        m.as_ptr(),
                        4,
                        q.as_ptr(),
                        q.len(),
                        0,
                        buf,
                        cap,
                        w,
                        s,
                        a,
                    )
                };
            assert_eq!(
                run(
                    small.as_mut_ptr(),
                    small.len(),
                    &mut written,
                    &mut status,
                    &mut audit
                ),
                WEIR_ERR_INVALID
            );
            assert_eq!(
                run(
                    std::ptr::null_mut(),
                    0,
                    &mut written,
                    &mut status,
                    &mut audit
                ),
                WEIR_ERR_NULL
            );
            let mut buf = vec![0u8; WEIR_KEY_ANSWER_MAX];
            assert_eq!(
                run(
                    buf.as_mut_ptr(),
                    buf.len(),
                    std::ptr::null_mut(),
                    &mut status,
                    &mut audit
                ),
                WEIR_ERR_NULL
            );
            assert_eq!(
                run(
                    buf.as_mut_ptr(),
                    buf.len(),
                    &mut written,
                    &mut status,
                    std::ptr::null_mut()
                ),
                WEIR_ERR_NULL
            );
            assert_eq!(
                weir_key_request(
                    std::ptr::null(),
                    1,
                    m.as_ptr(),
                    4,
                    q.as_ptr(),
                    q.len(),
                    0,
                    buf.as_mut_ptr(),
                    buf.len(),
                    &mut written,
                    &mut status,
                    &mut audit
                ),
                WEIR_ERR_NULL
            );
            assert_eq!(
                weir_key_request(
                    engines.as_ptr(),
                    1,
                    std::ptr::null(),
                    4,
                    q.as_ptr(),
                    q.len(),
                    0,
                    buf.as_mut_ptr(),
                    buf.len(),
                    &mut written,
                    &mut status,
                    &mut audit
                ),
                WEIR_ERR_NULL
            );
        }
        assert_eq!(audit.len, 0, "nothing was carried out");
    }
}
