//! The names the top-keys summaries record: a limit's key and a client address as text,
//! written into a fixed buffer (truncated to it), with client addresses exposed as the
//! policy's `[status] clients` says.

use std::fmt::Write;
use std::net::IpAddr;

use crate::policy::key::{KeyPart, KeySpec};
use crate::policy::net::mask_ip;
use crate::policy::request::PreparedRequest;

/// How client addresses appear in the status (`[status] clients`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Exposure {
    /// The address as is (default).
    #[default]
    Full,
    /// IPv4 addresses to their /24, IPv6 to their /48.
    Masked,
    /// A keyed hash of the address (`h:` and 16 hex digits), stable while the counters
    /// region lives: the same client is recognisable, its address is not shown.
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

/// A `fmt::Write` into a byte buffer that drops what does not fit.
pub(super) struct Text<'a> {
    pub buf: &'a mut [u8],
    pub len: usize,
}

impl Write for Text<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.put(s.as_bytes());
        Ok(())
    }
}

impl<'a> Text<'a> {
    /// Runs `f` on a text over `buf`; the bytes it wrote.
    pub fn write(buf: &'a mut [u8], f: impl FnOnce(&mut Text)) -> &'a [u8] {
        let mut t = Text { buf, len: 0 };
        f(&mut t);
        let Text { buf, len } = t;
        &buf[..len]
    }

    /// `n` in decimal, without `fmt` (most of the reject path's cost when it formatted).
    fn put_u8(&mut self, n: u8) {
        let digits = [b'0' + n / 100, b'0' + n / 10 % 10, b'0' + n % 10];
        let skip = if n >= 100 {
            0
        } else if n >= 10 {
            1
        } else {
            2
        };
        self.put(&digits[skip..]);
    }

    fn put(&mut self, b: &[u8]) {
        let n = b.len().min(self.buf.len() - self.len);
        self.buf[self.len..self.len + n].copy_from_slice(&b[..n]);
        self.len += n;
    }
}

/// FNV-1a of `bytes` from `seed`, never 0 (a summary's tag).
pub(super) fn tag(seed: u64, bytes: &[u8]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64 ^ seed;
    for &b in bytes {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    h.max(1)
}

/// Writes `ip` (masked to `prefix` bits when shorter than the address) as `exposure` says;
/// `None` is the local client, `local`.
pub(super) fn write_ip(
    out: &mut Text,
    ip: Option<IpAddr>,
    prefix: Option<u8>,
    how: Exposure,
    seed: u64,
) {
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
        let _ = write!(out, "h:{:016x}", tag(seed, &octets));
    } else if let IpAddr::V4(a) = masked {
        for (i, o) in a.octets().into_iter().enumerate() {
            if i > 0 {
                out.put(b".");
            }
            out.put_u8(o);
        }
    } else {
        let _ = write!(out, "{masked}");
    }
    if bits < full {
        out.put(b"/");
        out.put_u8(bits);
    }
}

/// Writes limit key `spec` for `req`: its parts separated by spaces (`ip` as an address,
/// `global` as `*`, `header:NAME=value`, `cookie:NAME=value`, the path, the method, a
/// variable's value).
pub(super) fn write_key(
    out: &mut Text,
    spec: &KeySpec,
    req: &PreparedRequest<'_>,
    how: Exposure,
    seed: u64,
) {
    for (i, part) in spec.parts.iter().enumerate() {
        if i > 0 {
            out.put(b" ");
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
            KeyPart::Global => out.put(b"*"),
            KeyPart::Header(name) => named(out, b"header:", name, req.header(name)),
            KeyPart::Cookie(name) => named(out, b"cookie:", name, req.cookie_named(name)),
            KeyPart::Path => out.put(req.path),
            KeyPart::Method => out.put(req.method),
            KeyPart::Var { index, .. } => out.put(req.view.var(*index).unwrap_or_default()),
        }
    }
}

fn named(out: &mut Text, kind: &[u8], name: &[u8], value: Option<&[u8]>) {
    out.put(kind);
    out.put(name);
    out.put(b"=");
    out.put(value.unwrap_or_default());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str, prefix: Option<u8>, how: Exposure) -> String {
        let mut buf = [0u8; 64];
        let name = Text::write(&mut buf, |t| write_ip(t, s.parse().ok(), prefix, how, 42));
        String::from_utf8(name.to_vec()).unwrap()
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
}
