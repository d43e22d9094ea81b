//! Cookie header parsing: name=value pairs, and one cookie's values found without parsing the others.

use super::*;

/// Iterator over the `name=value` pairs of one `Cookie` header value
/// (`a=1; b=2`). Whitespace around names and values is trimmed, a value in
/// double quotes is unquoted, pairs without `=` are skipped.
pub struct CookiePairs<'a> {
    pub(super) rest: &'a [u8],
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
pub(super) struct NamedCookie<'a, 'n> {
    pub(super) rest: &'a [u8],
    pub(super) name: &'n [u8],
    /// `name` is non-empty, has no `=` or `;` and no surrounding whitespace, so a pair
    /// `ws* name ws* = value` is exactly a pair named `name`.
    pub(super) plain: bool,
    /// A prepared search for `name` (only when `plain`): long headers are searched for the
    /// name instead of being walked pair by pair.
    pub(super) finder: Option<&'n Finder<'static>>,
}

/// Headers at least this long are searched with [`CookieName`]'s finder; shorter ones are
/// walked pair by pair, which is cheaper for the two or three pairs they hold.
pub(super) const FINDER_MIN_LEN: usize = 80;

/// A cookie name as policies use it (keys, matchers), prepared once for fast lookups in
/// long `Cookie` headers. Compares and dereferences as its bytes.
#[derive(Clone)]
pub struct CookieName {
    pub(super) name: Box<[u8]>,
    /// Set iff the name is plain (see [`NamedCookie::plain`]); boxed, as it is large.
    pub(super) finder: Option<Box<Finder<'static>>>,
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
    pub(super) fn plain(name: &[u8]) -> bool {
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
    pub(super) fn search(&mut self, finder: &Finder<'_>) -> Option<&'a [u8]> {
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
    pub(super) fn take_value(&mut self, v: &'a [u8]) -> &'a [u8] {
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

pub(super) fn trim_start(s: &[u8]) -> &[u8] {
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

pub(super) fn trim(s: &[u8]) -> &[u8] {
    let is_ws = |b: &u8| *b == b' ' || *b == b'\t';
    let start = s.iter().position(|b| !is_ws(b)).unwrap_or(s.len());
    let end = s.iter().rposition(|b| !is_ws(b)).map_or(start, |e| e + 1);
    &s[start..end]
}
