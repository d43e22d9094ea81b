//! Limiter keys: the bytes that identify one bucket inside a zone.
//!
//! A [`KeySpec`] is a list of [`KeyPart`]s; [`KeySpec::build`] writes the
//! key for a request into a caller-provided buffer (typically
//! `[0u8; KEY_BUF_LEN]` on the stack) and never allocates.
//!
//! # Encoding
//!
//! The first byte is the format: `0x00` = plain, `0x01` = hashed (see below).
//! Then each part, in order, as a self-delimiting record:
//!
//! | part | bytes |
//! |------|-------|
//! | `ip` | `0x01`, family (`4`/`6`), prefix length, masked address (4 or 16 bytes); for the local client (no IP address): `0x01`, `0`, IPv4 prefix, IPv6 prefix |
//! | `global` | `0x02` |
//! | `header:NAME` | `0x03`, name length (u8), lowercase name, `0`=absent / `1`=present, value length (u32 BE), value |
//! | `cookie:NAME` | `0x04`, same layout as a header |
//! | `path` | `0x05`, length (u32 BE), normalized path |
//! | `method` | `0x06`, length (u32 BE), method |
//! | `var:NAME` | `0x07`, same layout as a header (the name, not its index: the encoding does not depend on the order of the policy's variables); a value masked to its network (`ipv4_prefix`/`ipv6_prefix` on a key without `ip`): presence byte `2`, family, prefix length, masked address |
//!
//! Every record starts with its kind and carries its own length, so no two
//! different part lists or values give the same bytes (`["a", "bc"]` can't
//! collide with `["ab", "c"]`, an absent header can't collide with an empty
//! one, `header:a` can't collide with `header:b`, `cookie:a` or `var:a`).
//!
//! # Long keys
//!
//! If the plain encoding does not fit in the buffer, the key becomes
//! `0x01`, the first `len - 17` bytes of the encoding, and a 128-bit hash of
//! the *whole* encoding, filling the buffer exactly. Keys that share a long
//! prefix but differ later still differ (with overwhelming probability). The
//! hash is ahash with fixed seeds: stable within one build of weir on one
//! platform (all workers sharing a table run the same binary), not across
//! versions, and not collision-resistant against an adversary who targets a
//! specific long key.
//!
//! # Hashing
//!
//! Fixed and `ip`-only keys are hashed as the bytes [`KeySpec::build`] writes. Other keys are
//! hashed as the sequence of their encoding's pieces (`KeySpec::hash_pieces`, never
//! truncated): the same parts and values give the same hash, and different ones differ as
//! their bytes do (each piece is one length-mixing `write`). A local zone hashes with its
//! table's hasher, a cluster zone with the cluster key hash, the same on every node.
//!
//! # Zone sharing
//!
//! Keys do not contain the limit's identity. Two limits that use the same
//! zone with the same key parts share buckets, exactly like two nginx
//! `limit_req` directives naming the same zone. Limits with different key
//! parts can never collide in a shared zone, because the part kinds (and
//! header/cookie names, IP prefix lengths) are part of the encoding.

use std::hash::{BuildHasher, Hasher};
use std::net::IpAddr;

use super::net::mask_ip;
use super::request::{CookieName, PreparedRequest};

/// Recommended key buffer size.
pub const KEY_BUF_LEN: usize = 256;
/// Smallest buffer [`KeySpec::build`] accepts.
pub const MIN_KEY_BUF: usize = 32;

const FORMAT_PLAIN: u8 = 0x00;
const FORMAT_HASHED: u8 = 0x01;
const HASH_LEN: usize = 16;

/// One component of a key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeyPart {
    /// Client address masked to a prefix (IPv4-mapped IPv6 counts as IPv4); the local client
    /// (a peer without an IP address) is one key of its own.
    Ip {
        /// IPv4 prefix length, 0..=32 (default 32).
        v4_prefix: u8,
        /// IPv6 prefix length, 0..=128 (default 64).
        v6_prefix: u8,
    },
    /// One bucket for everybody.
    Global,
    /// First occurrence of a header (lowercase name), raw value.
    Header(Box<[u8]>),
    /// First cookie with this name, raw value.
    Cookie(CookieName),
    /// Normalized path.
    Path,
    /// Request method.
    Method,
    /// A value the host supplies ([`super::request::RequestView::var`]), raw. A limit whose
    /// key has a var part that is absent or empty does not apply to the request.
    Var {
        /// As written after `var:`.
        name: Box<[u8]>,
        /// Its index among the policy's variables ([`super::config::CompiledPolicy::vars`]).
        index: usize,
        /// A value that is an IP address is keyed (and rendered) as its network.
        mask: VarMask,
    },
}

