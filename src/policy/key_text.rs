//! A limit's key as text, the one way every surface shows it: access logs (`$weir_key`,
//! `{http.weir.key}`, tower's `Verdict::key`), `weir replay`, and the live top keys of the
//! JSON status.
//!
//! A one-part key is its value (`203.0.113.0/24`, `/w/index.php`, a header's value); several
//! parts are `part=value` separated by spaces (`ip=192.0.2.7 path=/api`). An `ip` part below
//! the full length and a masked `var:` value carry their prefix (`192.0.2.0/24`); the local
//! client is `local`, `global` is `global`, an absent header, cookie or variable `(absent)`,
//! named even in a one-part key (`cookie:session=(absent)`); bytes
//! other than printable ASCII (and `"`, `\`) are written `\xHH`; a value is cut at
//! [`PART_MAX`] bytes (`…` marks the cut). Written into any [`KeyText`] sink without
//! allocating, so the reject path can name keys into a fixed buffer.

use std::net::IpAddr;

use super::key::{KeyPart, VarMask};
use super::net::mask_ip;
use super::request::PreparedRequest;

/// Longest value rendered of one key part.
pub const PART_MAX: usize = 200;

/// How client addresses appear (`[status] clients` for the status; logs show them in full).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Exposure {
    /// The address as is (default).
    #[default]
    Full,
    /// IPv4 addresses to their /24, IPv6 to their /48.
    Masked,
    /// A keyed hash of the address (`h:` and 16 hex digits): the same client is
    /// recognisable while the seed lives, its address is not shown.
    Hashed,
}

impl Exposure {
    /// The policy's spelling: `"full"`, `"masked"` or `"hashed"`.
    pub fn from_name(name: &str) -> Option<Exposure> {
        match name {
            "full" => Some(Exposure::Full),
            "masked" => Some(Exposure::Masked),
            "hashed" => Some(Exposure::Hashed),
            _ => None,
        }
    }
}

/// Where key text goes. Every byte written is ASCII except `…`.
pub trait KeyText {
    /// Appends `bytes` (a sink may drop what does not fit).
    fn put(&mut self, bytes: &[u8]);

    /// `n` in decimal, without `fmt` (most of the reject path's naming cost when it
    /// formatted).
    fn put_u8(&mut self, n: u8) {
        let digits = [b'0' + n / 100, b'0' + n / 10 % 10, b'0' + n % 10];
        let skip = match n {
            100.. => 0,
            10.. => 1,
            _ => 2,
        };
        self.put(&digits[skip..]);
    }
}

impl KeyText for String {
    fn put(&mut self, bytes: &[u8]) {
        self.push_str(&String::from_utf8_lossy(bytes));
    }
}

/// Adapts a sink to `fmt::Write` (IPv6 addresses, hex).
struct Fmt<'a, O: ?Sized>(&'a mut O);

impl<O: KeyText + ?Sized> std::fmt::Write for Fmt<'_, O> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.put(s.as_bytes());
        Ok(())
    }
}

/// FNV-1a of `bytes` from `seed`, never 0 (hashed addresses, the summaries' tags).
pub fn fnv(seed: u64, bytes: &[u8]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64 ^ seed;
    for &b in bytes {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    h.max(1)
}

/// Writes `ip` masked to `prefix` bits (when shorter than the address) as `how` says, with
/// `/prefix` when masked; `None` is the local client, `local`. `seed` keys the hash.
pub fn write_ip<O: KeyText + ?Sized>(
    out: &mut O,
    ip: Option<IpAddr>,
    prefix: Option<u8>,
    how: Exposure,
    seed: u64,
) {
    use std::fmt::Write;
    let Some(ip) = ip else {
        out.put(b"local");
        return;
    };
    let full = if ip.is_ipv4() { 32 } else { 128 };
    let mut bits = prefix.unwrap_or(full).min(full);
    if how == Exposure::Masked {
        bits = bits.min(if ip.is_ipv4() { 24 } else { 48 });
    }
    let masked = mask_ip(ip, bits);
    if how == Exposure::Hashed {
        let octets = match masked {
            IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
            IpAddr::V6(a) => a.octets(),
        };
        let _ = write!(Fmt(out), "h:{:016x}", fnv(seed, &octets));
    } else if let IpAddr::V4(a) = masked {
        for (i, o) in a.octets().into_iter().enumerate() {
            if i > 0 {
                out.put(b".");
            }
            out.put_u8(o);
        }
    } else {
        let _ = write!(Fmt(out), "{masked}");
    }
    if bits < full {
        out.put(b"/");
        out.put_u8(bits);
    }
}

/// Writes the key `parts` make of `req` (module documentation). `path_ok` is false when the
/// engine refused the request's target: a `path` part is then `(bad target)`.
pub fn write_key<O: KeyText + ?Sized>(
    out: &mut O,
    parts: &[KeyPart],
    req: &PreparedRequest<'_>,
    path_ok: bool,
    how: Exposure,
    seed: u64,
) {
    let named = parts.len() > 1;
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            out.put(b" ");
        }
        let (v, mask) = match part {
            KeyPart::Header(n) => (req.header(n), VarMask::default()),
            KeyPart::Cookie(n) => (req.cookie_named(n), VarMask::default()),
            KeyPart::Var { index, mask, .. } => (req.view.var(*index), *mask),
            _ => (Some(&b""[..]), VarMask::default()),
        };
        // An absent value is named even alone: `cookie:session=(absent)`.
        if named || v.is_none() {
            put_name(out, part);
            out.put(b"=");
        }
        match part {
            KeyPart::Ip {
                v4_prefix,
                v6_prefix,
            } => {
                let prefix = match req.client {
                    Some(IpAddr::V4(_)) => *v4_prefix,
                    _ => *v6_prefix,
                };
                write_ip(out, req.client, Some(prefix), how, seed);
            }
            KeyPart::Global => out.put(b"global"),
            KeyPart::Path if !path_ok => out.put(b"(bad target)"),
            KeyPart::Path => escaped(out, req.path),
            KeyPart::Method => escaped(out, req.method),
            _ => value(out, v, mask, how, seed),
        }
    }
}

