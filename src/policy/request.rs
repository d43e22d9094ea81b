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
            let (pair, rest) = match find(self.rest, b';') {
                Some(i) => (&self.rest[..i], &self.rest[i + 1..]),
                None => (self.rest, &self.rest[self.rest.len()..]),
            };
            self.rest = rest;
            if let Some(eq) = find(pair, b'=') {
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

/// The values of cookie `name` in one `Cookie` header value, in order: the same as
/// [`CookiePairs`] filtered by name, but a pair whose name differs is only split off, not
/// parsed.
struct NamedCookie<'a, 'n> {
    rest: &'a [u8],
    name: &'n [u8],
    /// `name` is non-empty, has no `=` or `;` and no surrounding whitespace, so a pair
    /// `ws* name ws* = value` is exactly a pair named `name`.
    plain: bool,
    /// A prepared search for `name` (only when `plain`): long headers are searched for the
    /// name instead of being walked pair by pair.
    finder: Option<&'n Finder<'static>>,
}

/// Headers at least this long are searched with [`CookieName`]'s finder; shorter ones are
/// walked pair by pair, which is cheaper for the two or three pairs they hold.
const FINDER_MIN_LEN: usize = 80;

/// A cookie name as policies use it (keys, matchers), prepared once for fast lookups in
/// long `Cookie` headers. Compares and dereferences as its bytes.
#[derive(Clone)]
pub struct CookieName {
    name: Box<[u8]>,
    /// Set iff the name is plain (see [`NamedCookie::plain`]); boxed, as it is large.
    finder: Option<Box<Finder<'static>>>,
}

impl CookieName {
    /// Prepares `name` (any bytes; only plain names get a finder).
    pub fn new(name: &[u8]) -> Self {
        CookieName {
            name: name.into(),
            finder: NamedCookie::plain(name).then(|| Box::new(Finder::new(name).into_owned())),
        }
    }
}

impl std::ops::Deref for CookieName {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.name
    }
}

impl From<&[u8]> for CookieName {
    fn from(name: &[u8]) -> Self {
        CookieName::new(name)
    }
}

impl From<Vec<u8>> for CookieName {
    fn from(name: Vec<u8>) -> Self {
        CookieName::new(&name)
    }
}

impl From<Box<[u8]>> for CookieName {
    fn from(name: Box<[u8]>) -> Self {
        CookieName::new(&name)
    }
}

impl PartialEq for CookieName {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl Eq for CookieName {}

impl std::fmt::Debug for CookieName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(&self.name))
    }
}

impl NamedCookie<'_, '_> {
    fn plain(name: &[u8]) -> bool {
        let ws = |b: &u8| *b == b' ' || *b == b'\t';
        match (name.first(), name.last()) {
            (Some(first), Some(last)) => {
                !ws(first) && !ws(last) && find2(name, b'=', b';').is_none()
            }
            _ => false,
        }
    }
}

impl<'a> Iterator for NamedCookie<'a, '_> {
    type Item = &'a [u8];
    fn next(&mut self) -> Option<&'a [u8]> {
        if !self.plain {
            while !self.rest.is_empty() {
                let (pair, rest) = match find(self.rest, b';') {
                    Some(i) => (&self.rest[..i], &self.rest[i + 1..]),
                    None => (self.rest, &self.rest[self.rest.len()..]),
                };
                self.rest = rest;
                if let Some((n, v)) = CookiePairs::new(pair).next() {
                    if n == self.name {
                        return Some(v);
                    }
                }
            }
            return None;
        }
        // A pair is named `name` iff it reads `ws* name ws* = …` (the name has no `;`, `=` or
        // surrounding whitespace).
        let name = self.name;
        let mut rest = self.rest;
        if let Some(finder) = self.finder.filter(|_| rest.len() >= FINDER_MIN_LEN) {
            return self.search(finder);
        }
        // Short headers: each pair's start is tested before its end is looked for, so only
        // the pairs of other names are scanned to their `;`.
        while !rest.is_empty() {
            let p = trim_start(rest);
            if p.len() > name.len() && p[0] == name[0] && bytes::starts_with(p, name) {
                if let Some(v) = trim_start(&p[name.len()..]).strip_prefix(b"=") {
                    return Some(self.take_value(v));
                }
            }
            rest = match find(p, b';') {
                Some(i) => &p[i + 1..],
                None => &p[p.len()..],
            };
        }
        self.rest = rest;
        None
    }
}

