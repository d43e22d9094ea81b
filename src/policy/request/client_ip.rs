//! Client IP resolution: the peer, or the first untrusted hop of a forwarding chain from trusted proxies.

use super::*;

/// Which header carries the forwarding chain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ForwardedSource {
    /// A comma-separated address list such as `X-Forwarded-For` or
    /// `X-Real-IP` (lowercase header name). Entries may carry a port
    /// (`192.0.2.1:4711`, `[2001:db8::1]:4711`).
    List(Box<[u8]>),
    /// RFC 7239 `Forwarded` (`for=` parameters).
    Forwarded,
}

/// Maximum number of hops examined (the rightmost ones).
pub const MAX_HOPS: usize = 32;

/// Resolves the client address like nginx `real_ip_recursive on`.
///
/// * A peer without an IP address (a unix-domain socket) is the local client
///   (`None`); it is trusted iff `trusted` holds `unix:`.
/// * If the peer is not in `trusted`, the peer is the client; headers are
///   ignored (anyone can send them).
/// * Otherwise the chain is walked right to left, skipping addresses that are
///   themselves trusted; the first untrusted address is the client.
/// * If an entry cannot be parsed (garbage, `unknown`, an obfuscated
///   RFC 7239 identifier, an element without `for=`), the walk stops and the
///   last good address (a trusted hop) is the client.
/// * If every address is trusted, the leftmost one is the client.
/// * Only the rightmost [`MAX_HOPS`] entries are examined.
#[derive(Clone, Debug)]
pub struct ClientIpResolver {
    /// Trusted proxy networks.
    pub trusted: CidrSet,
    /// Where the chain is read from.
    pub source: ForwardedSource,
}

impl Default for ClientIpResolver {
    fn default() -> Self {
        ClientIpResolver {
            trusted: CidrSet::new(),
            source: ForwardedSource::List(b"x-forwarded-for".to_vec().into_boxed_slice()),
        }
    }
}

pub(super) struct Hops {
    pub(super) buf: [Option<IpAddr>; MAX_HOPS],
    pub(super) len: usize,
    pub(super) start: usize,
}

impl Hops {
    pub(super) fn push(&mut self, ip: Option<IpAddr>) {
        if self.len < MAX_HOPS {
            self.buf[(self.start + self.len) % MAX_HOPS] = ip;
            self.len += 1;
        } else {
            self.buf[self.start] = ip;
            self.start = (self.start + 1) % MAX_HOPS;
        }
    }
}

impl ClientIpResolver {
    /// The client address for this request (canonical form; `None`: the local client).
    pub fn resolve(&self, view: &dyn RequestView) -> Option<IpAddr> {
        self.resolve_cached(view, &HeaderCache::NONE)
    }

    /// The header the resolver reads, if it reads any (it does only behind trusted proxies).
    pub fn header_name(&self) -> Option<&[u8]> {
        if self.trusted.is_empty() {
            return None;
        }
        Some(match &self.source {
            ForwardedSource::List(name) => name,
            ForwardedSource::Forwarded => b"forwarded",
        })
    }

    /// [`Self::resolve`], reading the forwarding header from `cache` when it has it.
    pub fn resolve_cached(
        &self,
        view: &dyn RequestView,
        cache: &HeaderCache<'_>,
    ) -> Option<IpAddr> {
        let peer = view.peer().map(|p| p.to_canonical());
        if self.trusted.is_empty() || !self.trusted.contains_peer(peer) {
            return peer;
        }
        if let ForwardedSource::List(name) = &self.source {
            if let Some(one) = cache.single(name) {
                return self.walk_lines(peer, one.as_slice());
            }
            // Nearly always one header line (a few at most): walk the lines right to left in
            // place, no buffering.
            let mut lines: [&[u8]; FAST_LINES] = [&[]; FAST_LINES];
            let mut n = 0;
            while let Some(v) = view.header_nth(name, n) {
                if n == FAST_LINES {
                    return self.resolve_buffered(view, peer);
                }
                lines[n] = v;
                n += 1;
            }
            return self.walk_lines(peer, &lines[..n]);
        }
        self.resolve_buffered(view, peer)
    }

