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

use memchr::memmem::Finder;

use super::bytes::{self, find, find2, rfind};
use super::net::CidrSet;

mod cookie;
pub use cookie::*;
mod headers;
pub use headers::*;
mod client_ip;
pub use client_ip::*;
#[cfg(test)]
mod tests;

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
    /// Address of the directly connected peer; `None` when the connection has none (a
    /// unix-domain socket): the request then counts for the local client (see
    /// [`ClientIpResolver`]).
    fn peer(&self) -> Option<IpAddr>;
    /// The `nth` (0-based) occurrence of header `lowercase_name`, raw value.
    ///
    /// The engine reads the occurrences of a name in order, `nth` = 0, 1, 2 …, each walk
    /// starting at 0 within one evaluation. A host whose requests may carry many lines should
    /// answer `nth` right after `nth - 1` in O(1) (resume after the previous occurrence, or
    /// index by name): walking from the first line each time makes a request with n repeated
    /// lines cost O(n²).
    fn header_nth(&self, lowercase_name: &[u8], nth: usize) -> Option<&[u8]>;

    /// Calls `f(name, value)` for every header line, in the order received (names in any
    /// case), and returns `true`; or returns `false` without calling `f` when the host cannot
    /// enumerate its headers (the default). Hosts that implement it let the engine read every
    /// header a policy needs in one pass instead of one `header_nth` lookup per use.
    fn for_each_header<'s>(&'s self, f: &mut dyn FnMut(&'s [u8], &'s [u8])) -> bool {
        let _ = f;
        false
    }

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

    /// The value of variable `index`: the `index`-th name of [`crate::policy::Engine::var_names`]
    /// (the policy's `var:NAME` key parts), resolved by the host (an nginx variable, a Caddy
    /// placeholder); `None` when it has none (the default). Hosts map the names to their own
    /// handles once, when the engine is built: no name lookup per request.
    fn var(&self, index: usize) -> Option<&[u8]> {
        let _ = index;
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
    /// IPv6 turned into IPv4); `None` for the local client (a peer without an IP address
    /// that no trusted proxy resolved, see [`ClientIpResolver`]).
    pub client: Option<IpAddr>,
    /// The policy's headers, read in one pass ([`HeaderCache::NONE`] if not). Borrowed: the
    /// cache is large enough that copying it into every prepared request shows.
    pub headers: &'a HeaderCache<'a>,
}

impl<'a> PreparedRequest<'a> {
    /// Bundle a view with its normalized path, raw query and resolved client.
    #[inline]
    pub fn new(
        view: &'a dyn RequestView,
        path: &'a [u8],
        query: &'a [u8],
        client: Option<IpAddr>,
    ) -> Self {
        let client = client.map(|c| c.to_canonical());
        PreparedRequest::with_headers(view, path, query, client, &HeaderCache::NONE)
    }

    /// Like [`PreparedRequest::new`], with the headers already read in one pass and `client`
    /// already canonical (as [`ClientIpResolver`] gives it).
    #[inline]
    pub fn with_headers(
        view: &'a dyn RequestView,
        path: &'a [u8],
        query: &'a [u8],
        client: Option<IpAddr>,
        headers: &'a HeaderCache<'a>,
    ) -> Self {
        PreparedRequest {
            view,
            method: view.method(),
            path,
            query,
            client,
            headers,
        }
    }

