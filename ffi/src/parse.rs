//! The policy's value syntaxes for hosts: a rate, a size and a duration, parsed by the parser
//! the TOML loader uses, so that a host's own configuration gives the same error words.
//!
//! Each function writes its error into a caller buffer (`err_buf`, `err_cap` bytes): the
//! message, cut on a whole UTF-8 character to fit, always NUL-terminated when `err_cap > 0`;
//! `""` on success. `err_buf` may be NULL only when `err_cap` is 0.

use std::ffi::{c_char, c_int};
use std::ptr;

use weir::policy::config::{parse_duration, parse_rate, parse_size};

use crate::{bytes, guard, WEIR_ERR_INVALID, WEIR_ERR_NULL, WEIR_OK};

/// A request rate: `count` requests per `period_ns` nanoseconds (`10r/s` is 10 per
/// 1,000,000,000; `30r/m` is 30 per 60,000,000,000).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct weir_rate {
    pub count: u64,
    pub period_ns: u64,
}

/// Parses a rate as a policy's `rate` does: `10r/s`, `30r/m`, `100r/h` or `1000r/d` (so every
/// nginx `rate=` value too), count 1 to 1,000,000,000. `text` is `len` bytes, not
/// NUL-terminated. WEIR_OK and `*out` set, or WEIR_ERR_INVALID and the policy's message in
/// `err_buf`; WEIR_ERR_NULL for a NULL `text` (with `len > 0`), `out` or `err_buf` (with
/// `err_cap > 0`).
#[no_mangle]
pub unsafe extern "C" fn weir_parse_rate(
    text: *const u8,
    len: usize,
    out: *mut weir_rate,
    err_buf: *mut c_char,
    err_cap: usize,
) -> c_int {
    parse_into(text, len, out, err_buf, err_cap, |s| {
        let r = parse_rate(s)?;
        Ok(weir_rate {
            count: r.count,
            period_ns: r.period_ns,
        })
    })
}

/// Parses a size as a policy's zone `size` does: bytes (`65536`) or a number with `k`, `m` or
/// `g` (powers of 1024, either case), into `*out` bytes. Statuses and `err_buf` as
/// `weir_parse_rate`.
#[no_mangle]
pub unsafe extern "C" fn weir_parse_size(
    text: *const u8,
    len: usize,
    out: *mut u64,
    err_buf: *mut c_char,
    err_cap: usize,
) -> c_int {
    parse_into(text, len, out, err_buf, err_cap, parse_size)
}

/// Parses a duration as a policy's `window` or `timeout` does (nginx time syntax: `30s`,
/// `500ms`, `1h30m`, `7d`, a bare number of seconds; units `ms s m h d w M y`, each once,
/// largest first), into `*out_ns` nanoseconds. Statuses and `err_buf` as `weir_parse_rate`.
#[no_mangle]
pub unsafe extern "C" fn weir_parse_duration(
    text: *const u8,
    len: usize,
    out_ns: *mut u64,
    err_buf: *mut c_char,
    err_cap: usize,
) -> c_int {
    parse_into(text, len, out_ns, err_buf, err_cap, |s| {
        let d = parse_duration(s)?;
        u64::try_from(d.as_nanos()).map_err(|_| format!("duration {s:?} is too large"))
    })
}

/// Runs `parse` on the caller's text and stores the value or the error message.
unsafe fn parse_into<T>(
    text: *const u8,
    len: usize,
    out: *mut T,
    err_buf: *mut c_char,
    err_cap: usize,
    parse: impl FnOnce(&str) -> Result<T, String>,
) -> c_int {
    guard(|| {
        if err_buf.is_null() && err_cap > 0 {
            return WEIR_ERR_NULL;
        }
        // SAFETY: err_buf holds err_cap writable bytes (the header's contract; NULL only for 0).
        let err = |msg: &str| unsafe { write_message(err_buf, err_cap, msg) };
        if out.is_null() {
            err("out is NULL");
            return WEIR_ERR_NULL;
        }
        let src = match bytes(text, len) {
            Ok(b) => b,
            Err(code) => {
                err("text is NULL or too long");
                return code;
            }
        };
        // Bytes that are no UTF-8 become U+FFFD, which no syntax accepts: the message quotes them.
        match parse(&String::from_utf8_lossy(src)) {
            Ok(v) => {
                *out = v;
                err("");
                WEIR_OK
            }
            Err(m) => {
                err(&m);
                WEIR_ERR_INVALID
            }
        }
    })
}

