//! Value syntaxes shared by the loader and the hosts: sizes, rates, durations.

use super::*;

/// A problem inside a value: message plus the byte range inside the string
/// it concerns (to point the column at the bad unit when possible).
pub(super) type SubErr = (String, Option<Range<usize>>);

/// nginx size syntax: `512`, `512k`, `10m`, `1g` (case-insensitive units,
/// powers of 1024). Returns bytes.
pub fn parse_size(s: &str) -> Result<u64, String> {
    parse_size_sub(s).map_err(|e| e.0)
}

pub(super) fn parse_size_sub(s: &str) -> Result<u64, SubErr> {
    let digits = s.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return Err((
            format!("invalid size {s:?}; expected bytes or a number with k, m or g, like \"10m\" or \"512k\""),
            None,
        ));
    }
    let n: u64 = s[..digits]
        .parse()
        .map_err(|_| (format!("size {s:?} is too large"), None))?;
    let mult: u64 = match &s[digits..] {
        "" => 1,
        "k" | "K" => 1 << 10,
        "m" | "M" => 1 << 20,
        "g" | "G" => 1 << 30,
        u => {
            return Err((
                format!("unknown size unit {u:?}; expected k, m or g (or none for bytes)"),
                Some(digits..s.len()),
            ))
        }
    };
    n.checked_mul(mult)
        .ok_or_else(|| (format!("size {s:?} is too large"), None))
}

pub use crate::limiter::Rate;

/// Parse `10r/s`, `30r/m`, `100r/h`, `1000r/d` ([`Rate::parse`]).
pub fn parse_rate(s: &str) -> Result<Rate, String> {
    Rate::parse(s).map_err(|e| e.message)
}

pub(super) fn parse_rate_sub(s: &str) -> Result<Rate, SubErr> {
    Rate::parse(s).map_err(|e| (e.message, e.span))
}

/// nginx time syntax: `30s`, `500ms`, `1h30m`, `2d`, a bare number of
/// seconds (`90`); units `ms s m h d w M y` (month = 30 d, year = 365 d),
/// each at most once, largest first.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    parse_duration_sub(s).map_err(|e| e.0)
}

pub(super) fn parse_duration_sub(s: &str) -> Result<Duration, SubErr> {
    const UNITS: [(&str, u64); 8] = [
        ("y", 365 * 86_400_000),
        ("M", 30 * 86_400_000),
        ("w", 7 * 86_400_000),
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1_000),
        ("ms", 1),
    ];
    let bytes = s.as_bytes();
    let bad = || {
        (
            format!("invalid duration {s:?}; expected nginx time syntax like \"30s\", \"500ms\", \"1h30m\" or \"7d\""),
            None,
        )
    };
    if s.is_empty() {
        return Err(bad());
    }
    let mut i = 0;
    let mut total_ms: u64 = 0;
    let mut last_unit: Option<usize> = None;
    while i < bytes.len() {
        while i < bytes.len() && bytes[i] == b' ' {
            i += 1;
        }
        let d0 = i;
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            i += 1;
        }
        if d0 == i {
            return Err(bad());
        }
        let n: u64 = s[d0..i].parse().map_err(|_| bad())?;
        let u0 = i;
        while i < bytes.len() && bytes[i].is_ascii_alphabetic() {
            i += 1;
        }
        let unit = &s[u0..i];
        let idx = if unit.is_empty() {
            if i != bytes.len() {
                return Err(bad());
            }
            6 // bare number: seconds
        } else {
            match UNITS.iter().position(|(u, _)| *u == unit) {
                Some(idx) => idx,
                None => {
                    return Err((
                        format!("unknown time unit {unit:?}; expected ms, s, m, h, d, w, M or y"),
                        Some(u0..i),
                    ))
                }
            }
        };
        if last_unit.is_some_and(|l| idx <= l) {
            return Err((
                format!(
                    "time units in {s:?} must each appear once, largest first (like \"1h30m\")"
                ),
                Some(u0..i),
            ));
        }
        last_unit = Some(idx);
        total_ms = n
            .checked_mul(UNITS[idx].1)
            .and_then(|v| v.checked_add(total_ms))
            .ok_or_else(|| (format!("duration {s:?} is too large"), None))?;
        while i < bytes.len() && bytes[i] == b' ' {
            i += 1;
        }
    }
    Ok(Duration::from_millis(total_ms))
}
