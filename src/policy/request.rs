//! The request as hosts present it to the engine, the prepared view the
//! matchers and key builders work on, cookie parsing and client-IP
//! resolution through trusted proxies.
//!
//! Hosts (nginx module, Caddy plugin, Rust service, CLI) implement
//! [`RequestView`] over their own request structure without copying. The
//! engine normalizes the target (see `normalize`), resolves the client address
//! with [`ClientIpResolver`] and bundles everything into a
//! [`PreparedRequest`], which is what matchers and keys read.

use std::net::IpAddr;

use super::matcher::CidrSet;

/// Read-only access to one HTTP request, implemented by each host.
///
/// Header names passed in are always lowercase ASCII; implementations compare
/// case-insensitively (or store names lowercase). A header may occur several
/// times (e.g. `X-Forwarded-For`, or `Cookie` over HTTP/2): `header_nth`
/// returns the occurrences in the order received. A host that has already
/// folded repeated lines into one comma-joined value simply reports one
/// occurrence; both forms give the same result for list-valued headers.
pub trait RequestView {
    /// Request method, as sent (case-sensitive), e.g. `b"GET"`.
    fn method(&self) -> &[u8];
    /// Raw request target, as sent, e.g. `b"/a/../b?x=1"`.
    fn target(&self) -> &[u8];
    /// Address of the directly connected peer.
    fn peer(&self) -> IpAddr;
    /// The `nth` (0-based) occurrence of header `lowercase_name`, raw value.
    fn header_nth(&self, lowercase_name: &[u8], nth: usize) -> Option<&[u8]>;

    /// First occurrence of a header.
    fn header(&self, lowercase_name: &[u8]) -> Option<&[u8]> {
        self.header_nth(lowercase_name, 0)
    }

    /// Value of the first cookie named `name` (case-sensitive) found in the
    /// `Cookie` header(s). Hosts with their own cookie parser may override.
    fn cookie(&self, name: &[u8]) -> Option<&[u8]> {
        let mut nth = 0;
        while let Some(h) = self.header_nth(b"cookie", nth) {
            if let Some(v) = CookiePairs::new(h)
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v)
            {
                return Some(v);
            }
            nth += 1;
        }
        None
    }
}

impl dyn RequestView + '_ {
    /// All occurrences of a header, in order.
    pub fn header_values<'a>(&'a self, lowercase_name: &'a [u8]) -> HeaderValues<'a> {
        HeaderValues {
            view: self,
            name: lowercase_name,
            nth: 0,
        }
    }
}

/// Iterator over the occurrences of one header.
pub struct HeaderValues<'a> {
    view: &'a dyn RequestView,
    name: &'a [u8],
    nth: usize,
}

impl<'a> Iterator for HeaderValues<'a> {
    type Item = &'a [u8];
    fn next(&mut self) -> Option<&'a [u8]> {
        let v = self.view.header_nth(self.name, self.nth)?;
        self.nth += 1;
        Some(v)
    }
}

/// Iterator over the `name=value` pairs of one `Cookie` header value
/// (`a=1; b=2`). Whitespace around names and values is trimmed, a value in
/// double quotes is unquoted, pairs without `=` are skipped.
pub struct CookiePairs<'a> {
    rest: &'a [u8],
}

impl<'a> CookiePairs<'a> {
    /// Parse a `Cookie` header value.
    pub fn new(header: &'a [u8]) -> Self {
        CookiePairs { rest: header }
    }
}

impl<'a> Iterator for CookiePairs<'a> {
    type Item = (&'a [u8], &'a [u8]);
    fn next(&mut self) -> Option<Self::Item> {
        while !self.rest.is_empty() {
            let (pair, rest) = match self.rest.iter().position(|&b| b == b';') {
                Some(i) => (&self.rest[..i], &self.rest[i + 1..]),
                None => (self.rest, &self.rest[self.rest.len()..]),
            };
            self.rest = rest;
            if let Some(eq) = pair.iter().position(|&b| b == b'=') {
                let name = trim(&pair[..eq]);
                let mut value = trim(&pair[eq + 1..]);
                if value.len() >= 2 && value[0] == b'"' && value[value.len() - 1] == b'"' {
                    value = &value[1..value.len() - 1];
                }
                if !name.is_empty() {
                    return Some((name, value));
                }
            }
        }
        None
    }
}

/// Every value of cookie `name` across all `Cookie` headers, in order.
pub fn cookie_values<'a>(
    view: &'a dyn RequestView,
    name: &'a [u8],
) -> impl Iterator<Item = &'a [u8]> + 'a {
    view.header_values(b"cookie")
        .flat_map(CookiePairs::new)
        .filter(move |(n, _)| *n == name)
        .map(|(_, v)| v)
}