/// Writes `msg` NUL-terminated into `buf` (`cap` bytes), cut on a character boundary to fit;
/// nothing when `cap` is 0.
///
/// # Safety
/// `buf` holds `cap` writable bytes.
pub(crate) unsafe fn write_message(buf: *mut c_char, cap: usize, msg: &str) {
    if cap == 0 {
        return;
    }
    let mut n = msg.len().min(cap - 1);
    while !msg.is_char_boundary(n) {
        n -= 1;
    }
    ptr::copy_nonoverlapping(msg.as_ptr(), buf.cast::<u8>(), n);
    *buf.add(n) = 0;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    fn rate(text: &str, cap: usize) -> (c_int, weir_rate, String) {
        let mut out = weir_rate {
            count: 0,
            period_ns: 0,
        };
        let mut buf = vec![1 as c_char; cap.max(1)];
        // SAFETY: `text` and `buf` (of at least `cap` bytes) are live buffers of this frame.
        let rc =
            unsafe { weir_parse_rate(text.as_ptr(), text.len(), &mut out, buf.as_mut_ptr(), cap) };
        let msg = if cap == 0 {
            String::new()
        } else {
            // SAFETY: with room, weir_parse_rate NUL-terminates what it wrote into `buf`.
            unsafe { CStr::from_ptr(buf.as_ptr()) }
                .to_string_lossy()
                .into_owned()
        };
        (rc, out, msg)
    }

    #[test]
    fn rates_give_the_policy_words() {
        let (rc, r, msg) = rate("30r/m", 64);
        assert_eq!(
            (rc, r.count, r.period_ns, msg.as_str()),
            (WEIR_OK, 30, 60_000_000_000, "")
        );
        let (rc, _, msg) = rate("10r/w", 256);
        assert_eq!(rc, WEIR_ERR_INVALID);
        assert_eq!(msg, parse_rate("10r/w").unwrap_err());
    }

    #[test]
    fn short_buffers_cut_on_a_character() {
        // `invalid rate "é"; …`: "é" takes bytes 14 and 15, so 15 bytes of room keep it out.
        assert_eq!(rate("é", 16).2, "invalid rate \"");
        assert_eq!(rate("é", 17).2, "invalid rate \"é");
        assert_eq!(rate("x", 1).2, "");
        assert_eq!(rate("x", 0).0, WEIR_ERR_INVALID);
    }

    #[test]
    fn sizes_and_durations() {
        let mut v = 0u64;
        let null = ptr::null_mut();
        // SAFETY: every text is a static byte string of the length given; `v` is live.
        unsafe {
            assert_eq!(
                weir_parse_size(b"10m".as_ptr(), 3, &mut v, null, 0),
                WEIR_OK
            );
            assert_eq!(v, 10 << 20);
            assert_eq!(
                weir_parse_duration(b"1h30m".as_ptr(), 5, &mut v, null, 0),
                WEIR_OK
            );
            assert_eq!(v, 5_400_000_000_000);
            let huge = b"500000000y";
            let rc = weir_parse_duration(huge.as_ptr(), huge.len(), &mut v, null, 0);
            assert_eq!(rc, WEIR_ERR_INVALID);
            assert_eq!(
                weir_parse_size(ptr::null(), 1, &mut v, null, 0),
                WEIR_ERR_NULL
            );
            assert_eq!(
                weir_parse_size(b"1".as_ptr(), 1, &mut v, null, 8),
                WEIR_ERR_NULL
            );
        }
    }
}
