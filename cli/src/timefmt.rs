//! Timestamps of access logs → Unix nanoseconds, and back to RFC 3339 (UTC).

pub const NS: i64 = 1_000_000_000;

/// Log times are accepted from 1970-01-01T00:00:00Z up to (excluding) this time,
/// 2262-01-01T00:00:00Z: every one fits an `i64` of nanoseconds (which ends in April 2262).
/// Anything else in a log is a malformed line, never a wrapped-around time.
pub const MAX_NS: i64 = days_from_civil(2262, 1, 1) * 86_400 * NS;

/// `ns` if it lies in the accepted range (`0..MAX_NS`).
fn in_range(ns: i64) -> Option<i64> {
    (0..MAX_NS).contains(&ns).then_some(ns)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
pub const fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let m = m as i64;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// (year, month, day) of a day number since 1970-01-01.
pub fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = if z >= 0 { z } else { z - 146_096 } / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

fn digits(s: &[u8]) -> Option<i64> {
    if s.is_empty() || s.len() > 18 {
        return None;
    }
    let mut v = 0i64;
    for &b in s {
        if !b.is_ascii_digit() {
            return None;
        }
        v = v * 10 + (b - b'0') as i64;
    }
    Some(v)
}

fn month(s: &[u8]) -> Option<u32> {
    const M: [&[u8; 3]; 12] = [
        b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov",
        b"Dec",
    ];
    M.iter().position(|m| &m[..] == s).map(|i| i as u32 + 1)
}

fn days_in_month(y: i64, m: u32) -> u32 {
    match m {
        2 if y % 4 == 0 && (y % 100 != 0 || y % 400 == 0) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// A local date and time → ns, `None` unless it is a real time of a year 1969–2261 (the
/// offset may still move it out of range; the callers check the UTC result). Seconds are
/// 00–59: neither nginx nor Caddy writes a leap second.
fn hms(y: i64, mo: u32, d: u32, h: i64, mi: i64, s: i64) -> Option<i64> {
    if !(1969..=2261).contains(&y)
        || !(1..=12).contains(&mo)
        || !(1..=days_in_month(y, mo)).contains(&d)
        || h > 23
        || mi > 59
        || s > 59
    {
        return None;
    }
    Some((days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + s) * NS)
}

/// `+0100` / `-0530` / `+01:00` / `Z` → offset in seconds east of UTC; minutes below 60 and
/// at most 14 hours either way (the widest offsets in use are −12:00 and +14:00).
fn offset(s: &[u8]) -> Option<i64> {
    if s == b"Z" || s == b"z" {
        return Some(0);
    }
    let sign = match s.first()? {
        b'+' => 1,
        b'-' => -1,
        _ => return None,
    };
    let rest = &s[1..];
    let (h, m) = match rest.len() {
        4 => (digits(&rest[..2])?, digits(&rest[2..])?),
        5 if rest[2] == b':' => (digits(&rest[..2])?, digits(&rest[3..])?),
        _ => return None,
    };
    if m > 59 || h * 60 + m > 14 * 60 {
        return None;
    }
    Some(sign * (h * 3600 + m * 60))
}

/// nginx `$time_local`: `02/Dec/2026:12:36:45 +0000`.
pub fn parse_time_local(s: &[u8]) -> Option<i64> {
    if s.len() != 26 || s[2] != b'/' || s[6] != b'/' || s[11] != b':' || s[20] != b' ' {
        return None;
    }
    let t = hms(
        digits(&s[7..11])?,
        month(&s[3..6])?,
        digits(&s[0..2])? as u32,
        digits(&s[12..14])?,
        digits(&s[15..17])?,
        digits(&s[18..20])?,
    )?;
    in_range(t - offset(&s[21..])? * NS)
}

/// ISO 8601 / RFC 3339: `2026-12-02T12:36:45+00:00`, optional fraction, `Z` allowed.
/// Returns (ns, whole_seconds).
pub fn parse_iso8601(s: &[u8]) -> Option<(i64, bool)> {
    if s.len() < 20 || s[4] != b'-' || s[7] != b'-' || !matches!(s[10], b'T' | b' ') {
        return None;
    }
    let mut t = hms(
        digits(&s[0..4])?,
        digits(&s[5..7])? as u32,
        digits(&s[8..10])? as u32,
        digits(&s[11..13])?,
        digits(&s[14..16])?,
        digits(&s[17..19])?,
    )?;
    let mut rest = &s[19..];
    let mut whole = true;
    if rest.first() == Some(&b'.') {
        let n = rest[1..].iter().take_while(|b| b.is_ascii_digit()).count();
        let frac = &rest[1..1 + n.min(9)];
        let mut v = digits(frac)?;
        for _ in frac.len()..9 {
            v *= 10;
        }
        t += v;
        whole = false;
        rest = &rest[1 + n..];
    }
    Some((in_range(t - offset(rest)? * NS)?, whole))
}

/// Decimal seconds (`$request_time`) → ns; `None` if not a number or too large for ns.
pub fn parse_decimal_seconds(s: &[u8]) -> Option<i64> {
    let (int, frac) = match memchr::memchr(b'.', s) {
        Some(i) => (&s[..i], &s[i + 1..]),
        None => (s, &s[s.len()..]),
    };
    let mut v = digits(int)?.checked_mul(NS)?;
    if !frac.is_empty() {
        let f = &frac[..frac.len().min(9)];
        let mut x = digits(f)?;
        for _ in f.len()..9 {
            x *= 10;
        }
        v = v.checked_add(x)?;
    }
    Some(v)
}

/// A Unix time in decimal seconds (`$msec` `1733143005.123`, Caddy `ts` as text) → ns, if in
/// the accepted range.
pub fn parse_unix_seconds(s: &[u8]) -> Option<i64> {
    in_range(parse_decimal_seconds(s)?)
}

/// A Unix time in seconds as a JSON number (Caddy `ts`) → ns, if in the accepted range.
pub fn unix_seconds_f64(f: f64) -> Option<i64> {
    // The range test also refuses NaN; within it the conversions cannot overflow.
    if !(0.0..(MAX_NS / NS) as f64).contains(&f) {
        return None;
    }
    let secs = f.trunc();
    in_range((secs as i64) * NS + ((f - secs) * 1e9).round() as i64)
}

/// RFC 3339 in UTC with millisecond precision: `2026-12-02T12:36:45.123Z`.
pub fn format_rfc3339(ns: i64, out: &mut String) {
    use std::fmt::Write;
    let secs = ns.div_euclid(NS);
    let ms = ns.rem_euclid(NS) / 1_000_000;
    let (y, m, d) = civil_from_days(secs.div_euclid(86_400));
    let sod = secs.rem_euclid(86_400);
    let _ = write!(
        out,
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{ms:03}Z",
        sod / 3600,
        sod / 60 % 60,
        sod % 60
    );
}

pub fn rfc3339(ns: i64) -> String {
    let mut s = String::new();
    format_rfc3339(ns, &mut s);
    s
}

/// The nginx `$time_local` text for a time (UTC, `+0000`), for log generators.
pub fn format_time_local(ns: i64) -> String {
    const M: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let secs = ns.div_euclid(NS);
    let (y, m, d) = civil_from_days(secs.div_euclid(86_400));
    let sod = secs.rem_euclid(86_400);
    format!(
        "{d:02}/{}/{y:04}:{:02}:{:02}:{:02} +0000",
        M[m as usize - 1],
        sod / 3600,
        sod / 60 % 60,
        sod % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_local_and_iso_agree() {
        let a = parse_time_local(b"02/Dec/2026:12:36:45 +0000").unwrap();
        let (b, whole) = parse_iso8601(b"2026-12-02T12:36:45+00:00").unwrap();
        assert_eq!(a, b);
        assert!(whole);
        assert_eq!(a, 1_796_215_005 * NS);
        assert_eq!(parse_time_local(b"02/Dec/2026:13:36:45 +0100").unwrap(), a);
        assert_eq!(
            parse_iso8601(b"2026-12-02T12:36:45.5Z").unwrap(),
            (a + NS / 2, false)
        );
        assert_eq!(rfc3339(a + 5_000_000), "2026-12-02T12:36:45.005Z");
        assert_eq!(format_time_local(a), "02/Dec/2026:12:36:45 +0000");
        assert_eq!(parse_decimal_seconds(b"1796215005.25"), Some(a + NS / 4));
        assert_eq!(parse_decimal_seconds(b"0.003"), Some(3_000_000));
        assert_eq!(parse_time_local(b"02/Foo/2026:12:36:45 +0000"), None);
    }

    #[test]
    fn impossible_times_are_refused() {
        let local = |d: &str| parse_time_local(d.as_bytes());
        for bad in [
            "01/Jan/0000:00:00:00 +0000",
            "29/Feb/2025:12:00:00 +0000",
            "31/Apr/2026:12:00:00 +0000",
            "00/Dec/2026:12:00:00 +0000",
            "02/Dec/2026:24:00:00 +0000",
            "02/Dec/2026:12:60:00 +0000",
            "02/Dec/2026:12:00:60 +0000",
            "02/Dec/2026:12:00:00 -9959",
            "02/Dec/2026:12:00:00 +0160",
            "02/Dec/2026:12:00:00 +1401",
            "31/Dec/1969:23:59:59 +0000",
            "01/Jan/2262:00:00:00 +0000",
            "31/Dec/9999:23:59:59 +0000",
        ] {
            assert_eq!(local(bad), None, "{bad}");
        }
        assert!(local("29/Feb/2024:12:00:00 +0000").is_some());
        assert!(local("29/Feb/2000:12:00:00 +0000").is_some());
        assert_eq!(local("29/Feb/2100:12:00:00 +0000"), None);
        assert_eq!(local("01/Jan/1970:00:00:00 +0000"), Some(0));
        assert_eq!(local("01/Jan/1970:14:00:00 +1400"), Some(0));
        assert_eq!(local("31/Dec/1969:12:00:00 -1200"), Some(0));
        assert_eq!(local("01/Jan/1970:00:00:00 +0100"), None);
        assert_eq!(
            local("31/Dec/2261:23:59:59 +0000"),
            Some(MAX_NS - NS),
            "the last second accepted"
        );
        let iso = |d: &str| parse_iso8601(d.as_bytes()).map(|t| t.0);
        for bad in [
            "0000-01-01T00:00:00Z",
            "2025-02-29T12:00:00Z",
            "2026-13-01T12:00:00Z",
            "2026-12-02T12:00:00+14:01",
            "2026-12-02T12:00:00-99:59",
            "2262-01-01T00:00:00Z",
            "1969-12-31T23:59:59.999Z",
            "2026-12-02T12:00:00.Z",
        ] {
            assert_eq!(iso(bad), None, "{bad}");
        }
        assert_eq!(iso("1970-01-01T00:00:00Z"), Some(0));
        // Unix seconds: in range, no overflow, no wrap.
        for bad in [
            "999999999999999999",
            "9223372037",
            "99999999999.5",
            "-1",
            "1e18",
        ] {
            assert_eq!(parse_unix_seconds(bad.as_bytes()), None, "{bad}");
        }
        assert_eq!(parse_decimal_seconds(b"999999999999999999"), None);
        assert_eq!(
            parse_unix_seconds(b"1796215005.25"),
            Some(1_796_215_005 * NS + NS / 4)
        );
        for bad in [-1e18, -1.0, 1e18, f64::NAN, f64::INFINITY, 9.3e9] {
            assert_eq!(unix_seconds_f64(bad), None, "{bad}");
        }
        assert_eq!(unix_seconds_f64(0.0), Some(0));
        assert_eq!(
            unix_seconds_f64(1_796_215_005.25),
            Some(1_796_215_005 * NS + NS / 4)
        );
    }

    #[test]
    fn civil_round_trip() {
        for z in [-1000i64, 0, 1, 59, 60, 365, 10_000, 20_424, 100_000] {
            let (y, m, d) = civil_from_days(z);
            assert_eq!(days_from_civil(y, m, d), z);
        }
    }
}