    /// First occurrence of a header (lowercase name).
    #[inline]
    pub fn header(&self, lowercase_name: &[u8]) -> Option<&'a [u8]> {
        match self.headers.single(lowercase_name) {
            Some(v) => v,
            None => self.view.header(lowercase_name),
        }
    }

    /// Every occurrence of a header (lowercase name), in order.
    #[inline]
    pub fn header_values<'s>(&'s self, lowercase_name: &'s [u8]) -> Values<'s> {
        match self.headers.single(lowercase_name) {
            Some(one) => Values { one, more: None },
            None => Values {
                one: None,
                more: Some(self.view.header_values(lowercase_name)),
            },
        }
    }

    /// The first value of cookie `name` across all `Cookie` headers.
    #[inline]
    pub fn cookie(&self, name: &[u8]) -> Option<&'a [u8]> {
        self.first_cookie(name, NamedCookie::plain(name), None)
    }

    /// [`PreparedRequest::cookie`] with a prepared name (faster in long headers).
    #[inline]
    pub fn cookie_named(&self, name: &CookieName) -> Option<&'a [u8]> {
        // A name gets a finder iff it is plain.
        self.first_cookie(name, name.finder.is_some(), name.finder.as_deref())
    }

    #[inline]
    fn first_cookie(
        &self,
        name: &[u8],
        plain: bool,
        finder: Option<&Finder<'static>>,
    ) -> Option<&'a [u8]> {
        let find = |h: &'a [u8]| {
            NamedCookie {
                rest: h,
                name,
                plain,
                finder,
            }
            .next()
        };
        match self.headers.single(b"cookie") {
            Some(one) => one.and_then(find),
            None => self.view.header_values(b"cookie").find_map(find),
        }
    }

    /// Every value of cookie `name` across all `Cookie` headers, in order.
    pub fn cookie_values<'s>(&'s self, name: &'s [u8]) -> impl Iterator<Item = &'s [u8]> + 's {
        self.all_cookies(name, None)
    }

    /// [`PreparedRequest::cookie_values`] with a prepared name (faster in long headers).
    pub fn cookie_values_named<'s>(
        &'s self,
        name: &'s CookieName,
    ) -> impl Iterator<Item = &'s [u8]> + 's {
        self.all_cookies(name, name.finder.as_deref())
    }

    fn all_cookies<'s>(
        &'s self,
        name: &'s [u8],
        finder: Option<&'s Finder<'static>>,
    ) -> impl Iterator<Item = &'s [u8]> + 's {
        let plain = NamedCookie::plain(name);
        self.header_values(b"cookie")
            .flat_map(move |h| NamedCookie {
                rest: h,
                name,
                plain,
                finder,
            })
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
    /// Peer address; `None` for a connection without one (a unix-domain socket).
    pub peer: Option<IpAddr>,
    /// Headers in order, names lowercased.
    pub headers: Vec<(Vec<u8>, Vec<u8>)>,
    /// Values of the policy's variables by index ([`RequestView::var`]); `None`: absent.
    pub vars: Vec<Option<Vec<u8>>>,
}

impl OwnedRequest {
    /// New request without headers.
    pub fn new(method: &str, target: &str, peer: IpAddr) -> Self {
        OwnedRequest {
            method: method.as_bytes().to_vec(),
            target: target.as_bytes().to_vec(),
            peer: Some(peer),
            headers: Vec::new(),
            vars: Vec::new(),
        }
    }

    /// New request without headers over a connection without an IP address (a unix-domain
    /// socket).
    pub fn local(method: &str, target: &str) -> Self {
        OwnedRequest {
            peer: None,
            ..OwnedRequest::new(method, target, std::net::Ipv4Addr::UNSPECIFIED.into())
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

    /// Set variable `index` (its position in [`crate::policy::Engine::var_names`]). Builder
    /// style.
    pub fn var(mut self, index: usize, value: impl AsRef<[u8]>) -> Self {
        if self.vars.len() <= index {
            self.vars.resize(index + 1, None);
        }
        self.vars[index] = Some(value.as_ref().to_vec());
        self
    }
}

impl RequestView for OwnedRequest {
    fn method(&self) -> &[u8] {
        &self.method
    }
    fn var(&self, index: usize) -> Option<&[u8]> {
        self.vars.get(index)?.as_deref()
    }
    fn target(&self) -> &[u8] {
        &self.target
    }
    fn peer(&self) -> Option<IpAddr> {
        self.peer
    }
    fn for_each_header<'s>(&'s self, f: &mut dyn FnMut(&'s [u8], &'s [u8])) -> bool {
        for (n, v) in &self.headers {
            f(n, v);
        }
        true
    }
    fn header_nth(&self, lowercase_name: &[u8], nth: usize) -> Option<&[u8]> {
        self.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(lowercase_name))
            .nth(nth)
            .map(|(_, v)| &v[..])
    }
}
