//! Request-target splitting and nginx-compatible `$uri` normalization.
//!
//! The policy engine matches on the same path nginx would route on, so that a
//! client cannot dodge a limit by spelling a path differently (`//admin`,
//! `/x/../admin`, `/%61dmin`, `/admin%2F`). This module reproduces what nginx
//! 1.22 (Linux build, `merge_slashes on`) stores in `$uri`, and rejects exactly
//! the request targets nginx answers with `400 Bad Request`.
//!
//! Summary of the rules (see `docs/URI-NORMALIZATION.md` for the full list and
//! the surprising corners):
//!
//! * Every byte of the target below 0x20, 0x7F and the space are rejected
//!   (they cannot be part of a request-line target). Bytes 0x80..=0xFF are
//!   passed through untouched; no UTF-8 validation happens.
//! * The path ends at the first literal `?` (query follows) or `#` (fragment
//!   follows; a `#` inside the query cuts the query short).
//! * `%XX` is decoded; a `%` not followed by two hex digits, or `%00`, is an
//!   error. A decoded byte takes part in normalization like the literal byte,
//!   so `%2F` merges with neighbouring slashes and `%2E%2E` climbs a segment.
//!   The exceptions are decoded `%`, `#` and `?`, which are always plain data.
//! * Runs of `/` collapse into one; `.` segments vanish; `..` removes the
//!   previous segment and is an error if there is none.
//! * `;`, `\` and every other printable byte are plain data.
//!
//! None of the functions allocate; the caller provides the output buffer. The
//! normalized path is never longer than the raw path it was made from, so a
//! buffer of `raw_path.len()` bytes is always large enough, and for
//! [`normalize_target`] one of `target.len()` bytes (an absolute-form target
//! with an empty path, `http://h`, yields `/`, still shorter than the target).

use super::target_scan::{self, forbidden};
use crate::policy::bytes;
use std::fmt;

mod error;
pub use error::*;

#[cfg(test)]
mod tests;

/// The parts of a request target, borrowed from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target<'a> {
    /// Scheme of an absolute-form target, as sent (`http`, `HTTPS`, ...);
    /// `None` for origin-form. Like nginx, any syntactically valid scheme is
    /// accepted; callers that only want `http`/`https` must check this.
    pub scheme: Option<&'a [u8]>,
    /// Host of an absolute-form target as sent (may be a `[...]` IP literal,
    /// may end in a dot, is not lower-cased); `None` for origin-form.
    pub host: Option<&'a [u8]>,
    /// Port digits of an absolute-form target, if a `:` followed the host
    /// (possibly empty, like nginx accepts `http://h:/`).
    pub port: Option<&'a [u8]>,
    /// Raw path: starts with `/`, still percent-encoded, ends before the
    /// first `?` or `#`. For an absolute-form target without a path
    /// (`http://h` or `http://h?q`) this is the static `"/"`.
    pub path: &'a [u8],
    /// Raw query without the `?`, cut at the first `#` after it. `None` when
    /// the target has no `?` before any `#`. Not validated beyond the
    /// request-line byte rules; decode it with [`query_args`] and
    /// [`decode_component`].
    pub query: Option<&'a [u8]>,
    /// Raw fragment without the `#` (nginx ignores it), `None` if absent.
    pub fragment: Option<&'a [u8]>,
    path_offset: usize,
}

impl Target<'_> {
    /// Byte offset of [`Target::path`] inside the target (0 for origin-form;
    /// for the static `"/"` of an empty absolute-form path, the offset where
    /// the path would start).
    pub fn path_offset(&self) -> usize {
        self.path_offset
    }
}