    /// The `X-Forwarded-For`-style walk over `lines` (in arrival order), right to left: the
    /// same answer as [`Self::resolve_buffered`] without collecting the hops first.
    pub(super) fn walk_lines(&self, peer: Option<IpAddr>, lines: &[&[u8]]) -> Option<IpAddr> {
        if let [line] = lines {
            if let Some(client) = self.walk_v4_line(line) {
                return Some(client);
            }
        }
        let mut client = peer;
        let mut seen = 0;
        for line in lines.iter().rev() {
            let mut rest: &[u8] = line;
            loop {
                // Entries are short: a word-at-a-time scan beats a vectorized search's setup.
                let (entry, more) = match rfind(rest, b',') {
                    Some(i) => (&rest[i + 1..], Some(&rest[..i])),
                    None => (rest, None),
                };
                let entry = trim(entry);
                if !entry.is_empty() {
                    if seen == MAX_HOPS {
                        // Only the rightmost MAX_HOPS entries count; all of them were trusted.
                        return client;
                    }
                    seen += 1;
                    match parse_node(entry) {
                        None => return client,
                        Some(ip) => {
                            client = Some(ip);
                            if !self.trusted.contains(ip) {
                                return client;
                            }
                        }
                    }
                }
                match more {
                    Some(m) => rest = m,
                    None => break,
                }
            }
        }
        client
    }

    /// [`Self::walk_lines`] for one line of plain dotted-quad IPv4 entries separated by commas
    /// and whitespace, parsed right to left in place: `None` as soon as the line holds
    /// anything else (the general walk then decides).
    #[inline]
    pub(super) fn walk_v4_line(&self, line: &[u8]) -> Option<IpAddr> {
        let is_ws = |b: u8| b == b' ' || b == b'\t';
        let mut end = line.len();
        // Set by the first entry (the loop returns `None` unless it parses one).
        let mut client = IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED);
        for _ in 0..MAX_HOPS {
            while end > 0 && is_ws(line[end - 1]) {
                end -= 1;
            }
            let (ip, mut start) = parse_v4_back(&line[..end])?;
            while start > 0 && is_ws(line[start - 1]) {
                start -= 1;
            }
            // The entry must end at a comma or the line's start.
            let comma = match start.checked_sub(1) {
                Some(comma) if line[comma] != b',' => return None,
                comma => comma,
            };
            client = IpAddr::V4(ip);
            if !self.trusted.contains_v4(ip) {
                return Some(client);
            }
            match comma {
                Some(comma) => end = comma,
                None => return Some(client),
            }
        }
        // Only the rightmost MAX_HOPS entries count; all of them were trusted.
        Some(client)
    }

    /// The general walk: collect the rightmost [`MAX_HOPS`] hops, then walk them.
    #[inline(never)]
    pub(super) fn resolve_buffered(
        &self,
        view: &dyn RequestView,
        peer: Option<IpAddr>,
    ) -> Option<IpAddr> {
        let mut hops = Hops {
            buf: [None; MAX_HOPS],
            len: 0,
            start: 0,
        };
        match &self.source {
            ForwardedSource::List(name) => {
                for value in view.header_values(name) {
                    for entry in value.split(|&b| b == b',') {
                        let entry = trim(entry);
                        if !entry.is_empty() {
                            hops.push(parse_node(entry));
                        }
                    }
                }
            }
            ForwardedSource::Forwarded => {
                for value in view.header_values(b"forwarded") {
                    for element in split_unquoted(value, b',') {
                        if trim(element).is_empty() {
                            continue;
                        }
                        hops.push(forwarded_for(element));
                    }
                }
            }
        }
        let mut client = peer;
        for i in (0..hops.len).rev() {
            match hops.buf[(hops.start + i) % MAX_HOPS] {
                None => return client,
                Some(ip) => {
                    client = Some(ip);
                    if !self.trusted.contains(ip) {
                        return client;
                    }
                }
            }
        }
        client
    }
}

/// Split on `sep` outside double-quoted strings.
pub(super) fn split_unquoted(s: &[u8], sep: u8) -> impl Iterator<Item = &[u8]> {
    let mut rest = Some(s);
    std::iter::from_fn(move || {
        let r = rest?;
        let mut quoted = false;
        let mut escaped = false;
        for (i, &b) in r.iter().enumerate() {
            if escaped {
                escaped = false;
            } else if quoted && b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                quoted = !quoted;
            } else if b == sep && !quoted {
                rest = Some(&r[i + 1..]);
                return Some(&r[..i]);
            }
        }
        rest = None;
        Some(r)
    })
}

/// The address in the `for=` parameter of one RFC 7239 element.
pub(super) fn forwarded_for(element: &[u8]) -> Option<IpAddr> {
    for pair in split_unquoted(element, b';') {
        let pair = trim(pair);
        let Some(eq) = pair.iter().position(|&b| b == b'=') else {
            continue;
        };
        if !trim(&pair[..eq]).eq_ignore_ascii_case(b"for") {
            continue;
        }
        let mut v = trim(&pair[eq + 1..]);
        if v.len() >= 2 && v[0] == b'"' && v[v.len() - 1] == b'"' {
            v = &v[1..v.len() - 1];
        }
        return parse_node(v);
    }
    None
}

/// Header lines of a forwarding list walked in place (more take the buffered walk).
pub(super) const FAST_LINES: usize = 4;

