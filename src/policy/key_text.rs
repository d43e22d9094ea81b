//! A limit's key as text, the one way every surface writes it: access logs (`$weir_key`,
//! `{http.weir.key}`, tower's `Verdict::key`), the error log's ban lines, the JSON status's top
//! keys and bans, key operations' answers and audit lines, `weir replay` and `weir top`.
//! `policy::keyops` parses it back (docs/METRICS.md, "Key text").
//!
//! Grammar (every byte printable ASCII, no `"` or `\`, so access logs with any escaping and
//! JSON carry it unchanged):
//!
//! ```text
//! text      = parts [" #" reference] | "#" reference
//! parts     = value | name "=" marker | name "=" value *(" " name "=" value) ["(cut)"]
//! value     = 1*(safe | "%" HEX HEX) | address | marker
//! marker    = "(absent)" | "(empty)" | "(bad-target)" | "~" 16hex
//! ```
//!
//! A one-part key is its value (`203.0.113.0/24`, `/w/index.php`), named when the value is a
//! marker (`cookie:session=(absent)`); several parts are `name=value` separated by one space.
//! A value's bytes outside [`safe`] are `%HH`, so a value never holds a space, `(`, `~` or `#`
//! and no literal value reads as a marker. A hidden value ([`Hide`]) is `~` and the 16 hex
//! digits of its keyed hash; an address hidden or hashed (`[status] clients`) is `h:` and 16
//! hex digits, a masked one its network (`/prefix`). Text that does not name the key exactly
//! (hidden, hashed or masked) ends with the key's reference, ` #` and 16 hex digits, which key
//! operations turn back into the key. Text longer than its room is cut: `(cut)`, then the
//! reference. Written into any [`KeyText`] sink without allocating, so the reject path can
//! name keys into a fixed buffer.

mod hide;
mod secret;

use std::net::IpAddr;

pub use hide::Hide;
pub use secret::{seal, unseal};

use super::key::{KeyPart, VarMask};
use super::net::mask_ip;
use super::request::PreparedRequest;

/// Longest key text logs and key operations write (the status's lists keep less).
pub const TEXT_MAX: usize = 512;
/// ` #` and 16 hex digits.
const REFERENCE_LEN: usize = 18;
/// Ends a cut text (before its reference).
pub const CUT: &str = "(cut)";
/// An absent header, cookie or variable.
pub const ABSENT: &str = "(absent)";
/// An empty header, cookie or variable value.
pub const EMPTY: &str = "(empty)";
/// A `path` part of a request whose target the engine refused.
pub const BAD_TARGET: &str = "(bad-target)";

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

/// How one key is written.
#[derive(Clone, Copy, Debug)]
pub struct Style<'a> {
    /// Addresses.
    pub exposure: Exposure,
    /// Parts whose values are hidden.
    pub hide: &'a Hide,
    /// Keys the hashes of hidden values and addresses (the engine's).
    pub seed: u64,
    /// The key's reference ([`seal`] of its hash), written when the text does not name the key
    /// exactly; `None` when there is no key (a refused target, a limit that does not apply).
    pub reference: Option<u64>,
    /// Longest text.
    pub max: usize,
}

/// Where key text goes. Every byte written is printable ASCII.
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

/// Adapts a sink to `fmt::Write` (IPv6 addresses).
struct Fmt<'a, O: ?Sized>(&'a mut O);

impl<O: KeyText + ?Sized> std::fmt::Write for Fmt<'_, O> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.put(s.as_bytes());
        Ok(())
    }
}

/// FNV-1a of `bytes` from `seed`, never 0 (the summaries' tags).
pub fn fnv(seed: u64, bytes: &[u8]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64 ^ seed;
    for &b in bytes {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    h.max(1)
}

/// Whether byte `b` of a value is written as it is (else `%HH`): printable ASCII but space,
/// `"`, `#`, `%`, `'`, `(`, `)`, `\` and `~`.
pub fn safe(b: u8) -> bool {
    (0x21..0x7f).contains(&b)
        && !matches!(b, b'"' | b'#' | b'%' | b'\'' | b'(' | b')' | b'\\' | b'~')
}

/// Sixteen lowercase hex digits.
fn put_hex<O: KeyText + ?Sized>(out: &mut O, v: u64) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut b = [0u8; 16];
    for (i, d) in b.iter_mut().enumerate() {
        *d = HEX[(v >> (60 - 4 * i) & 15) as usize];
    }
    out.put(&b);
}

