//! Key operations on the JSON status endpoint (`weir::policy::keyops`): inspect one key of a
//! limit, reset it, lift its ban. The engine parses the query, applies the method rules,
//! renders the JSON answer and the audit line, and decides whether a change may go on; the
//! host passes the request's method, raw query and [`weir_key_access`] and writes back what
//! comes out.

use std::ffi::{c_int, c_void};
use std::ptr;

use weir::policy::config::LogLevel;
use weir::policy::keyops::{self, Access};

use crate::evaluate::weir_header_fn;
use crate::metrics::engine_list;
use crate::outcome::{weir_log_line, WEIR_LOG_LINE_MAX};
use crate::{bytes, guard, weir_engine, WEIR_ERR_INVALID, WEIR_ERR_NULL, WEIR_OK};

/// The smallest `cap` weir_key_request accepts: every answer fits.
pub const WEIR_KEY_ANSWER_MAX: usize = 16384;
const _: () = assert!(WEIR_KEY_ANSWER_MAX == keyops::MAX_ANSWER);

/// Where a key operation arrived: whether changes are enabled there, and its request's
/// headers, through the same lookup as `weir_request`'s (the engine reads the first value of
/// `origin`, `host`, `sec-fetch-site`, `content-type` and `weir-key-action`).
#[repr(C)]
pub struct weir_key_access {
    /// 1: changes (POST reset, unban) are enabled on this endpoint; 0: read-only.
    pub write: c_int,
    /// May be NULL: the request then has no headers.
    pub header: weir_header_fn,
    /// Passed to `header`.
    pub header_ctx: *mut c_void,
}

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
/// `?`), `access` where it arrived (NULL: read-only, no headers), `now` CLOCK_MONOTONIC ns.
/// A change is refused with 403 unless `access->write` is 1 and the request is not one a
/// browser may have been made to send from another site (docs/METRICS.md, "Key operations").
///
/// Writes the JSON answer (`application/json`) into `buf` (`*written` bytes, no NUL) and its
/// HTTP status into `*status` (200, 400, 403, 404 or 405; errors are `{"error": "..."}` too). When a
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
    access: *const weir_key_access,
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
        let access = match access.as_ref() {
            None => Access::default(),
            // SAFETY: the header callback's contract (weir.h): values valid for the call.
            Some(a) => Access::from_headers(a.write == 1, |name| header(a, name)),
        };
        // SAFETY: the caller passes n readable entries (checked non-NULL above), each NULL or
        // a live engine handle.
        let list = engine_list(engines, n);
        let answer = keyops::key_request(&list, method, query, &access, now);
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

/// The first value of header `name` (lowercase) through `a`'s lookup; `None` when absent or
/// when the lookup gives NULL with a length or a huge length.
unsafe fn header<'a>(a: &weir_key_access, name: &str) -> Option<&'a [u8]> {
    let f = a.header?;
    let (mut v, mut len) = (ptr::null::<u8>(), 0usize);
    if f(a.header_ctx, name.as_ptr(), name.len(), 0, &mut v, &mut len) != 1 {
        return None;
    }
    bytes(v, len).ok()
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

    /// Header lookup over a `Vec<(&str, &str)>` of (lowercase name, value); a value
    /// "NULL" answers a NULL pointer with length 5, "HUGE" a length over the ABI's limit.
    unsafe extern "C" fn lookup(
        ctx: *mut c_void,
        lname: *const u8,
        lname_len: usize,
        nth: usize,
        value: *mut *const u8,
        value_len: *mut usize,
    ) -> c_int {
        let headers = &*(ctx as *const Vec<(&str, &str)>);
        let name = std::slice::from_raw_parts(lname, lname_len);
        match headers
            .iter()
            .filter(|(n, _)| n.as_bytes() == name)
            .nth(nth)
        {
            None => 0,
            Some((_, v)) => {
                *value = if *v == "NULL" {
                    ptr::null()
                } else {
                    v.as_ptr()
                };
                *value_len = if *v == "HUGE" { usize::MAX } else { v.len() };
                1
            }
        }
    }

    /// A write-enabled access with `headers` (a Vec: `lookup` casts the context back to one).
    #[allow(clippy::ptr_arg)]
    fn writer(headers: &Vec<(&str, &str)>) -> weir_key_access {
        weir_key_access {
            write: 1,
            header: Some(lookup),
            header_ctx: headers as *const Vec<(&str, &str)> as *mut c_void,
        }
    }

    /// Calls weir_key_request on `engines`: its code, status, body and audit line.
    fn call(
        engines: &[*const weir_engine],
        method: &str,
        query: &str,
        access: *const weir_key_access,
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
                access,
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
        let (rc, status, body, line) =
            call(&engines, "GET", "limit=api&key=192.0.2.1", ptr::null());
        assert_eq!((rc, status, line), (WEIR_OK, 200, None));
        assert!(
            body.contains("\"remaining\":0") && body.contains("\"retry_after_s\":60"),
            "{body}"
        );
        let q = "limit=api&key=192.0.2.1&action=reset";
        // Read-only without an access (NULL), or with write 0; a write without the header, a
        // cross-site one, and header values NULL with a length or too long (read as absent).
        let named = vec![("weir-key-action", "reset")];
        let read_only = weir_key_access {
            write: 0,
            ..writer(&named)
        };
        let cross = vec![
            ("weir-key-action", "reset"),
            ("origin", "http://evil.example"),
            ("host", "h"),
        ];
        let (null, huge) = (
            vec![("weir-key-action", "NULL")],
            vec![("weir-key-action", "HUGE")],
        );
        let none = vec![];
        let accesses = [
            read_only,
            writer(&none),
            writer(&cross),
            writer(&null),
            writer(&huge),
        ];
        let pointers = accesses.iter().map(|a| a as *const weir_key_access);
        for access in std::iter::once(ptr::null()).chain(pointers) {
            let (rc, status, body, line) = call(&engines, "POST", q, access);
            assert_eq!((rc, status, line), (WEIR_OK, 403, None), "{body}");
        }
        let headers = vec![("weir-key-action", "reset"), ("host", "h")];
        let (rc, status, body, line) = call(&engines, "POST", q, &writer(&headers));
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
        let (_, status, body, _) = call(&engines, "GET", "limit=nope&key=x", ptr::null());
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
        let headers = vec![("weir-key-action", "reset")];
        let access = writer(&headers);
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
                        &access,
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
            // NULL engines with n > 0, a NULL method with a length.
            let null_engines: *const *const weir_engine = std::ptr::null();
            for (e, method) in [
                (null_engines, m.as_ptr()),
                (engines.as_ptr(), std::ptr::null()),
            ] {
                let rc = weir_key_request(
                    e,
                    1,
                    method,
                    4,
                    q.as_ptr(),
                    q.len(),
                    &access,
                    0,
                    buf.as_mut_ptr(),
                    buf.len(),
                    &mut written,
                    &mut status,
                    &mut audit,
                );
                assert_eq!(rc, WEIR_ERR_NULL);
            }
        }
        assert_eq!(audit.len, 0, "nothing was carried out");
    }
}