/// `ip`, `global`, `path`, `method`, `header:NAME`, `cookie:NAME`, `var:NAME`.
pub(crate) fn put_name<O: KeyText + ?Sized>(out: &mut O, p: &KeyPart) {
    let (kind, name): (&[u8], &[u8]) = match p {
        KeyPart::Ip { .. } => (b"ip", b""),
        KeyPart::Global => (b"global", b""),
        KeyPart::Path => (b"path", b""),
        KeyPart::Method => (b"method", b""),
        KeyPart::Header(n) => (b"header:", n),
        KeyPart::Cookie(n) => (b"cookie:", n),
        KeyPart::Var { name, .. } => (b"var:", name),
    };
    out.put(kind);
    escaped(out, name);
}

/// A header, cookie or variable value; a masked `var:` address as its network.
fn value<O: KeyText + ?Sized>(
    out: &mut O,
    v: Option<&[u8]>,
    mask: VarMask,
    how: Exposure,
    seed: u64,
) {
    match v {
        None => out.put(b"(absent)"),
        Some(v) => match mask.apply(v) {
            Some((net, prefix)) => write_ip(out, Some(net), Some(prefix), how, seed),
            None => escaped(out, v),
        },
    }
}

/// Printable ASCII as it is, other bytes (and `"`, `\`) as `\xHH`; at most [`PART_MAX`]
/// bytes, then `…`.
fn escaped<O: KeyText + ?Sized>(out: &mut O, v: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let cut = &v[..v.len().min(PART_MAX)];
    let mut plain = 0;
    for (i, &b) in cut.iter().enumerate() {
        if (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\' {
            continue;
        }
        out.put(&cut[plain..i]);
        out.put(&[
            b'\\',
            b'x',
            HEX[usize::from(b >> 4)],
            HEX[usize::from(b & 15)],
        ]);
        plain = i + 1;
    }
    out.put(&cut[plain..]);
    if v.len() > PART_MAX {
        out.put("…".as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str, prefix: Option<u8>, how: Exposure) -> String {
        let mut out = String::new();
        write_ip(&mut out, s.parse().ok(), prefix, how, 42);
        out
    }

    #[test]
    fn addresses_are_shown_masked_or_hashed_as_asked() {
        assert_eq!(ip("203.0.113.7", None, Exposure::Full), "203.0.113.7");
        assert_eq!(ip("203.0.113.7", Some(16), Exposure::Full), "203.0.0.0/16");
        assert_eq!(ip("203.0.113.7", None, Exposure::Masked), "203.0.113.0/24");
        assert_eq!(
            ip("2001:db8:1:2::9", None, Exposure::Masked),
            "2001:db8:1::/48"
        );
        let h = ip("203.0.113.7", None, Exposure::Hashed);
        assert!(h.starts_with("h:") && h.len() == 18, "{h}");
        assert!(!h.contains("203"));
        assert_eq!(h, ip("203.0.113.7", None, Exposure::Hashed));
        assert_ne!(h, ip("203.0.113.8", None, Exposure::Hashed));
        assert_eq!(ip("local", None, Exposure::Full), "local");
        assert_eq!(ip("0.9.10.255", Some(8), Exposure::Full), "0.0.0.0/8");
        assert_eq!(ip("100.9.10.255", None, Exposure::Full), "100.9.10.255");
    }

    #[test]
    fn escaping_cuts_long_values() {
        let mut out = String::new();
        escaped(&mut out, b"a\"b\x01c");
        assert_eq!(out, "a\\x22b\\x01c");
        let mut out = String::new();
        escaped(&mut out, &[b'x'; PART_MAX + 5]);
        assert_eq!(out, format!("{}…", "x".repeat(PART_MAX)));
    }
}