/// Writes `ip` masked to `prefix` bits (when shorter than the address) as `how` says, with
/// `/prefix` when masked; `None` is the local client, `local`. `seed` keys the hash. Whether
/// the text names fewer bits than `prefix` (hashed, or masked further).
pub fn write_ip<O: KeyText + ?Sized>(
    out: &mut O,
    ip: Option<IpAddr>,
    prefix: Option<u8>,
    how: Exposure,
    seed: u64,
) -> bool {
    use std::fmt::Write;
    let Some(ip) = ip else {
        out.put(b"local");
        return false;
    };
    let full = if ip.is_ipv4() { 32 } else { 128 };
    let want = prefix.unwrap_or(full).min(full);
    let mut bits = want;
    if how == Exposure::Masked {
        bits = bits.min(if ip.is_ipv4() { 24 } else { 48 });
    }
    let masked = mask_ip(ip, bits);
    if how == Exposure::Hashed {
        let octets = match masked {
            IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
            IpAddr::V6(a) => a.octets(),
        };
        out.put(b"h:");
        put_hex(out, secret::keyed(seed, &octets));
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
    how == Exposure::Hashed || bits < want
}

/// A sink that writes while there is room (a run of literal bytes may be cut, an escape or
/// a marker is written whole or not at all) and notes what the text lost.
struct Writer<'o, O: ?Sized> {
    out: &'o mut O,
    len: usize,
    room: usize,
    cut: bool,
    lossy: bool,
}

impl<O: KeyText + ?Sized> Writer<'_, O> {
    /// Writes `b` whole, or cuts the text here.
    fn atom(&mut self, b: &[u8]) {
        if self.cut || self.len + b.len() > self.room {
            self.cut = true;
            return;
        }
        self.out.put(b);
        self.len += b.len();
    }

    /// Writes what fits of `b` (literal bytes).
    fn run(&mut self, b: &[u8]) {
        if self.cut {
            return;
        }
        let n = b.len().min(self.room - self.len);
        self.out.put(&b[..n]);
        self.len += n;
        self.cut = n < b.len();
    }

    /// `v` with every byte outside [`safe`] as `%HH`.
    fn value(&mut self, v: &[u8]) {
        const HEX: &[u8; 16] = b"0123456789ABCDEF";
        let mut plain = 0;
        for (i, &b) in v.iter().enumerate() {
            if safe(b) {
                continue;
            }
            self.run(&v[plain..i]);
            self.atom(&[b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
            plain = i + 1;
        }
        self.run(&v[plain..]);
    }

    /// `~` and the keyed hash of `v`.
    fn hidden(&mut self, seed: u64, v: &[u8]) {
        let mut b = Vec16::default();
        b.put(b"~");
        put_hex(&mut b, secret::keyed(seed, v));
        self.atom(&b.0[..b.1]);
        self.lossy = true;
    }
}

impl<O: KeyText + ?Sized> KeyText for Writer<'_, O> {
    fn put(&mut self, bytes: &[u8]) {
        self.atom(bytes);
    }
}

/// A 17-byte buffer (`~` and 16 hex digits).
#[derive(Default)]
struct Vec16([u8; 17], usize);

impl KeyText for Vec16 {
    fn put(&mut self, b: &[u8]) {
        let n = b.len().min(17 - self.1);
        self.0[self.1..self.1 + n].copy_from_slice(&b[..n]);
        self.1 += n;
    }
}

/// A sink that keeps nothing (measuring).
struct Null;

impl KeyText for Null {
    fn put(&mut self, _: &[u8]) {}
}

