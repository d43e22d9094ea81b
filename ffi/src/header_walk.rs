//! Walking the response header lines a verdict's buffer holds ("Name: value\r\n"), for hosts
//! that set headers one by one.

use std::ffi::c_int;
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::{bytes, weir_arg};

/// The next response header of a verdict's buffer (`buf`, `len` bytes: lines "Name: value\r\n")
/// from byte `*pos` (0 first), whose name and value (bytes of `buf`, the value without its
/// leading spaces) go to `*name` and `*value`; `*pos` moves past it. 1 when there is one, 0 at
/// the end (or for a NULL argument). With `ratelimit` 0 the `RateLimit*` headers are skipped.
#[no_mangle]
pub unsafe extern "C" fn weir_header_next(
    buf: *const u8,
    len: usize,
    pos: *mut usize,
    ratelimit: c_int,
    name: *mut weir_arg,
    value: *mut weir_arg,
) -> c_int {
    if pos.is_null() || name.is_null() || value.is_null() {
        return 0;
    }
    let Ok(buf) = bytes(buf, len) else {
        return 0;
    };
    catch_unwind(AssertUnwindSafe(|| {
        next_header(buf, &mut *pos, ratelimit, &mut *name, &mut *value)
    }))
    .unwrap_or(0)
}

fn next_header(
    buf: &[u8],
    pos: &mut usize,
    ratelimit: c_int,
    name: &mut weir_arg,
    value: &mut weir_arg,
) -> c_int {
    while *pos < buf.len() {
        let line = &buf[*pos..];
        let eol = line.iter().position(|&c| c == b'\r').unwrap_or(line.len());
        *pos += eol + 2;
        let line = &line[..eol];
        let Some(colon) = line.iter().position(|&c| c == b':') else {
            continue;
        };
        if ratelimit == 0
            && line[..colon].len() >= 9
            && line[..9].eq_ignore_ascii_case(b"ratelimit")
        {
            continue;
        }
        let v = &line[colon + 1..];
        let v = &v[v.iter().take_while(|&&c| c == b' ').count()..];
        *name = weir_arg {
            len: colon,
            data: line.as_ptr(),
        };
        *value = weir_arg {
            len: v.len(),
            data: v.as_ptr(),
        };
        return 1;
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_one_by_one() {
        let buf = b"RateLimit: x\r\nbad line\r\nRetry-After:  3\r\nX: \r\n";
        let walk = |ratelimit| {
            let (mut pos, mut got) = (0, Vec::new());
            let mut n = weir_arg {
                len: 0,
                data: std::ptr::null(),
            };
            let mut v = weir_arg {
                len: 0,
                data: std::ptr::null(),
            };
            while unsafe {
                weir_header_next(buf.as_ptr(), buf.len(), &mut pos, ratelimit, &mut n, &mut v)
            } == 1
            {
                let text =
                    |a: &weir_arg| unsafe { std::slice::from_raw_parts(a.data, a.len) }.to_vec();
                got.push(format!(
                    "{}={}",
                    String::from_utf8_lossy(&text(&n)),
                    String::from_utf8_lossy(&text(&v))
                ));
            }
            got
        };
        assert_eq!(walk(1), ["RateLimit=x", "Retry-After=3", "X="]);
        assert_eq!(walk(0), ["Retry-After=3", "X="]);
    }
}