impl<'a> NamedCookie<'a, '_> {
    /// The finder's walk (out of line: the pair walk of short headers stays compact).
    #[inline(never)]
    fn search(&mut self, finder: &Finder<'_>) -> Option<&'a [u8]> {
        // Each occurrence of the name, left to right, is the first pair so named iff only
        // whitespace separates it from the header's start or the `;` before it.
        let rest = self.rest;
        let mut from = 0;
        while let Some(off) = finder.find(&rest[from..]) {
            let i = from + off;
            from = i + 1;
            let before = rest[..i].iter().rposition(|&b| b != b' ' && b != b'\t');
            if before.is_some_and(|b| rest[b] != b';') {
                continue;
            }
            if let Some(v) = trim_start(&rest[i + self.name.len()..]).strip_prefix(b"=") {
                return Some(self.take_value(v));
            }
        }
        self.rest = &rest[rest.len()..];
        None
    }

    /// The value starting at `v` (just after its `=`), trimmed and unquoted; the iterator
    /// continues after it.
    #[inline]
    fn take_value(&mut self, v: &'a [u8]) -> &'a [u8] {
        let (v, next) = match find(v, b';') {
            Some(i) => (&v[..i], &v[i + 1..]),
            None => (v, &v[v.len()..]),
        };
        self.rest = next;
        let mut value = trim(v);
        if value.len() >= 2 && value[0] == b'"' && value[value.len() - 1] == b'"' {
            value = &value[1..value.len() - 1];
        }
        value
    }
}

fn trim_start(s: &[u8]) -> &[u8] {
    let start = s
        .iter()
        .position(|&b| b != b' ' && b != b'\t')
        .unwrap_or(s.len());
    &s[start..]
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

/// Most header names a [`HeaderPlan`] reads in its one pass (further names are looked up
/// through the host's view each time).
pub const MAX_PLANNED_HEADERS: usize = 8;

/// The header names (lowercase) a policy reads, fixed when the engine is built, so that one
/// pass over the request's headers finds all of them.
#[derive(Clone, Debug)]
pub struct HeaderPlan {
    names: Vec<Box<[u8]>>,
    /// Per name, the matcher that finds it among the host's header names.
    quick: Vec<NameMatcher>,
    /// Per name length (the last entry: that length or more), the planned names of that
    /// length as bits: a header line is compared only with names of its own length.
    by_len: [u8; BY_LEN],
}

/// Name lengths [`HeaderPlan::by_len`] tells apart.
const BY_LEN: usize = 64;

/// A lowercase header name prepared for case-insensitive comparison 8 bytes at a time: a byte
/// `x` of the candidate matches the name's byte `w` iff `x | m == w`, where `m` is `0x20` for
/// a letter (either case matches) and `0` otherwise (exact).
#[derive(Clone, Debug)]
struct NameMatcher {
    len: usize,
    /// The first two (name word, mask word) pairs, inline: names of up to 16 bytes (nearly
    /// all) are compared without a loop.
    head: [(u64, u64); 2],
    /// (name word, mask word) per 8 bytes, zero-padded.
    words: Box<[(u64, u64)]>,
}

impl NameMatcher {
    fn new(lowercase: &[u8]) -> NameMatcher {
        let mask: Vec<u8> = lowercase
            .iter()
            .map(|b| if b.is_ascii_lowercase() { 0x20 } else { 0 })
            .collect();
        let words: Box<[(u64, u64)]> = (0..word_count(lowercase.len()))
            .map(|k| (word_at(lowercase, k), word_at(&mask, k)))
            .collect();
        let second = words.get(1).copied().unwrap_or((0, 0));
        NameMatcher {
            len: lowercase.len(),
            head: [words[0], second],
            words,
        }
    }

    #[inline]
    fn matches(&self, name: &[u8]) -> bool {
        if name.len() != self.len {
            return false;
        }
        if name.len() <= 16 {
            // One or two words (for 9–16 bytes the second overlaps the first).
            let [(w0, m0), (w1, m1)] = self.head;
            return word_at(name, 0) | m0 == w0 && (name.len() <= 8 || word_at(name, 1) | m1 == w1);
        }
        self.words
            .iter()
            .enumerate()
            .all(|(k, &(w, m))| word_at(name, k) | m == w)
    }
}

/// How many words [`word_at`] cuts a string of `len` bytes into.
fn word_count(len: usize) -> usize {
    len.div_ceil(8).max(1)
}

/// Word `k` of `s`: for 8 bytes or more, the 8 bytes at `min(8k, len - 8)` (the last word
/// overlaps the one before); for 4–7 bytes, the first 4 and the last 4; shorter strings byte
/// by byte. Two strings of the same length are equal iff all their words are.
#[inline]
fn word_at(s: &[u8], k: usize) -> u64 {
    let n = s.len();
    if n >= 8 {
        let off = (8 * k).min(n - 8);
        u64::from_le_bytes(s[off..off + 8].try_into().unwrap_or([0; 8]))
    } else if n >= 4 {
        let lo = u32::from_le_bytes(s[..4].try_into().unwrap_or([0; 4]));
        let hi = u32::from_le_bytes(s[n - 4..].try_into().unwrap_or([0; 4]));
        lo as u64 | (hi as u64) << 32
    } else {
        s.iter().rev().fold(0u64, |acc, &b| (acc << 8) | b as u64)
    }
}

impl Default for HeaderPlan {
    /// A plan that reads no header.
    fn default() -> HeaderPlan {
        HeaderPlan::new(std::iter::empty())
    }
}

impl HeaderPlan {
    /// A plan for these names (lowercased, duplicates dropped, the first
    /// [`MAX_PLANNED_HEADERS`] kept).
    pub fn new<'n>(names: impl IntoIterator<Item = &'n [u8]>) -> HeaderPlan {
        let mut plan = HeaderPlan {
            names: Vec::new(),
            quick: Vec::new(),
            by_len: [0; BY_LEN],
        };
        for n in names {
            let n = n.to_ascii_lowercase();
            if plan.names.len() < MAX_PLANNED_HEADERS && !plan.names.iter().any(|p| **p == *n) {
                plan.by_len[n.len().min(BY_LEN - 1)] |= 1 << plan.names.len();
                plan.quick.push(NameMatcher::new(&n));
                plan.names.push(n.into_boxed_slice());
            }
        }
        plan
    }

    /// The planned names.
    pub fn names(&self) -> impl Iterator<Item = &[u8]> {
        self.names.iter().map(|n| &n[..])
    }
}

/// The planned headers of one request, read in one pass over the host's headers: the first
/// value of each and whether it occurs more than once (then every lookup of it goes to the
/// host's view, which has all occurrences).
#[derive(Clone, Copy)]
pub struct HeaderCache<'a> {
    /// The plan's names; empty when the host cannot enumerate its headers.
    names: &'a [Box<[u8]>],
    first: [Option<&'a [u8]>; MAX_PLANNED_HEADERS],
    multi: u8,
}

impl<'a> HeaderCache<'a> {
    /// No cache: every lookup goes to the host's view.
    pub const NONE: HeaderCache<'static> = HeaderCache {
        names: &[],
        first: [None; MAX_PLANNED_HEADERS],
        multi: 0,
    };

    /// An empty cache to [`HeaderCache::fill_in`]: built field by field where it stands (a
    /// copy of [`HeaderCache::NONE`] is a `memcpy` call).
    #[inline(always)]
    pub(crate) fn empty() -> HeaderCache<'a> {
        HeaderCache {
            names: &[],
            first: [None; MAX_PLANNED_HEADERS],
            multi: 0,
        }
    }

    /// Reads the planned headers of `view` in one pass (if the host can enumerate them).
    pub fn fill(plan: &'a HeaderPlan, view: &'a dyn RequestView) -> HeaderCache<'a> {
        let mut cache = HeaderCache::empty();
        cache.fill_in(plan, view);
        cache
    }

    /// [`HeaderCache::fill`] into an empty cache where it stands: returning the cache instead
    /// makes the compiler copy it right after the pass, and those loads wait for the pass's
    /// stores (failed store forwards, a few ns per request).
    #[inline]
    pub(crate) fn fill_in(&mut self, plan: &'a HeaderPlan, view: &'a dyn RequestView) {
        let (names, quick, by_len) = (&plan.names[..], &plan.quick[..], &plan.by_len);
        let (first, multi) = (&mut self.first, &mut self.multi);
        // An empty plan reads nothing (the pass is skipped).
        let enumerated = !names.is_empty()
            && view.for_each_header(&mut |n, v| {
                // Only names of this length can match; usually none or one.
                let mut cands = by_len[n.len().min(BY_LEN - 1)];
                while cands != 0 {
                    let i = cands.trailing_zeros() as usize;
                    cands &= cands - 1;
                    if quick[i].matches(n) {
                        if first[i].is_none() {
                            first[i] = Some(v);
                        } else {
                            *multi |= 1 << i;
                        }
                        break;
                    }
                }
            });
        // Without enumeration, no names: every lookup goes to the host's view.
        if enumerated {
            self.names = names;
        }
    }

    /// `Some(first value)` when `name` is cached with at most one occurrence.
    #[inline]
    fn single(&self, lowercase_name: &[u8]) -> Option<Option<&'a [u8]>> {
        let i = self
            .names
            .iter()
            .position(|n| bytes::eq(n, lowercase_name))?;
        if self.multi & (1 << i) != 0 {
            return None;
        }
        Some(self.first[i])
    }
}