/// Writes the key `parts` make of `req` as `style` says (module documentation). `path_ok` is
/// false when the engine refused the request's target: a `path` part is then `(bad-target)`.
pub fn write_key<O: KeyText + ?Sized>(
    out: &mut O,
    parts: &[KeyPart],
    req: &PreparedRequest<'_>,
    path_ok: bool,
    style: &Style<'_>,
) {
    let mut probe = Writer {
        out: &mut Null,
        len: 0,
        room: usize::MAX,
        cut: false,
        lossy: false,
    };
    emit(&mut probe, parts, req, path_ok, style);
    let reference = style
        .reference
        .filter(|_| probe.lossy || probe.len > style.max);
    let tail = if reference.is_some() {
        REFERENCE_LEN
    } else {
        0
    };
    let whole = probe.len + tail <= style.max;
    let room = if whole {
        usize::MAX
    } else {
        style.max.saturating_sub(tail + CUT.len())
    };
    let mut w = Writer {
        out: &mut *out,
        len: 0,
        room,
        cut: false,
        lossy: false,
    };
    emit(&mut w, parts, req, path_ok, style);
    if !whole {
        out.put(CUT.as_bytes());
    }
    if let Some(r) = reference {
        out.put(b" #");
        put_hex(out, r);
    }
}

fn emit<O: KeyText + ?Sized>(
    w: &mut Writer<'_, O>,
    parts: &[KeyPart],
    req: &PreparedRequest<'_>,
    path_ok: bool,
    style: &Style<'_>,
) {
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            w.atom(b" ");
        }
        let hidden = style.hide.hides(part);
        let (v, mask) = match part {
            KeyPart::Header(n) => (req.header(n), VarMask::default()),
            KeyPart::Cookie(n) => (req.cookie_named(n), VarMask::default()),
            KeyPart::Var { index, mask, .. } => (req.view.var(*index), *mask),
            KeyPart::Path if path_ok => (Some(req.path), VarMask::default()),
            KeyPart::Path => (None, VarMask::default()),
            KeyPart::Method => (Some(req.method), VarMask::default()),
            KeyPart::Ip { .. } | KeyPart::Global => (Some(&b""[..]), VarMask::default()),
        };
        // A marker is named even alone: `cookie:session=(absent)`.
        let ip = matches!(part, KeyPart::Ip { .. } | KeyPart::Global);
        let marker = v.is_none_or(|v| v.is_empty()) || hidden;
        if parts.len() > 1 || (!ip && marker) {
            put_name(w, part);
            w.atom(b"=");
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
                let how = if hidden {
                    Exposure::Hashed
                } else {
                    style.exposure
                };
                let lossy = write_ip(w, req.client, Some(prefix), how, style.seed);
                w.lossy |= lossy;
            }
            KeyPart::Global => w.atom(b"global"),
            KeyPart::Path if !path_ok => w.atom(BAD_TARGET.as_bytes()),
            _ => match v {
                None => w.atom(ABSENT.as_bytes()),
                Some(b"") => w.atom(EMPTY.as_bytes()),
                Some(v) => match mask.apply(v) {
                    Some((net, prefix)) if hidden => {
                        let mut b = [0u8; 17];
                        b[..16].copy_from_slice(&match net {
                            IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
                            IpAddr::V6(a) => a.octets(),
                        });
                        b[16] = prefix;
                        w.hidden(style.seed, &b);
                    }
                    Some((net, prefix)) => {
                        write_ip(w, Some(net), Some(prefix), Exposure::Full, style.seed);
                    }
                    None if hidden => w.hidden(style.seed, v),
                    None => w.value(v),
                },
            },
        }
    }
}

/// `ip`, `global`, `path`, `method`, `header:NAME`, `cookie:NAME`, `var:NAME` (the name's
/// bytes outside [`safe`] as `%HH`).
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
    let mut w = Writer {
        out,
        len: 0,
        room: usize::MAX,
        cut: false,
        lossy: false,
    };
    w.atom(kind);
    w.value(name);
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
    fn values_escape_every_byte_a_log_or_a_marker_could_change() {
        let mut out = String::new();
        let mut w = Writer {
            out: &mut out,
            len: 0,
            room: usize::MAX,
            cut: false,
            lossy: false,
        };
        w.value(b"a\"b\x01c d%(absent)~#'\\\xff/x=y");
        assert_eq!(out, "a%22b%01c%20d%25%28absent%29%7E%23%27%5C%FF/x=y");
    }
}