/// The prefixes a `var:` value that is an IP address is masked to (IPv4-mapped IPv6 counts as
/// IPv4); `None` keeps addresses of that family, like any other value, as they are.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VarMask {
    pub v4: Option<u8>,
    pub v6: Option<u8>,
}

impl VarMask {
    /// Whether no family is masked.
    pub fn is_none(&self) -> bool {
        self.v4.is_none() && self.v6.is_none()
    }

    /// `value`'s network and prefix length when it is an IP address of a masked family.
    pub fn apply(&self, value: &[u8]) -> Option<(IpAddr, u8)> {
        if self.is_none() {
            return None;
        }
        let ip = std::str::from_utf8(value).ok()?.parse::<IpAddr>().ok()?;
        let ip = ip.to_canonical();
        let prefix = if ip.is_ipv4() { self.v4 } else { self.v6 }?;
        Some((mask_ip(ip, prefix), prefix))
    }
}

impl KeyPart {
    /// `ip` with the default prefixes (/32, /64).
    pub const IP: KeyPart = KeyPart::Ip {
        v4_prefix: 32,
        v6_prefix: 64,
    };
}

/// An ordered list of key parts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeySpec {
    /// The parts, in order.
    pub parts: Box<[KeyPart]>,
}

impl KeySpec {
    /// A key made of these parts.
    pub fn new(parts: Vec<KeyPart>) -> Self {
        KeySpec {
            parts: parts.into_boxed_slice(),
        }
    }

    /// Write the key for `req` into `buf` and return its length; the key is
    /// `&buf[..len]`. Never allocates.
    ///
    /// # Panics
    /// If `buf` is shorter than [`MIN_KEY_BUF`].
    pub fn build(&self, req: &PreparedRequest<'_>, buf: &mut [u8]) -> usize {
        assert!(
            buf.len() >= MIN_KEY_BUF,
            "key buffer shorter than MIN_KEY_BUF"
        );
        let cap = buf.len();
        buf[0] = FORMAT_PLAIN;
        let mut w = BufSink {
            buf: &mut buf[1..],
            len: 0,
        };
        self.encode(req, &mut w);
        let total = w.len;
        if total < cap {
            return 1 + total;
        }
        // Too long: keep a prefix and append a hash of the whole encoding.
        let mut h = HashSink {
            a: ahash::RandomState::with_seeds(
                0x243f_6a88_85a3_08d3,
                0x1319_8a2e_0370_7344,
                0xa409_3822_299f_31d0,
                0x082e_fa98_ec4e_6c89,
            )
            .build_hasher(),
            b: ahash::RandomState::with_seeds(
                0x4528_21e6_38d0_1377,
                0xbe54_66cf_34e9_0c6c,
                0xc0ac_29b7_c97c_50dd,
                0x3f84_d5b5_b547_0917,
            )
            .build_hasher(),
        };
        self.encode(req, &mut h);
        h.a.write_usize(total);
        h.b.write_usize(total);
        buf[0] = FORMAT_HASHED;
        buf[cap - HASH_LEN..cap - 8].copy_from_slice(&h.a.finish().to_le_bytes());
        buf[cap - 8..].copy_from_slice(&h.b.finish().to_le_bytes());
        cap
    }

    /// The key for `req` hashed by `hasher` as the sequence of its encoding's pieces (see the
    /// module documentation), without writing the key out (never 0).
    #[inline]
    pub(crate) fn hash_pieces<H: Hasher>(&self, req: &PreparedRequest<'_>, hasher: H) -> u64 {
        let mut h = PieceHasher(hasher);
        self.encode(req, &mut h);
        h.0.finish().max(1)
    }