#[inline]
fn hex_val(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Splits a request target (the second word of an HTTP request line) into
/// its parts, validating it the way nginx's request-line parser does.
///
/// Accepts origin-form (`/path?query#fragment`) and absolute-form
/// (`scheme://host[:port][/path][?query][#fragment]`, scheme
/// case-insensitive). The path is returned raw; pass it to
/// [`normalize_path`]. Escapes are not checked here.
pub fn split_target(target: &[u8]) -> Result<Target<'_>, UriError> {
    let first = *target.first().ok_or(UriError::Empty)?;
    if first == b'/' {
        return split_rest(target, 0, None, None, None);
    }
    if !first.is_ascii_alphabetic() {
        return Err(if forbidden(first) {
            UriError::ForbiddenByte {
                offset: 0,
                byte: first,
            }
        } else {
            UriError::BadStart { byte: first }
        });
    }

    // Scheme: a letter, then letters, digits, '+', '-', '.', then "://".
    let mut i = 1;
    while let Some(&b) = target.get(i) {
        if b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.') {
            i += 1;
        } else {
            break;
        }
    }
    let scheme = &target[..i];
    for expected in [b':', b'/', b'/'] {
        match target.get(i) {
            Some(&b) if b == expected => i += 1,
            other => {
                return Err(UriError::BadScheme {
                    offset: i,
                    byte: other.copied(),
                })
            }
        }
    }

    // Host: either an IP literal in brackets or [A-Za-z0-9.-]*.
    let host_start = i;
    if target.get(i) == Some(&b'[') {
        i += 1;
        loop {
            match target.get(i) {
                Some(b']') => {
                    i += 1;
                    break;
                }
                Some(&b)
                    if b.is_ascii_alphanumeric()
                        || matches!(
                            b,
                            b':' | b'-'
                                | b'.'
                                | b'_'
                                | b'~'
                                | b'!'
                                | b'$'
                                | b'&'
                                | b'\''
                                | b'('
                                | b')'
                                | b'*'
                                | b'+'
                                | b','
                                | b';'
                                | b'='
                        ) =>
                {
                    i += 1
                }
                other => {
                    return Err(UriError::BadAuthority {
                        offset: i,
                        byte: other.copied(),
                    })
                }
            }
        }
    } else {
        while let Some(&b) = target.get(i) {
            if b.is_ascii_alphanumeric() || b == b'.' || b == b'-' {
                i += 1;
            } else {
                break;
            }
        }
    }
    let host = &target[host_start..i];
    check_host(host).map_err(|e| e.shifted(host_start))?;

    let mut port = None;
    if target.get(i) == Some(&b':') {
        i += 1;
        let port_start = i;
        while target.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        port = Some(&target[port_start..i]);
    }
    match target.get(i) {
        None | Some(b'/') | Some(b'?') => {}
        Some(&b) => {
            return Err(if forbidden(b) {
                UriError::ForbiddenByte { offset: i, byte: b }
            } else {
                UriError::BadAuthority {
                    offset: i,
                    byte: Some(b),
                }
            })
        }
    }
    split_rest(target, i, Some(scheme), Some(host), port)
}

/// nginx's host sanity check: no `..`, and not empty once one trailing dot
/// is dropped. `host` never contains the port here.
fn check_host(host: &[u8]) -> Result<(), UriError> {
    if host.windows(2).any(|w| w == b"..") {
        return Err(UriError::InvalidHost { offset: 0 });
    }
    let trimmed = host.strip_suffix(b".").unwrap_or(host);
    if trimmed.is_empty() {
        return Err(UriError::InvalidHost { offset: 0 });
    }
    Ok(())
}