/// The occurrences of one header: from the [`HeaderCache`] when it has them, else from the
/// host's view.
pub struct Values<'a> {
    one: Option<&'a [u8]>,
    more: Option<HeaderValues<'a>>,
}

impl<'a> Iterator for Values<'a> {
    type Item = &'a [u8];
    #[inline]
    fn next(&mut self) -> Option<&'a [u8]> {
        match &mut self.more {
            Some(m) => m.next(),
            None => self.one.take(),
        }
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
}

impl OwnedRequest {
    /// New request without headers.
    pub fn new(method: &str, target: &str, peer: IpAddr) -> Self {
        OwnedRequest {
            method: method.as_bytes().to_vec(),
            target: target.as_bytes().to_vec(),
            peer: Some(peer),
            headers: Vec::new(),
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
}

impl RequestView for OwnedRequest {
    fn method(&self) -> &[u8] {
        &self.method
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
    fn walk_lines(&self, peer: Option<IpAddr>, lines: &[&[u8]]) -> Option<IpAddr> {
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
    fn walk_v4_line(&self, line: &[u8]) -> Option<IpAddr> {
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
    fn resolve_buffered(&self, view: &dyn RequestView, peer: Option<IpAddr>) -> Option<IpAddr> {
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

/// Header lines of a forwarding list walked in place (more take the buffered walk).
const FAST_LINES: usize = 4;

/// Parse `1.2.3.4`, `1.2.3.4:80`, `2001:db8::1`, `[2001:db8::1]`,
/// `[2001:db8::1]:80`.
#[inline]
fn parse_node(s: &[u8]) -> Option<IpAddr> {
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
fn parse_v6_plain(s: &[u8]) -> Option<std::net::Ipv6Addr> {
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
fn parse_v4_prefix(s: &[u8]) -> Option<(std::net::Ipv4Addr, &[u8])> {
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
fn parse_v4_back(s: &[u8]) -> Option<(std::net::Ipv4Addr, usize)> {
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
fn last16_of_32(s: &[u8]) -> [u8; 32] {
    let mut b = [0u8; 32];
    b[16..].copy_from_slice(&last16(s).to_le_bytes());
    b
}

/// The first 16 bytes of `s`, zero-padded.
#[inline]
fn first16(s: &[u8]) -> [u8; 16] {
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
fn last16(s: &[u8]) -> u128 {
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
fn parse_node_slow(s: &[u8]) -> Option<IpAddr> {
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

fn is_port(p: &[u8]) -> bool {
    !p.is_empty() && p.len() <= 5 && p.iter().all(u8::is_ascii_digit)
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

    #[test]
    fn padded_copies_hold_the_right_bytes_at_every_length() {
        let src: Vec<u8> = (1..=40).collect();
        for n in 0..=src.len() {
            let s = &src[..n];
            let tail = &s[n.saturating_sub(16)..];
            let mut last = [0u8; 32];
            last[32 - tail.len()..].copy_from_slice(tail);
            assert_eq!(last16_of_32(s), last, "last16_of_32, length {n}");
            let head = &s[..n.min(16)];
            let mut first = [0u8; 16];
            first[..head.len()].copy_from_slice(head);
            assert_eq!(first16(s), first, "first16, length {n}");
        }
    }

    #[test]
    fn fast_v4_parse_agrees_with_std() {
        let mut cases: Vec<String> = [
            "0.0.0.0",
            "255.255.255.255",
            "256.1.1.1",
            "01.2.3.4",
            "1.2.3.04",
            "1.2.3.0",
            "1.2.3",
            "1.2.3.4.5",
            "1.2.3.4 ",
            " 1.2.3.4",
            "1.2.3.4:",
            "1.2.3.4:80",
            "1.2.3.4:123456",
            "1.2.3.4:80:90",
            "1.2.3.4567",
            "1..2.3",
            "1.2.3.4:8a",
            "1.2.3.-4",
            "::1.2.3.4",
            "1.2.3.4]",
            "",
            "1.2.3.4:00080",
            "999.1.1.1",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        for a in [
            0u32, 1, 9, 10, 99, 100, 199, 200, 249, 250, 255, 256, 300, 1000,
        ] {
            cases.push(format!("{a}.{a}.0.{a}"));
            cases.push(format!("10.{a}.1.2:{a}"));
        }
        for c in &cases {
            assert_eq!(
                parse_node(c.as_bytes()),
                parse_node_slow(c.as_bytes()),
                "{c:?}"
            );
        }
    }

    #[test]
    fn fast_parse_agrees_with_std_on_random_nodes() {
        let fixed = [
            "::",
            "::1",
            "1::",
            ":::",
            "::1:",
            "1:2",
            "1:2:3:4:5:6:7:8",
            "1:2:3:4:5:6:7:8:9",
            "1:2:3:4:5:6:7::",
            "::2:3:4:5:6:7:8",
            "1::2:3:4:5:6:7:8",
            "2001:db8::17",
            "2001:DB8:0:0:0:0:0:1",
            "12345::",
            "::ffff:192.0.2.1",
            "::ffff:c000:201",
            "1:::2",
            "[2001:db8::1]:80",
            "fe80::1%eth0",
            "0:0:0:0:0:0:0:0",
            "::ffff:0:0",
        ];
        for c in fixed {
            assert_eq!(
                parse_node(c.as_bytes()),
                parse_node_slow(c.as_bytes()),
                "{c:?}"
            );
        }
        let alphabet = b"0123456789abcdefABCDEF0::::::::..[]% g";
        let mut next = crate::policy::test_rng::xorshift(0x9e37_79b9_7f4a_7c15u64);
        let mut valid = 0;
        for _ in 0..300_000 {
            let len = (next() % 26) as usize;
            let s: Vec<u8> = (0..len)
                .map(|_| alphabet[(next() % alphabet.len() as u64) as usize])
                .collect();
            let slow = parse_node_slow(&s);
            valid += slow.is_some() as u32;
            assert_eq!(parse_node(&s), slow, "{:?}", String::from_utf8_lossy(&s));
        }
        assert!(valid > 100, "{valid}");
    }

    #[test]
    fn v4_line_walk_agrees_with_buffered() {
        // Lines of IPv4-like entries with the separators and the near misses (leading zeros,
        // 256, four-digit octets, ports, extra dots, empty entries) the fast walk must hand on.
        let r = resolver(ForwardedSource::List(b"x-forwarded-for".to_vec().into()));
        let peer = ip("10.0.0.1");
        let atoms = [
            "1", "0", "9", "10", "25", "99", "100", "199", "255", "256", "300", "01", "007",
            "1234", ".", ".", ".", ",", ",", " ", "\t", ":", ":80", "a", "",
        ];
        let mut rng = crate::policy::test_rng::xorshift(0x2545_f491_4f6c_dd1du64);
        let mut next = move |n: usize| (rng() % n as u64) as usize;
        let (mut fast, mut trusted_hops) = (0, 0);
        for _ in 0..200_000 {
            let mut line = String::new();
            for _ in 0..next(5) + 1 {
                if next(3) == 0 {
                    for _ in 0..next(6) {
                        line.push_str(atoms[next(atoms.len())]);
                    }
                } else {
                    let first = ["10", "198", "1"][next(3)];
                    let octets = [first, atoms[next(10)], atoms[next(10)], atoms[next(10)]];
                    line.push_str(&octets.join("."));
                }
                line.push_str([", ", ",", " ,\t", ""][next(4)]);
            }
            let req = OwnedRequest::new("GET", "/", peer).header("X-Forwarded-For", &line);
            let want = r.resolve_buffered(&req, Some(peer));
            if let Some(got) = r.walk_v4_line(line.as_bytes()) {
                assert_eq!(Some(got), want, "{line:?}");
                fast += 1;
                trusted_hops += (r.trusted.contains(got) && got != peer) as u32;
            }
            assert_eq!(r.resolve(&req), want, "{line:?}");
        }
        // Both the fast walk's answers and its all-trusted case were exercised.
        assert!(
            fast > 10_000 && trusted_hops > 1_000,
            "{fast} {trusted_hops}"
        );
    }

    #[test]
    fn walk_in_place_agrees_with_buffered() {
        let r = resolver(ForwardedSource::List(b"x-forwarded-for".to_vec().into()));
        let long = (0..40).map(|i| format!("10.0.0.{i}")).collect::<Vec<_>>();
        let lines: Vec<Vec<&str>> = vec![
            vec![],
            vec![""],
            vec!["198.51.100.1"],
            vec!["198.51.100.1, 10.1.1.1"],
            vec![" , 10.1.1.1 ,, "],
            vec!["1.1.1.1, garbage, 10.2.2.2"],
            vec!["10.3.3.3", "10.2.2.2"],
            vec!["203.0.113.5, 198.51.100.1", "10.9.9.9"],
            vec!["2001:db8:ffff::1, [2001:db8::5]:80, 10.0.0.3:443"],
            vec!["a", "b", "c", "d", "10.0.0.1"],
            vec!["1.1.1.1", "10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"],
        ];
        let mut lines = lines;
        let joined = long.join(",");
        lines.push(vec![&joined]);
        lines.push(vec!["1.1.1.1", &joined]);
        for ls in &lines {
            let mut req = OwnedRequest::new("GET", "/", ip("10.0.0.1"));
            for l in ls {
                req = req.header("X-Forwarded-For", l);
            }
            let peer = ip("10.0.0.1");
            assert_eq!(
                r.resolve(&req),
                r.resolve_buffered(&req, Some(peer)),
                "{ls:?}"
            );
        }
    }

    #[test]
    fn name_matcher_is_eq_ignore_ascii_case() {
        let names = [
            "x-forwarded-for",
            "cookie",
            "user-agent",
            "a",
            "x-api-key-long-name-17",
            "x_y@[`{",
        ];
        let cands = [
            "X-Forwarded-For",
            "x-forwarded-foR",
            "x-forwarded-fo",
            "accept-language",
            "COOKIE",
            "cookie",
            "cookiE ",
            "User-Agent",
            "user-agenT",
            "A",
            "b",
            "X-API-KEY-LONG-NAME-17",
            "x-api-key-long-name-18",
            "X_Y@[`{",
            "x_y`{@[",
            "",
            "x\u{0}y",
        ];
        for n in names {
            let m = NameMatcher::new(n.as_bytes());
            for c in cands.iter().chain(&names) {
                assert_eq!(
                    m.matches(c.as_bytes()),
                    c.as_bytes().eq_ignore_ascii_case(n.as_bytes()),
                    "{n:?} {c:?}"
                );
            }
        }
    }

    #[test]
    fn named_cookie_is_filtered_cookie_pairs() {
        let headers = [
            "a=1; session = \"xyz\" ;b",
            "session=1; session=2",
            " \tsession\t=\t3 ",
            "sessionx=1; xsession=2; session",
            "session=",
            "session==x",
            "=session=1; session=\"",
            "a=b=c; a=b",
            "s e=1; s e = 2",
            ";;session=4;;",
            "",
            "session",
            "session ;session=5",
            "sessionx=1;session\t= 6 ; x",
            "s=1; session=\"q\"; session=2",
            "GeoIP=US:CA:San_Francisco; session=8f3a2c1de4b5; enwikiUserName=Alice",
            " ; =; session = ;",
        ];
        // The same headers, long enough for the finder's walk.
        let pad = "tracking_id=GA1.2.1234567.89; theme=dark; lang=en; consent=yes; ab=bucket7";
        let long: Vec<String> = headers
            .iter()
            .flat_map(|h| {
                [
                    format!("{pad}; {h}"),
                    format!("{h};{pad}"),
                    format!("{h}{pad}"),
                ]
            })
            .collect();
        for h in headers
            .iter()
            .copied()
            .chain(long.iter().map(|h| h.as_str()))
        {
            for name in ["session", "a", "a=b", " a", "s e", "", "b"] {
                let [pairs, walk, finder] = cookie_walks(h, name);
                assert_eq!((&walk, &finder), (&pairs, &pairs), "{h:?} {name:?}");
            }
        }
    }

    /// The values of cookie `name` in header `h`: by [`CookiePairs`], by [`NamedCookie`]'s
    /// pair-by-pair walk and by its finder's walk (the same as the pair walk for headers
    /// shorter than `FINDER_MIN_LEN`).
    fn cookie_walks<'h>(h: &'h str, name: &str) -> [Vec<&'h [u8]>; 3] {
        let pairs = CookiePairs::new(h.as_bytes())
            .filter(|(n, _)| *n == name.as_bytes())
            .map(|(_, v)| v)
            .collect();
        let prepared = CookieName::new(name.as_bytes());
        let walk = |finder| {
            NamedCookie {
                rest: h.as_bytes(),
                name: name.as_bytes(),
                plain: NamedCookie::plain(name.as_bytes()),
                finder,
            }
            .collect()
        };
        [pairs, walk(None), walk(prepared.finder.as_deref())]
    }

    proptest::proptest! {
        /// Both walks of a `Cookie` header (pair by pair, and the finder's) find exactly the
        /// values [`CookiePairs`] gives for the name, in order, in any header.
        #[test]
        fn named_cookie_walks_agree(
            h in "[sa=; \t\"e]{0,40}",
            pad in proptest::bool::ANY,
            name in proptest::sample::select(vec!["s", "sa", "se", "ss", "a=", "s "]),
        ) {
            let pad = if pad { "x=01234567890123456789012345678901234567890123456789012345678901234567890123456789;" } else { "" };
            let h = format!("{pad}{h}");
            let [pairs, walk, finder] = cookie_walks(&h, name);
            proptest::prop_assert_eq!(&walk, &pairs);
            proptest::prop_assert_eq!(&finder, &pairs);
        }
    }

    #[test]
    fn header_cache_one_pass() {
        let r = OwnedRequest::new("GET", "/", ip("10.0.0.1"))
            .header("User-Agent", "ua")
            .header("Cookie", "a=1")
            .header("X-Seen", "1")
            .header("cookie", "b=2");
        let plan = HeaderPlan::new([&b"user-agent"[..], b"cookie", b"x-missing"]);
        let cache = HeaderCache::fill(&plan, &r);
        let p = PreparedRequest::with_headers(&r, b"/", b"", Some(ip("10.0.0.1")), &cache);
        assert_eq!(p.header(b"user-agent"), Some(&b"ua"[..]));
        assert_eq!(p.header(b"x-missing"), None);
        assert_eq!(p.header(b"x-seen"), Some(&b"1"[..]));
        assert_eq!(p.header_values(b"cookie").count(), 2);
        assert_eq!(p.cookie_values(b"b").collect::<Vec<_>>(), vec![&b"2"[..]]);
        assert_eq!(
            (p.cookie(b"a"), p.cookie(b"b")),
            (Some(&b"1"[..]), Some(&b"2"[..]))
        );
        let one = OwnedRequest::new("GET", "/", ip("10.0.0.1")).header("Cookie", "x=1; s = 2");
        let cache = HeaderCache::fill(&plan, &one);
        let p = PreparedRequest::with_headers(&one, b"/", b"", Some(ip("10.0.0.1")), &cache);
        assert_eq!((p.cookie(b"s"), p.cookie(b"y")), (Some(&b"2"[..]), None));
        assert_eq!(p.header_values(b"x-missing").count(), 0);
        // Names of one length, and names past the length table's last entry.
        let long_a = "x-".repeat(40);
        let long_b = "y-".repeat(35);
        let plan = HeaderPlan::new([long_a.as_bytes(), long_b.as_bytes(), b"ab", b"cd"]);
        let r = OwnedRequest::new("GET", "/", ip("10.0.0.1"))
            .header(&long_b.to_uppercase(), "b")
            .header("CD", "d")
            .header(&long_a, "a")
            .header("ab", "x")
            .header("ab", "y");
        let cache = HeaderCache::fill(&plan, &r);
        let p = PreparedRequest::with_headers(&r, b"/", b"", Some(ip("10.0.0.1")), &cache);
        assert_eq!(p.header(long_a.as_bytes()), Some(&b"a"[..]));
        assert_eq!(p.header(long_b.as_bytes()), Some(&b"b"[..]));
        assert_eq!(p.header(b"cd"), Some(&b"d"[..]));
        assert_eq!(
            p.header_values(b"ab").collect::<Vec<_>>(),
            [&b"x"[..], b"y"]
        );
        assert_eq!(
            (cache.first[0], cache.first[3]),
            (Some(&b"a"[..]), Some(&b"d"[..]))
        );
        assert_eq!(cache.multi, 1 << 2);
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
        assert_eq!(r.resolve(&req), Some(ip("2001:db8::17")));
        let req = OwnedRequest::new("GET", "/", ip("10.0.0.1"))
            .header("Forwarded", "for=198.51.100.9, for=_hidden, for=10.1.1.1");
        assert_eq!(r.resolve(&req), Some(ip("10.1.1.1")));
        // XFF is ignored in Forwarded mode.
        let req =
            OwnedRequest::new("GET", "/", ip("10.0.0.1")).header("X-Forwarded-For", "1.2.3.4");
        assert_eq!(r.resolve(&req), Some(ip("10.0.0.1")));
    }

    #[test]
    fn xff_repeated_lines_and_limits() {
        let r = resolver(ForwardedSource::List(b"x-forwarded-for".to_vec().into()));
        let req = OwnedRequest::new("GET", "/", ip("10.0.0.1"))
            .header("X-Forwarded-For", "203.0.113.5, 198.51.100.1")
            .header("X-Forwarded-For", "10.9.9.9");
        assert_eq!(r.resolve(&req), Some(ip("198.51.100.1")));
        let req = OwnedRequest::new("GET", "/", ip("10.0.0.1"))
            .header("X-Forwarded-For", "10.3.3.3, 10.2.2.2");
        assert_eq!(r.resolve(&req), Some(ip("10.3.3.3")));
        let req = OwnedRequest::new("GET", "/", ip("10.0.0.1"))
            .header("X-Forwarded-For", "1.1.1.1, garbage, 10.2.2.2");
        assert_eq!(r.resolve(&req), Some(ip("10.2.2.2")));
        let long = (0..100)
            .map(|i| format!("10.0.0.{}", i % 250))
            .collect::<Vec<_>>()
            .join(", ");
        let req = OwnedRequest::new("GET", "/", ip("10.0.0.1"))
            .header("X-Forwarded-For", &format!("1.1.1.1, {long}"));
        // Only the rightmost MAX_HOPS are examined; all trusted → leftmost kept.
        assert!(r.trusted.contains_peer(r.resolve(&req)));
    }

    /// A peer without an IP address is the local client; its forwarding header counts only
    /// when `unix:` is trusted, and the walk falls back to the local client as it would to a
    /// trusted peer's address.
    #[test]
    fn local_peer_resolves_through_unix_trust() {
        let local = |xff: &str| OwnedRequest::local("GET", "/").header("X-Forwarded-For", xff);
        for source in [
            ForwardedSource::List(b"x-forwarded-for".to_vec().into()),
            ForwardedSource::Forwarded,
        ] {
            let mut r = resolver(source);
            assert_eq!(r.resolve(&local("203.0.113.5")), None, "unix: not trusted");
            assert_eq!(r.resolve(&OwnedRequest::local("GET", "/")), None);
            r.trusted.push_entry("unix:").unwrap();
            assert_eq!(
                r.resolve(&OwnedRequest::local("GET", "/")),
                None,
                "no header"
            );
        }
        let mut r = resolver(ForwardedSource::List(b"x-forwarded-for".to_vec().into()));
        r.trusted.push_entry("unix:").unwrap();
        assert_eq!(r.resolve(&local("203.0.113.5")), Some(ip("203.0.113.5")));
        assert_eq!(
            r.resolve(&local("203.0.113.5, 10.1.1.1")),
            Some(ip("203.0.113.5"))
        );
        assert_eq!(r.resolve(&local("garbage")), None);
        assert_eq!(r.resolve(&local("2001:db8::7, garbage")), None);
        assert_eq!(r.resolve(&local("10.1.1.1")), Some(ip("10.1.1.1")));
        // Trusting unix: does not make any address trusted.
        let req =
            OwnedRequest::new("GET", "/", ip("192.0.2.9")).header("X-Forwarded-For", "1.1.1.1");
        assert_eq!(r.resolve(&req), Some(ip("192.0.2.9")));
    }
}
