//! Query-argument tests: every occurrence of a name, decoded on the stack when short.

use super::*;

/// Decode `raw` (on the stack when short) and hand the result to `f`.
#[inline]
pub(super) fn with_decoded<R>(raw: &[u8], f: impl FnOnce(&[u8]) -> R) -> R {
    if bytes::find2(raw, b'%', b'+').is_none() {
        return f(raw);
    }
    if raw.len() <= QUERY_STACK_BUF {
        let mut buf = [0u8; QUERY_STACK_BUF];
        let n = decode_component(raw, &mut buf);
        f(&buf[..n])
    } else if raw.len() <= QUERY_LONG_STACK_BUF {
        with_decoded_long(raw, f)
    } else {
        // Over 2 KiB: rare enough to take the heap.
        let mut buf = vec![0u8; raw.len()];
        let n = decode_component(raw, &mut buf);
        f(&buf[..n])
    }
}

/// Values between 512 B and 2 KiB decode in a larger stack buffer, kept out of line so the
/// common path does not reserve it.
pub(super) const QUERY_LONG_STACK_BUF: usize = 2048;

#[inline(never)]
pub(super) fn with_decoded_long<R>(raw: &[u8], f: impl FnOnce(&[u8]) -> R) -> R {
    let mut buf = [0u8; QUERY_LONG_STACK_BUF];
    let n = decode_component(raw, &mut buf);
    f(&buf[..n])
}

/// Does the query test `(name, m)` pass? The same answer as walking `query_args` and
/// decoding each name and value (`query_matches_plain`, in the tests), in one scan of the query: an
/// argument's name ends at its first `=` or `&`, and its value is searched for its `&`
/// together with the `%` and `+` that would need decoding.
pub(super) fn query_matches(query: &[u8], name: &[u8], m: &ValueMatcher) -> bool {
    use crate::policy::bytes::{find, find2, find3};
    let mut seen = false;
    let mut rest = query;
    while !rest.is_empty() {
        let (n, value) = match find2(rest, b'=', b'&') {
            Some(i) if rest[i] == b'=' => (&rest[..i], Some(&rest[i + 1..])),
            Some(i) => {
                let n = &rest[..i];
                rest = &rest[i + 1..];
                if n.is_empty() {
                    continue; // an empty argument (`&&`)
                }
                (n, None)
            }
            None => {
                let n = rest;
                rest = &rest[rest.len()..];
                (n, None)
            }
        };
        // The value (empty when there is no `=`), whether it has escapes, and what follows.
        let (v, plain) = match value {
            None => (&n[n.len()..], true),
            Some(tail) => {
                let (end, plain) = match find3(tail, b'&', b'%', b'+') {
                    Some(j) if tail[j] == b'&' => (j, true),
                    Some(j) => (j + find(&tail[j..], b'&').unwrap_or(tail.len() - j), false),
                    None => (tail.len(), true),
                };
                rest = tail.get(end + 1..).unwrap_or(&[]);
                (&tail[..end], plain)
            }
        };
        // Decoding never lengthens a name (`%XX` → 1 byte, `+` → 1 byte), nor does reading it
        // as PHP does: a shorter raw name cannot be equal, and an equal one needs no decoding.
        let named = n.len() >= name.len()
            && (bytes::eq(n, name) || with_decoded(n, |d| php_name(d) == name));
        if !named {
            continue;
        }
        seen = true;
        match m {
            ValueMatcher::Absent => return false,
            ValueMatcher::Present => return true,
            _ if plain => {
                if m.matches_value(v) {
                    return true;
                }
            }
            _ => {
                if with_decoded(v, |d| m.matches_value(d)) {
                    return true;
                }
            }
        }
    }
    matches!(m, ValueMatcher::Absent) && !seen
}

/// A decoded argument name as PHP registers it: leading spaces dropped, cut at a NUL byte
/// (`?+title=` and `?title%00x=` are `title` to a PHP application). Never longer than `d`.
#[inline]
pub(super) fn php_name(d: &[u8]) -> &[u8] {
    let d = &d[d.iter().take_while(|&&b| b == b' ').count()..];
    &d[..bytes::find(d, 0).unwrap_or(d.len())]
}

/// [`query_matches`] as its definition reads: every argument, each name and value decoded.
#[cfg(test)]
pub(super) fn query_matches_plain(query: &[u8], name: &[u8], m: &ValueMatcher) -> bool {
    let mut seen = false;
    for (n, v) in query_args(query) {
        if !with_decoded(n, |d| php_name(d) == name) {
            continue;
        }
        seen = true;
        match m {
            ValueMatcher::Absent => return false,
            ValueMatcher::Present => return true,
            _ => {
                if with_decoded(v, |d| m.matches_value(d)) {
                    return true;
                }
            }
        }
    }
    matches!(m, ValueMatcher::Absent) && !seen
}