/// Splits `target[start..]` (which is empty or starts with `/` or `?`) into
/// path, query and fragment, checking every byte against the request-line
/// rules.
fn split_rest<'a>(
    target: &'a [u8],
    start: usize,
    scheme: Option<&'a [u8]>,
    host: Option<&'a [u8]>,
    port: Option<&'a [u8]>,
) -> Result<Target<'a>, UriError> {
    let rest = target.get(start..).unwrap_or(&[]);
    // One pass finds forbidden bytes (located only if there is one), a `#` and the first `?`:
    // clients do not send fragments, so nearly always the `?` splits the target.
    let scan = target_scan::scan(rest);
    if scan.forbidden {
        let pos = rest.iter().position(|&b| forbidden(b)).unwrap_or(0);
        return Err(UriError::ForbiddenByte {
            offset: start + pos,
            byte: rest[pos],
        });
    }
    if !scan.hash {
        let (path, query) = match scan.question {
            Some(0) => (&b"/"[..], Some(&rest[1..])),
            Some(q) => (&rest[..q], Some(&rest[q + 1..])),
            None if rest.is_empty() => (&b"/"[..], None),
            None => (rest, None),
        };
        return Ok(Target {
            scheme,
            host,
            port,
            path,
            query,
            fragment: None,
            path_offset: start,
        });
    }
    let path_end = memchr::memchr2(b'?', b'#', rest).unwrap_or(rest.len());
    let path: &'a [u8] = if path_end == 0 {
        b"/"
    } else {
        &rest[..path_end]
    };
    let after = &rest[path_end..];
    let (query, fragment) = match after.split_first() {
        Some((b'?', q)) => match memchr::memchr(b'#', q) {
            Some(h) => (Some(&q[..h]), Some(&q[h + 1..])),
            None => (Some(q), None),
        },
        Some((_, f)) => (None, Some(f)),
        None => (None, None),
    };
    Ok(Target {
        scheme,
        host,
        port,
        path,
        query,
        fragment,
        path_offset: start,
    })
}

/// True when `raw_path` is already what [`normalize_path`] would return: it starts with `/`
/// and has no escapes, no empty segment and no `.` or `..` segment. Such paths (nearly all
/// real ones) need no copy.
#[inline]
pub fn is_normal(raw_path: &[u8]) -> bool {
    if raw_path.first() != Some(&b'/') {
        return false;
    }
    // A word at a time: no `%`, `?` or `#`, and no `/` followed by `/` or `.`. A path with a
    // segment that starts with `.` (`/.well-known`) may still be normal: the byte walk decides.
    // `slash_before` is 0x80 in byte 0 iff the byte before the word is `/`.
    let words_say = |w: u64, slash_before: u64| -> Option<bool> {
        let stop = bytes::bytes_equal_to(w, b'%')
            | bytes::bytes_equal_to(w, b'?')
            | bytes::bytes_equal_to(w, b'#');
        let slash = bytes::bytes_equal_to(w, b'/');
        let after_slash = slash << 8 | slash_before;
        if stop != 0 {
            Some(false)
        } else if after_slash & (slash | bytes::bytes_equal_to(w, b'.')) != 0 {
            Some(is_normal_bytewise(raw_path))
        } else {
            None
        }
    };
    let n = raw_path.len();
    if n == 1 {
        return true; // `/`
    }
    if n < 8 {
        return words_say(bytes::short_word(raw_path), 0).unwrap_or(true);
    }
    let mut i = 0;
    let mut slash_before = 0;
    while i + 8 <= n {
        let w = bytes::word(raw_path, i);
        if let Some(answer) = words_say(w, slash_before) {
            return answer;
        }
        slash_before = (w >> 56 == u64::from(b'/')) as u64 * 0x80;
        i += 8;
    }
    if i < n {
        // The last word overlaps bytes already seen; seeing them again changes nothing.
        let before = (raw_path[n - 9] == b'/') as u64 * 0x80;
        return words_say(bytes::word(raw_path, n - 8), before).unwrap_or(true);
    }
    true
}