    /// For a key of one unmasked `var:` part: the variable's index and `hasher` fed with the
    /// pieces before the value (the same for every request). [`KeySpec::finish_var`] then gives
    /// what [`KeySpec::hash_pieces`] gives. `None` for any other key.
    pub(crate) fn var_prefix<H: Hasher>(&self, hasher: H) -> Option<(usize, H)> {
        let [KeyPart::Var { name, index, mask }] = &self.parts[..] else {
            return None;
        };
        if !mask.is_none() {
            return None;
        }
        let mut h = PieceHasher(hasher);
        put_name(&mut h, 0x07, name);
        Some((*index, h.0))
    }

    /// The hash of a [`KeySpec::var_prefix`] key whose variable has value `v`.
    #[inline]
    pub(crate) fn finish_var<H: Hasher>(prefix: H, v: &[u8]) -> u64 {
        let mut h = PieceHasher(prefix);
        put_len_bytes(&mut h, 1, v);
        h.0.finish().max(1)
    }

    /// Whether every `var:` part has a value that is not empty for `req` (the key applies).
    #[inline]
    pub fn vars_set(&self, req: &PreparedRequest<'_>) -> bool {
        self.parts.iter().all(|p| match p {
            KeyPart::Var { index, .. } => req.view.var(*index).is_some_and(|v| !v.is_empty()),
            _ => true,
        })
    }

    fn encode<S: Sink>(&self, req: &PreparedRequest<'_>, w: &mut S) {
        for part in self.parts.iter() {
            match part {
                // `req.client` is canonical (`PreparedRequest`): an IPv4-mapped address is
                // already IPv4. (Canonicalizing here again is work the compiler hoists out of
                // the loop over parts, for every key.)
                KeyPart::Ip {
                    v4_prefix,
                    v6_prefix,
                } => match req.client {
                    None => w.put(&[0x01, 0, *v4_prefix, *v6_prefix]),
                    Some(IpAddr::V4(a)) => {
                        let IpAddr::V4(m) = mask_ip(IpAddr::V4(a), *v4_prefix) else {
                            unreachable!()
                        };
                        let [a, b, c, d] = m.octets();
                        w.put(&[0x01, 4, *v4_prefix, a, b, c, d]);
                    }
                    Some(IpAddr::V6(a)) => {
                        let IpAddr::V6(m) = mask_ip(IpAddr::V6(a), *v6_prefix) else {
                            unreachable!()
                        };
                        let mut record = [
                            0x01, 6, *v6_prefix, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                        ];
                        record[3..].copy_from_slice(&m.octets());
                        w.put(&record);
                    }
                },
                KeyPart::Global => w.put(&[0x02]),
                KeyPart::Header(name) => {
                    put_named(w, 0x03, name, req.header(name));
                }
                KeyPart::Cookie(name) => {
                    put_named(w, 0x04, name, req.cookie_named(name));
                }
                KeyPart::Path => put_len_bytes(w, 0x05, req.path),
                KeyPart::Method => put_len_bytes(w, 0x06, req.method),
                KeyPart::Var { name, index, mask } => {
                    let value = req.view.var(*index);
                    match value.and_then(|v| mask.apply(v)) {
                        Some((net, prefix)) => put_masked(w, name, net, prefix),
                        None => put_named(w, 0x07, name, value),
                    }
                }
            }
        }
    }
}

/// The whole key of a [`KeySpec`] made of one `ip` part, as [`KeySpec::build`] writes it,
/// into a fixed buffer (no part loop, no length checks): its length. `client` is canonical
/// (`None`: the local client).
#[inline]
pub(crate) fn ip_key(
    client: Option<IpAddr>,
    v4_prefix: u8,
    v6_prefix: u8,
    out: &mut [u8; 20],
) -> usize {
    let Some(client) = client else {
        out[..5].copy_from_slice(&[FORMAT_PLAIN, 0x01, 0, v4_prefix, v6_prefix]);
        return 5;
    };
    match mask_ip(
        client,
        if client.is_ipv4() {
            v4_prefix
        } else {
            v6_prefix
        },
    ) {
        IpAddr::V4(m) => {
            // One 8-byte store, so the hash's 8-byte load of the key is forwarded from it
            // (a load spanning two narrower stores waits for them to reach the cache).
            let head = u32::from_le_bytes([FORMAT_PLAIN, 0x01, 4, v4_prefix]);
            let addr = u32::from_le_bytes(m.octets());
            out[..8].copy_from_slice(&(u64::from(head) | u64::from(addr) << 32).to_le_bytes());
            8
        }
        IpAddr::V6(m) => {
            out[..4].copy_from_slice(&[FORMAT_PLAIN, 0x01, 6, v6_prefix]);
            out[4..].copy_from_slice(&m.octets());
            20
        }
    }
}