/// Parse `1.2.3.4`, `1.2.3.4:80`, `2001:db8::1`, `[2001:db8::1]`,
/// `[2001:db8::1]:80`.
#[inline]
pub(super) fn parse_node(s: &[u8]) -> Option<IpAddr> {
    // Fast path for the common IPv4 forms; anything else (or anything unusual) goes through
    // the general parser, which has the final word.
    if let Some((a, rest)) = parse_v4_prefix(s) {
        if rest.is_empty() || (rest[0] == b':' && is_port(&rest[1..])) {
            return Some(IpAddr::V4(a));
        }
    } else if let Some(a) = parse_v6_plain(s) {
        return Some(IpAddr::V6(a).to_canonical());
    }
    parse_node_slow(s)
}

/// A bare IPv6 address of hex groups with at most one `::` (no embedded IPv4, no brackets):
/// accepts only what `Ipv6Addr`'s parser accepts, with the same value; `None` for anything
/// else (the general parser then decides).
#[inline]
pub(super) fn parse_v6_plain(s: &[u8]) -> Option<std::net::Ipv6Addr> {
    let (mut groups, mut n) = ([0u16; 8], 0usize);
    let mut gap: Option<usize> = None;
    let mut i = 0;
    if s.starts_with(b"::") {
        gap = Some(0);
        i = 2;
    }
    while i < s.len() {
        let start = i;
        let mut v = 0u16;
        while i < s.len() && i - start < 4 {
            let d = match s[i] {
                b @ b'0'..=b'9' => b - b'0',
                b @ b'a'..=b'f' => b - b'a' + 10,
                b @ b'A'..=b'F' => b - b'A' + 10,
                _ => break,
            };
            v = v << 4 | d as u16;
            i += 1;
        }
        if i == start || n == 8 {
            return None;
        }
        groups[n] = v;
        n += 1;
        if i == s.len() {
            break;
        }
        if s[i] != b':' {
            return None;
        }
        i += 1;
        if s.get(i) == Some(&b':') {
            if gap.is_some() {
                return None;
            }
            gap = Some(n);
            i += 1;
        } else if i == s.len() {
            return None;
        }
    }
    let groups = match gap {
        None if n == 8 => groups,
        Some(g) if n <= 7 => {
            let mut out = [0u16; 8];
            out[..g].copy_from_slice(&groups[..g]);
            out[8 - (n - g)..].copy_from_slice(&groups[g..n]);
            out
        }
        _ => return None,
    };
    Some(std::net::Ipv6Addr::from(groups))
}

/// A dotted-quad IPv4 address at the start of `s`, accepting exactly what `Ipv4Addr`'s parser
/// accepts (1–3 digits per octet, at most 255, no leading zero), and the bytes after it.
#[inline]
pub(super) fn parse_v4_prefix(s: &[u8]) -> Option<(std::net::Ipv4Addr, &[u8])> {
    // The longest address is 15 bytes; the parse reads a zero-padded copy of the first 16, so
    // it needs no bounds checks (padding is not a digit or a dot, so it ends the address).
    let b = first16(s);
    let digit = |i: usize| b[i & 15].wrapping_sub(b'0');
    let (mut addr, mut i) = (0u32, 0usize);
    for k in 0..4 {
        if k > 0 {
            if b[i & 15] != b'.' {
                return None;
            }
            i += 1;
        }
        // An octet starts at 12 at the latest, so `i + 3 <= 15`: no index wraps.
        let (d0, d1, d2) = (digit(i), digit(i + 1), digit(i + 2));
        let (v, len) = match (d0 <= 9, d1 <= 9, d2 <= 9) {
            (false, _, _) => return None,
            (true, false, _) => (d0 as u32, 1),
            // More than one digit: no leading zero.
            _ if d0 == 0 => return None,
            (true, true, false) => (d0 as u32 * 10 + d1 as u32, 2),
            (true, true, true) => {
                let v = d0 as u32 * 100 + d1 as u32 * 10 + d2 as u32;
                if v > 255 || digit(i + 3) <= 9 {
                    return None;
                }
                (v, 3)
            }
        };
        addr = addr << 8 | v;
        i += len;
    }
    // Every byte read up to `i` was a digit or a dot, so it came from `s`: `i <= s.len()`.
    Some((std::net::Ipv4Addr::from(addr), &s[i..]))
}