/// [`is_normal`] byte by byte, for paths where a segment starts with `/` or `.`.
#[inline(never)]
fn is_normal_bytewise(raw_path: &[u8]) -> bool {
    if raw_path.first() != Some(&b'/') {
        return false;
    }
    let mut prev = b'/';
    let mut i = 1;
    while let Some(&b) = raw_path.get(i) {
        match b {
            b'%' | b'?' | b'#' => return false,
            b'/' if prev == b'/' => return false,
            b'.' if prev == b'/' => {
                // A segment starting with '.': only a problem if it is "." or "..".
                let next = raw_path.get(i + 1).copied();
                let next2 = raw_path.get(i + 2).copied();
                if matches!(next, None | Some(b'/'))
                    || (next == Some(b'.') && matches!(next2, None | Some(b'/')))
                {
                    return false;
                }
            }
            _ => {}
        }
        prev = b;
        i += 1;
    }
    true
}

/// A path element after escape decoding.
#[derive(Clone, Copy)]
enum Tok {
    Slash,
    Dot,
    Data(u8),
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    /// Inside a segment that is not `.`/`..` so far.
    Seg,
    /// Just wrote a `/`.
    Slash,
    /// The current segment is `.` so far.
    Dot,
    /// The current segment is `..` so far.
    DotDot,
}

struct Writer<'o> {
    out: &'o mut [u8],
    len: usize,
}

impl Writer<'_> {
    #[inline]
    fn push(&mut self, b: u8) -> Result<(), UriError> {
        match self.out.get_mut(self.len) {
            Some(slot) => {
                *slot = b;
                self.len += 1;
                Ok(())
            }
            None => Err(UriError::OutputTooSmall {
                capacity: self.out.len(),
            }),
        }
    }

    /// Drops a trailing `/..` together with the segment before it, keeping
    /// that segment's leading `/`.
    fn climb(&mut self, offset: usize) -> Result<(), UriError> {
        // The output ends in "/.." here; `slash` is the index of that '/'.
        let slash = self.len.saturating_sub(3);
        match self.out[..slash].iter().rposition(|&b| b == b'/') {
            Some(prev) => {
                self.len = prev + 1;
                Ok(())
            }
            None => Err(UriError::AboveRoot { offset }),
        }
    }
}

/// Normalizes a raw request path into what nginx 1.22 exposes as `$uri`
/// (with `merge_slashes on`), writing it to `out` and returning its length.
///
/// `raw_path` must start with `/`. Like nginx, a literal `?` or `#` ends the
/// path (the rest is only checked for forbidden bytes), so passing a whole
/// origin-form target works too. The result is never longer than
/// `raw_path`, so `out.len() >= raw_path.len()` always suffices; a shorter
/// buffer yields [`UriError::OutputTooSmall`] if the result does not fit.
pub fn normalize_path(raw_path: &[u8], out: &mut [u8]) -> Result<usize, UriError> {
    if raw_path.first() != Some(&b'/') {
        return Err(match raw_path.first() {
            Some(&b) if forbidden(b) => UriError::ForbiddenByte { offset: 0, byte: b },
            _ => UriError::NoLeadingSlash,
        });
    }
    let mut w = Writer { out, len: 0 };
    let mut state = State::Seg;
    let mut i = 0;
    while let Some(&b) = raw_path.get(i) {
        let at = i;
        let tok = match b {
            b'/' => Tok::Slash,
            b'.' => Tok::Dot,
            b'?' | b'#' => {
                let rest = &raw_path[i + 1..];
                if let Some(pos) = rest.iter().position(|&c| forbidden(c)) {
                    return Err(UriError::ForbiddenByte {
                        offset: i + 1 + pos,
                        byte: rest[pos],
                    });
                }
                break;
            }
            b'%' => {
                let hi = raw_path.get(i + 1).copied().and_then(hex_val);
                let lo = raw_path.get(i + 2).copied().and_then(hex_val);
                let (Some(hi), Some(lo)) = (hi, lo) else {
                    // Report a forbidden byte inside the escape as such.
                    for k in 1..=2 {
                        if let Some(&c) = raw_path.get(i + k) {
                            if forbidden(c) && hi.is_none() == (k == 1) {
                                return Err(UriError::ForbiddenByte {
                                    offset: i + k,
                                    byte: c,
                                });
                            }
                        }
                    }
                    return Err(UriError::InvalidEscape { offset: i });
                };
                i += 2;
                match (hi << 4) | lo {
                    0 => return Err(UriError::EncodedNul { offset: at }),
                    b'/' => Tok::Slash,
                    b'.' => Tok::Dot,
                    // Decoded '%', '#', '?' and everything else are plain data.
                    d => Tok::Data(d),
                }
            }
            _ if forbidden(b) => return Err(UriError::ForbiddenByte { offset: i, byte: b }),
            _ => Tok::Data(b),
        };
        i += 1;
        state = match (state, tok) {
            (State::Slash, Tok::Slash) => State::Slash,
            (_, Tok::Slash) => match state {
                State::Dot => {
                    // "/./": forget the '.'.
                    w.len -= 1;
                    State::Slash
                }
                State::DotDot => {
                    w.climb(at)?;
                    State::Slash
                }
                _ => {
                    w.push(b'/')?;
                    State::Slash
                }
            },
            (State::Slash, Tok::Dot) => {
                w.push(b'.')?;
                State::Dot
            }
            (State::Dot, Tok::Dot) => {
                w.push(b'.')?;
                State::DotDot
            }
            (_, Tok::Dot) => {
                w.push(b'.')?;
                State::Seg
            }
            (_, Tok::Data(d)) => {
                w.push(d)?;
                State::Seg
            }
        };
    }
    match state {
        State::Dot => w.len -= 1,
        State::DotDot => w.climb(i)?,
        State::Seg | State::Slash => {}
    }
    Ok(w.len)
}