fn trim(s: &[u8]) -> &[u8] {
    let is_ws = |b: &u8| *b == b' ' || *b == b'\t';
    let start = s.iter().position(|b| !is_ws(b)).unwrap_or(s.len());
    let end = s.iter().rposition(|b| !is_ws(b)).map_or(start, |e| e + 1);
    &s[start..end]
}

/// What the matchers and key builders read: the host's view plus the parts
/// the engine has already worked out.
#[derive(Clone, Copy)]
pub struct PreparedRequest<'a> {
    /// Host view (headers, cookies, peer, raw target).
    pub view: &'a dyn RequestView,
    /// Method (same as `view.method()`).
    pub method: &'a [u8],
    /// Normalized path (nginx `$uri`: decoded, dot segments resolved, slashes
    /// merged), without the query.
    pub path: &'a [u8],
    /// Raw query string (after `?`, without it), not decoded.
    pub query: &'a [u8],
    /// Client address after trusted-proxy resolution, canonical (IPv4-mapped
    /// IPv6 turned into IPv4).
    pub client: IpAddr,
}

impl<'a> PreparedRequest<'a> {
    /// Bundle a view with its normalized path, raw query and resolved client.
    pub fn new(view: &'a dyn RequestView, path: &'a [u8], query: &'a [u8], client: IpAddr) -> Self {
        PreparedRequest {
            view,
            method: view.method(),
            path,
            query,
            client: client.to_canonical(),
        }
    }
}

impl std::fmt::Debug for PreparedRequest<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreparedRequest")
            .field("method", &String::from_utf8_lossy(self.method))
            .field("path", &String::from_utf8_lossy(self.path))
            .field("query", &String::from_utf8_lossy(self.query))
            .field("client", &self.client)
            .finish()
    }
}

// ---------------------------------------------------------------------------
// Owned request (tests, CLI)
// ---------------------------------------------------------------------------

/// A simple owned [`RequestView`] for tests and the CLI.
#[derive(Clone, Debug)]
pub struct OwnedRequest {
    /// Method bytes.
    pub method: Vec<u8>,
    /// Raw target.
    pub target: Vec<u8>,
    /// Peer address.
    pub peer: IpAddr,
    /// Headers in order, names lowercased.
    pub headers: Vec<(Vec<u8>, Vec<u8>)>,
}

impl OwnedRequest {
    /// New request without headers.
    pub fn new(method: &str, target: &str, peer: IpAddr) -> Self {
        OwnedRequest {
            method: method.as_bytes().to_vec(),
            target: target.as_bytes().to_vec(),
            peer,
            headers: Vec::new(),
        }
    }

    /// Append a header (name is lowercased). Builder style.
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((
            name.to_ascii_lowercase().into_bytes(),
            value.as_bytes().to_vec(),
        ));
        self
    }
}

impl RequestView for OwnedRequest {
    fn method(&self) -> &[u8] {
        &self.method
    }
    fn target(&self) -> &[u8] {
        &self.target
    }
    fn peer(&self) -> IpAddr {
        self.peer
    }
    fn header_nth(&self, lowercase_name: &[u8], nth: usize) -> Option<&[u8]> {
        self.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(lowercase_name))
            .nth(nth)
            .map(|(_, v)| &v[..])
    }
}

// ---------------------------------------------------------------------------
// Client IP resolution
// ---------------------------------------------------------------------------

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

struct Hops {
    buf: [Option<IpAddr>; MAX_HOPS],
    len: usize,
    start: usize,
}

impl Hops {
    fn push(&mut self, ip: Option<IpAddr>) {
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
    /// The client address for this request (canonical form).
    pub fn resolve(&self, view: &dyn RequestView) -> IpAddr {
        let peer = view.peer().to_canonical();
        if self.trusted.is_empty() || !self.trusted.contains(peer) {
            return peer;
        }
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
                    client = ip;
                    if !self.trusted.contains(ip) {
                        return ip;
                    }
                }
            }
        }
        client
    }
}