/// The dotted-quad IPv4 address that ends `s` (`1.2.3.4`, octets without leading zeros) and
/// where it starts; `None` if `s` does not end in one. The byte before the address, if any, is
/// not a digit.
#[inline]
pub(super) fn parse_v4_back(s: &[u8]) -> Option<(std::net::Ipv4Addr, usize)> {
    // Cheap refusal of what cannot end in an address (IPv6 above all): the shortest address
    // is 7 bytes, and the last octet follows a dot.
    let n = s.len();
    if n < 7 || (s[n - 2] != b'.' && s[n - 3] != b'.' && s[n - 4] != b'.') {
        return None;
    }
    // The longest address is 15 bytes; the parse reads the last 16 behind 16 zero bytes, so it
    // needs no bounds checks (a zero is not a digit or a dot, so it ends the address).
    let b = last16_of_32(s);
    let digit = |i: usize| b[i & 31].wrapping_sub(b'0');
    let (mut addr, mut i) = (0u32, 31usize);
    for k in 0..4 {
        if k > 0 {
            if b[i & 31] != b'.' {
                return None;
            }
            i -= 1;
        }
        // An octet ends at 16 at the earliest, so `i - 3 >= 13`: no index wraps.
        let (d0, d1, d2) = (digit(i), digit(i - 1), digit(i - 2));
        let (v, len) = match (d0 <= 9, d1 <= 9, d2 <= 9) {
            (false, _, _) => return None,
            (true, false, _) => (d0 as u32, 1),
            // More than one digit: no leading zero.
            (true, true, false) if d1 == 0 => return None,
            (true, true, false) => (d1 as u32 * 10 + d0 as u32, 2),
            (true, true, true) => {
                let v = d2 as u32 * 100 + d1 as u32 * 10 + d0 as u32;
                if d2 == 0 || v > 255 || digit(i - 3) <= 9 {
                    return None;
                }
                (v, 3)
            }
        };
        addr |= v << (8 * k);
        i -= len;
    }
    // Every byte read after 31 - len was a digit or a dot, so it came from `s`.
    let len = 31 - i;
    Some((std::net::Ipv4Addr::from(addr), s.len() - len))
}

/// The last 16 bytes of `s` at the end of 32 bytes, zeros in front.
#[inline]
pub(super) fn last16_of_32(s: &[u8]) -> [u8; 32] {
    let mut b = [0u8; 32];
    b[16..].copy_from_slice(&last16(s).to_le_bytes());
    b
}

/// The first 16 bytes of `s`, zero-padded.
#[inline]
pub(super) fn first16(s: &[u8]) -> [u8; 16] {
    let n = s.len();
    if n >= 16 {
        return s[..16].try_into().unwrap();
    }
    // `last16` puts them at the end; shift them to the front (all of it out when `s` is empty).
    let shift = 8 * (16 - n) as u32;
    last16(s).checked_shr(shift).unwrap_or(0).to_le_bytes()
}

/// The last 16 bytes of `s` as a little-endian number (`s`'s last byte is the most significant),
/// zero-padded below when `s` is shorter: built in registers from at most two loads and
/// stored once by the callers. Filling a buffer with several overlapping copies instead makes
/// the next wider load of it wait for those stores (a failed store forward, measured here as a
/// fifth of the X-Forwarded-For walk).
#[inline(always)]
pub(super) fn last16(s: &[u8]) -> u128 {
    let n = s.len();
    let word = |at: usize| u64::from_le_bytes(s[at..at + 8].try_into().unwrap()) as u128;
    let half = |at: usize| u32::from_le_bytes(s[at..at + 4].try_into().unwrap()) as u128;
    if n >= 16 {
        u128::from_le_bytes(s[n - 16..].try_into().unwrap())
    } else if n >= 8 {
        // The two words overlap when n < 16; the overlapping bytes are equal, so OR keeps them.
        word(n - 8) << 64 | word(0) << (8 * (16 - n))
    } else if n >= 4 {
        half(n - 4) << 96 | half(0) << (8 * (16 - n))
    } else {
        s.iter().fold(0, |v, &c| v >> 8 | u128::from(c) << 120)
    }
}

#[inline(never)]
pub(super) fn parse_node_slow(s: &[u8]) -> Option<IpAddr> {
    let s = std::str::from_utf8(s).ok()?;
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Some(ip.to_canonical());
    }
    if let Some(rest) = s.strip_prefix('[') {
        let end = rest.find(']')?;
        let tail = &rest[end + 1..];
        if !(tail.is_empty() || is_port(tail.strip_prefix(':')?.as_bytes())) {
            return None;
        }
        return rest[..end]
            .parse::<std::net::Ipv6Addr>()
            .ok()
            .map(|a| IpAddr::V6(a).to_canonical());
    }
    let (a, p) = s.rsplit_once(':')?;
    if !is_port(p.as_bytes()) {
        return None;
    }
    a.parse::<std::net::Ipv4Addr>().ok().map(IpAddr::V4)
}

pub(super) fn is_port(p: &[u8]) -> bool {
    !p.is_empty() && p.len() <= 5 && p.iter().all(u8::is_ascii_digit)
}