/// [`split_target`] followed by [`normalize_path`] on the path: the `$uri`
/// nginx would compute for this request target. `out.len() >= target.len()`
/// always suffices.
pub fn normalize_target(target: &[u8], out: &mut [u8]) -> Result<usize, UriError> {
    let t = split_target(target)?;
    normalize_path(t.path, out).map_err(|e| e.shifted(t.path_offset))
}

/// Iterates over the `&`-separated arguments of a raw query string, yielding
/// `(name, value)` still percent-encoded. An argument without `=` has an
/// empty value; empty arguments (`a&&b`) are skipped. Feed the parts to
/// [`decode_component`] before comparing.
pub fn query_args(query: &[u8]) -> impl Iterator<Item = (&[u8], &[u8])> {
    let mut rest = Some(query);
    std::iter::from_fn(move || {
        let r = rest?;
        Some(match bytes::find(r, b'&') {
            Some(i) => {
                rest = Some(&r[i + 1..]);
                &r[..i]
            }
            None => {
                rest = None;
                r
            }
        })
    })
    .filter(|arg| !arg.is_empty())
    .map(|arg| match bytes::find(arg, b'=') {
        Some(eq) => (&arg[..eq], &arg[eq + 1..]),
        None => (arg, &arg[arg.len()..]),
    })
}

/// Decodes a query name or value for matching: `%XX` becomes the byte, `+`
/// becomes a space, and malformed escapes are copied literally. Writes at
/// most `raw.len()` bytes (and never more than `out.len()`; a too short
/// buffer truncates) and returns how many were written.
pub fn decode_component(raw: &[u8], out: &mut [u8]) -> usize {
    let mut n = 0;
    let mut i = 0;
    while let Some(&b) = raw.get(i) {
        let (byte, used) = match b {
            b'+' => (b' ', 1),
            b'%' => match (
                raw.get(i + 1).copied().and_then(hex_val),
                raw.get(i + 2).copied().and_then(hex_val),
            ) {
                (Some(hi), Some(lo)) => ((hi << 4) | lo, 3),
                _ => (b'%', 1),
            },
            _ => (b, 1),
        };
        let Some(slot) = out.get_mut(n) else { break };
        *slot = byte;
        n += 1;
        i += used;
    }
    n
}