/// Split on `sep` outside double-quoted strings.
fn split_unquoted(s: &[u8], sep: u8) -> impl Iterator<Item = &[u8]> {
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
fn forwarded_for(element: &[u8]) -> Option<IpAddr> {
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

/// Parse `1.2.3.4`, `1.2.3.4:80`, `2001:db8::1`, `[2001:db8::1]`,
/// `[2001:db8::1]:80`.
fn parse_node(s: &[u8]) -> Option<IpAddr> {
    let s = std::str::from_utf8(s).ok()?;
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Some(ip.to_canonical());
    }
    if let Some(rest) = s.strip_prefix('[') {
        let end = rest.find(']')?;
        let tail = &rest[end + 1..];
        if !(tail.is_empty() || is_port(tail.strip_prefix(':')?)) {
            return None;
        }
        return rest[..end]
            .parse::<std::net::Ipv6Addr>()
            .ok()
            .map(|a| IpAddr::V6(a).to_canonical());
    }
    let (a, p) = s.rsplit_once(':')?;
    if !is_port(p) {
        return None;
    }
    a.parse::<std::net::Ipv4Addr>().ok().map(IpAddr::V4)
}

fn is_port(p: &str) -> bool {
    !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::matcher::IpNet;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn cookies() {
        let r = OwnedRequest::new("GET", "/", ip("192.0.2.1"))
            .header("Cookie", "a=1; session = \"xyz\" ;b")
            .header("cookie", "c=3; a=2");
        assert_eq!(r.cookie(b"a"), Some(&b"1"[..]));
        assert_eq!(r.cookie(b"session"), Some(&b"xyz"[..]));
        assert_eq!(r.cookie(b"c"), Some(&b"3"[..]));
        assert_eq!(r.cookie(b"b"), None);
        let v: &dyn RequestView = &r;
        let all: Vec<_> = cookie_values(v, b"a").collect();
        assert_eq!(all, vec![&b"1"[..], &b"2"[..]]);
    }

    #[test]
    fn nodes() {
        assert_eq!(parse_node(b"192.0.2.1"), Some(ip("192.0.2.1")));
        assert_eq!(parse_node(b"192.0.2.1:8080"), Some(ip("192.0.2.1")));
        assert_eq!(parse_node(b"[2001:db8::1]:80"), Some(ip("2001:db8::1")));
        assert_eq!(parse_node(b"[2001:db8::1]"), Some(ip("2001:db8::1")));
        assert_eq!(parse_node(b"::ffff:192.0.2.1"), Some(ip("192.0.2.1")));
        assert_eq!(parse_node(b"unknown"), None);
        assert_eq!(parse_node(b"_hidden"), None);
        assert_eq!(parse_node(b"[2001:db8::1]x"), None);
    }

    fn resolver(source: ForwardedSource) -> ClientIpResolver {
        let mut trusted = CidrSet::new();
        trusted.push(IpNet::parse("10.0.0.0/8").unwrap());
        trusted.push(IpNet::parse("2001:db8:ffff::/48").unwrap());
        ClientIpResolver { trusted, source }
    }

    #[test]
    fn forwarded_rfc7239() {
        let r = resolver(ForwardedSource::Forwarded);
        let req = OwnedRequest::new("GET", "/", ip("10.0.0.1")).header(
            "Forwarded",
            "for=198.51.100.9, for=\"[2001:db8::17]:4711\";proto=https, For=10.1.1.1;by=10.0.0.1",
        );
        assert_eq!(r.resolve(&req), ip("2001:db8::17"));
        let req = OwnedRequest::new("GET", "/", ip("10.0.0.1"))
            .header("Forwarded", "for=198.51.100.9, for=_hidden, for=10.1.1.1");
        assert_eq!(r.resolve(&req), ip("10.1.1.1"));
        // XFF is ignored in Forwarded mode.
        let req =
            OwnedRequest::new("GET", "/", ip("10.0.0.1")).header("X-Forwarded-For", "1.2.3.4");
        assert_eq!(r.resolve(&req), ip("10.0.0.1"));
    }

    #[test]
    fn xff_repeated_lines_and_limits() {
        let r = resolver(ForwardedSource::List(b"x-forwarded-for".to_vec().into()));
        let req = OwnedRequest::new("GET", "/", ip("10.0.0.1"))
            .header("X-Forwarded-For", "203.0.113.5, 198.51.100.1")
            .header("X-Forwarded-For", "10.9.9.9");
        assert_eq!(r.resolve(&req), ip("198.51.100.1"));
        let req = OwnedRequest::new("GET", "/", ip("10.0.0.1"))
            .header("X-Forwarded-For", "10.3.3.3, 10.2.2.2");
        assert_eq!(r.resolve(&req), ip("10.3.3.3"));
        let req = OwnedRequest::new("GET", "/", ip("10.0.0.1"))
            .header("X-Forwarded-For", "1.1.1.1, garbage, 10.2.2.2");
        assert_eq!(r.resolve(&req), ip("10.2.2.2"));
        let long = (0..100)
            .map(|i| format!("10.0.0.{}", i % 250))
            .collect::<Vec<_>>()
            .join(", ");
        let req = OwnedRequest::new("GET", "/", ip("10.0.0.1"))
            .header("X-Forwarded-For", &format!("1.1.1.1, {long}"));
        // Only the rightmost MAX_HOPS are examined; all trusted → leftmost kept.
        assert!(r.trusted.contains(r.resolve(&req)));
    }
}