fn put_named<S: Sink>(w: &mut S, kind: u8, name: &[u8], value: Option<&[u8]>) {
    put_name(w, kind, name);
    match value {
        None => w.put(&[0]),
        Some(v) => put_len_bytes(w, 1, v),
    }
}

/// What [`put_named`] writes before the value.
#[inline]
fn put_name<S: Sink>(w: &mut S, kind: u8, name: &[u8]) {
    // Names are validated at compile time to be at most 255 bytes.
    w.put(&[kind, name.len().min(255) as u8]);
    w.put(&name[..name.len().min(255)]);
}

/// A masked `var:` value: like [`put_named`] with presence byte `2`, then the family (`4`/`6`),
/// the prefix length and the network's address (4 or 16 bytes).
fn put_masked<S: Sink>(w: &mut S, name: &[u8], net: IpAddr, prefix: u8) {
    put_name(w, 0x07, name);
    match net {
        IpAddr::V4(a) => {
            let [a, b, c, d] = a.octets();
            w.put(&[2, 4, prefix, a, b, c, d]);
        }
        IpAddr::V6(a) => {
            w.put(&[2, 6, prefix]);
            w.put(&a.octets());
        }
    }
}

/// `lead`, the length of `v` (u32 BE), `v`: two pieces.
fn put_len_bytes<S: Sink>(w: &mut S, lead: u8, v: &[u8]) {
    let [a, b, c, d] = u32::try_from(v.len()).unwrap_or(u32::MAX).to_be_bytes();
    w.put(&[lead, a, b, c, d]);
    w.put(v);
}

trait Sink {
    fn put(&mut self, bytes: &[u8]);
}

/// Copies what fits and counts everything.
struct BufSink<'b> {
    buf: &'b mut [u8],
    len: usize,
}

impl Sink for BufSink<'_> {
    #[inline]
    fn put(&mut self, bytes: &[u8]) {
        // Nearly always fits: a copy whose length the caller usually knows at compile time.
        if let Some(dst) = self.buf.get_mut(self.len..self.len + bytes.len()) {
            copy_short(dst, bytes);
            self.len += bytes.len();
            return;
        }
        let start = self.len.min(self.buf.len());
        let room = self.buf.len() - start;
        let n = bytes.len().min(room);
        self.buf[start..start + n].copy_from_slice(&bytes[..n]);
        self.len += bytes.len();
    }
}

/// `dst.copy_from_slice(src)` (equal lengths) without a `memcpy` call for up to 16 bytes, the
/// usual size of a key's names and values: two overlapping fixed-size moves.
#[inline(always)]
fn copy_short(dst: &mut [u8], src: &[u8]) {
    let n = src.len();
    if n > 16 || n != dst.len() {
        dst.copy_from_slice(src);
    } else if n >= 8 {
        dst[..8].copy_from_slice(&src[..8]);
        dst[n - 8..].copy_from_slice(&src[n - 8..]);
    } else if n >= 4 {
        dst[..4].copy_from_slice(&src[..4]);
        dst[n - 4..].copy_from_slice(&src[n - 4..]);
    } else {
        for (d, s) in dst.iter_mut().zip(src) {
            *d = *s;
        }
    }
}

/// Each piece is one `write`.
struct PieceHasher<H>(H);

impl<H: Hasher> Sink for PieceHasher<H> {
    #[inline]
    fn put(&mut self, bytes: &[u8]) {
        self.0.write(bytes);
    }
}

struct HashSink {
    a: ahash::AHasher,
    b: ahash::AHasher,
}

impl Sink for HashSink {
    fn put(&mut self, bytes: &[u8]) {
        self.a.write(bytes);
        self.b.write(bytes);
    }
}

#[cfg(test)]
mod tests;
