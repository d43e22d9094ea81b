//! Compiled request matchers: globs, value matchers, CIDR sets, URL shapes and
//! classes.
//!
//! Everything here is built once from the policy file (see
//! [`crate::policy::config`]) and evaluated per request against a
//! [`PreparedRequest`]. Evaluation does not allocate on the common path:
//! regexes are pre-compiled (`regex::bytes`), globs are pre-tokenized, CIDRs
//! are integer ranges and header names are stored lowercase. The only
//! allocation is a fallback buffer when a query argument longer than 2 KiB
//! has to be percent-decoded.
//!
//! Semantics (documented for operators in `docs/POLICY.md`):
//! * a [`Class`] matches when **any** of its [`Shape`]s matches;
//! * a [`Shape`] matches when **all** of its listed tests match;
//! * a test with a list of values (e.g. `path_glob = ["*.css", "*.js"]`)
//!   passes when **any** value matches;
//! * header, cookie and query tests look at **every** occurrence of the name
//!   and pass when any occurrence matches (`present = false` passes only when
//!   there is no occurrence). Matching any occurrence prevents bypassing a class
//!   by sending a harmless duplicate first (`?title=x&title=Special:…`, PHP
//!   uses the last one).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use regex::bytes::Regex;

use super::bytes;
use super::request::{CookieName, PreparedRequest};

/// Query arguments up to this many bytes are percent-decoded on the stack.
pub const QUERY_STACK_BUF: usize = 512;

// ---------------------------------------------------------------------------
// Globs
// ---------------------------------------------------------------------------

/// A compiled glob pattern over bytes.
///
/// Syntax: `*` matches any run of bytes (including `/`), `?` matches exactly
/// one byte, `[abc]`, `[a-z]` and `[!a-z]` match one byte from (or not from)
/// a set of ASCII bytes, `\x` matches `x` literally. Everything else matches
/// itself, case-sensitively unless the glob ignores ASCII case (`iglob`).
///
/// Invariant of an ASCII-case-insensitive glob: its literal bytes and class ranges are stored
/// lowercase (classes hold the lowercase twin of every uppercase range), and the subject is
/// lowercased byte by byte as it is compared, so matching still allocates nothing.
#[derive(Clone)]
pub struct Glob {
    src: String,
    ignore_case: bool,
    kind: GlobKind,
}

#[derive(Clone)]
enum GlobKind {
    Exact(Box<[u8]>),
    Prefix(Box<[u8]>),
    Suffix(Box<[u8]>),
    /// Split at its stars: `head` at the start, `tail` at the end, each of `mids` somewhere in
    /// between, in order (none of them holds a star). Without a star the glob is `head` alone.
    General {
        head: Box<[Tok]>,
        mids: Box<[Box<[Tok]>]>,
        tail: Box<[Tok]>,
        star: bool,
    },
}

#[derive(Clone, PartialEq, Eq)]
enum Tok {
    Lit(u8),
    One,
    Star,
    Class {
        negated: bool,
        ranges: Box<[(u8, u8)]>,
    },
}

impl Tok {
    /// Lowercase a literal; give a class the lowercase twin of its uppercase ranges.
    fn fold_case(&mut self) {
        match self {
            Tok::Lit(b) => *b = b.to_ascii_lowercase(),
            Tok::Class { ranges, .. } => {
                let mut all = ranges.to_vec();
                for &(lo, hi) in ranges.iter() {
                    let (lo, hi) = (lo.max(b'A'), hi.min(b'Z'));
                    if lo <= hi {
                        all.push((lo.to_ascii_lowercase(), hi.to_ascii_lowercase()));
                    }
                }
                *ranges = all.into_boxed_slice();
            }
            Tok::One | Tok::Star => {}
        }
    }

    #[inline]
    fn matches(&self, b: u8) -> bool {
        match self {
            Tok::Lit(l) => *l == b,
            Tok::One => true,
            Tok::Star => false,
            Tok::Class { negated, ranges } => {
                ranges.iter().any(|&(lo, hi)| lo <= b && b <= hi) != *negated
            }
        }
    }
}

impl Glob {
    /// Compile a glob. The error string says what is wrong with the pattern.
    pub fn new(pattern: &str) -> Result<Glob, String> {
        Glob::build(pattern, false)
    }

    /// Compile a glob whose letters match in either ASCII case (`a` matches `a` and `A`,
    /// `[a-c]` matches `B`); bytes outside ASCII compare exactly.
    pub fn new_ignore_case(pattern: &str) -> Result<Glob, String> {
        Glob::build(pattern, true)
    }

    fn build(pattern: &str, ignore_case: bool) -> Result<Glob, String> {
        let bytes = pattern.as_bytes();
        let mut toks = Vec::new();
        let mut i = 0;
        while i < bytes.len() {
            let b = bytes[i];
            match b {
                b'*' => {
                    if toks.last() != Some(&Tok::Star) {
                        toks.push(Tok::Star);
                    }
                    i += 1;
                }
                b'?' => {
                    toks.push(Tok::One);
                    i += 1;
                }
                b'\\' => {
                    let Some(&n) = bytes.get(i + 1) else {
                        return Err(format!(
                            "glob {pattern:?} ends with a lone `\\`; write `\\\\` for a literal backslash"
                        ));
                    };
                    toks.push(Tok::Lit(n));
                    i += 2;
                }
                b'[' => {
                    let (tok, next) = parse_class(pattern, i)?;
                    toks.push(tok);
                    i = next;
                }
                _ => {
                    toks.push(Tok::Lit(b));
                    i += 1;
                }
            }
        }
        if ignore_case {
            for t in &mut toks {
                t.fold_case();
            }
        }
        let lits = |t: &[Tok]| -> Option<Box<[u8]>> {
            t.iter()
                .map(|t| match t {
                    Tok::Lit(b) => Some(*b),
                    _ => None,
                })
                .collect()
        };
        let kind = if let Some(l) = lits(&toks) {
            GlobKind::Exact(l)
        } else if toks.last() == Some(&Tok::Star) && lits(&toks[..toks.len() - 1]).is_some() {
            GlobKind::Prefix(lits(&toks[..toks.len() - 1]).unwrap_or_default())
        } else if toks.first() == Some(&Tok::Star) && lits(&toks[1..]).is_some() {
            GlobKind::Suffix(lits(&toks[1..]).unwrap_or_default())
        } else {
            split_at_stars(&toks)
        };
        Ok(Glob {
            src: pattern.to_owned(),
            ignore_case,
            kind,
        })
    }

    /// The literal this glob reduces to, if it is one (no wildcard but a leading or trailing
    /// `*`) and compares bytes exactly (no letter under `ignore_case`).
    pub(crate) fn literal_form(&self) -> Option<LiteralGlob<'_>> {
        if self.ignore_case {
            let (GlobKind::Exact(l) | GlobKind::Prefix(l) | GlobKind::Suffix(l)) = &self.kind
            else {
                return None;
            };
            if l.iter().any(u8::is_ascii_alphabetic) {
                return None;
            }
        }
        match &self.kind {
            GlobKind::Exact(l) => Some(LiteralGlob::Exact(l)),
            GlobKind::Prefix(l) => Some(LiteralGlob::Prefix(l)),
            GlobKind::Suffix(l) => Some(LiteralGlob::Suffix(l)),
            GlobKind::General { .. } => None,
        }
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.src
    }

    /// Does the whole of `s` match?
    pub fn is_match(&self, s: &[u8]) -> bool {
        if self.ignore_case {
            return self.is_match_ignore_case(s);
        }
        match &self.kind {
            GlobKind::Exact(l) => bytes::eq(s, l),
            GlobKind::Prefix(p) => bytes::starts_with(s, p),
            // The last byte first: most paths end differently (`*.css` against `.php`).
            GlobKind::Suffix(p) => {
                s.len() >= p.len() && s.last() == p.last() && bytes::ends_with(s, p)
            }
            GlobKind::General { .. } => self.match_general::<false>(s),
        }
    }

    /// [`Glob::is_match`] for a glob stored lowercase: the subject is lowercased as it is read.
    fn is_match_ignore_case(&self, s: &[u8]) -> bool {
        match &self.kind {
            GlobKind::Exact(l) => s.eq_ignore_ascii_case(l),
            GlobKind::Prefix(p) => s.len() >= p.len() && s[..p.len()].eq_ignore_ascii_case(p),
            GlobKind::Suffix(p) => {
                s.len() >= p.len() && s[s.len() - p.len()..].eq_ignore_ascii_case(p)
            }
            GlobKind::General { .. } => self.match_general::<true>(s),
        }
    }
}

impl fmt::Debug for Glob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = if self.ignore_case { "IGlob" } else { "Glob" };
        write!(f, "{kind}({:?})", self.src)
    }
}

/// A glob that is a literal: the whole string, a prefix (`lit*`) or a suffix (`*lit`).
pub(crate) enum LiteralGlob<'a> {
    Exact(&'a [u8]),
    Prefix(&'a [u8]),
    Suffix(&'a [u8]),
}

fn parse_class(pattern: &str, start: usize) -> Result<(Tok, usize), String> {
    let bytes = pattern.as_bytes();
    let mut i = start + 1;
    let negated = matches!(bytes.get(i), Some(b'!') | Some(b'^'));
    if negated {
        i += 1;
    }
    let mut ranges = Vec::new();
    loop {
        let Some(&b) = bytes.get(i) else {
            return Err(format!(
                "glob {pattern:?} has an unclosed `[`; write `\\[` for a literal bracket"
            ));
        };
        if b == b']' {
            if ranges.is_empty() {
                return Err(format!(
                    "glob {pattern:?} has an empty character class `[]`"
                ));
            }
            return Ok((
                Tok::Class {
                    negated,
                    ranges: ranges.into_boxed_slice(),
                },
                i + 1,
            ));
        }
        let lo = if b == b'\\' {
            i += 1;
            *bytes
                .get(i)
                .ok_or_else(|| format!("glob {pattern:?} has an unclosed `[`"))?
        } else {
            b
        };
        if !lo.is_ascii() {
            return Err(format!(
                "glob {pattern:?}: character classes may only contain ASCII; use a regex for Unicode"
            ));
        }
        i += 1;
        if bytes.get(i) == Some(&b'-') && bytes.get(i + 1).is_some_and(|&c| c != b']') {
            let hi = bytes[i + 1];
            if !hi.is_ascii() {
                return Err(format!(
                    "glob {pattern:?}: character classes may only contain ASCII; use a regex for Unicode"
                ));
            }
            if hi < lo {
                return Err(format!(
                    "glob {pattern:?}: range `{}-{}` is reversed",
                    lo as char, hi as char
                ));
            }
            ranges.push((lo, hi));
            i += 2;
        } else {
            ranges.push((lo, lo));
        }
    }
}

fn split_at_stars(toks: &[Tok]) -> GlobKind {
    let mut parts = toks.split(|t| *t == Tok::Star);
    let head: Box<[Tok]> = parts.next().unwrap_or_default().into();
    let mut mids: Vec<Box<[Tok]>> = parts.filter(|p| !p.is_empty()).map(Into::into).collect();
    let star = toks.contains(&Tok::Star);
    // The last part is the tail unless the glob ends with a star.
    let tail = if star && toks.last() != Some(&Tok::Star) {
        mids.pop().unwrap_or_default()
    } else {
        Box::default()
    };
    GlobKind::General {
        head,
        mids: mids.into(),
        tail,
        star,
    }
}

impl Glob {
    /// Match a general glob: `head` and `tail` in place, then each star-delimited part at its
    /// leftmost place after the previous one. Every part has a fixed length (no star in it),
    /// so the leftmost place is always the right one: no backtracking, each part searched
    /// for once, 8 candidate places at a time (see [`find_part`]). No allocation, no recursion.
    fn match_general<const FOLD: bool>(&self, s: &[u8]) -> bool {
        let GlobKind::General {
            head,
            mids,
            tail,
            star,
        } = &self.kind
        else {
            return false;
        };
        let (h, t) = (head.len(), tail.len());
        if !star {
            return s.len() == h && part_matches::<FOLD>(head, s);
        }
        if s.len() < h + t
            || !part_matches::<FOLD>(head, &s[..h])
            || !part_matches::<FOLD>(tail, &s[s.len() - t..])
        {
            return false;
        }
        let within = &s[..s.len() - t];
        let mut at = h;
        for part in mids.iter() {
            match find_part::<FOLD>(part, within, at) {
                Some(j) => at = j + part.len(),
                None => return false,
            }
        }
        true
    }
}

/// Do the star-free tokens `part` match `s`, byte for byte (`s` as long as `part`)?
#[inline]
fn part_matches<const FOLD: bool>(part: &[Tok], s: &[u8]) -> bool {
    part.iter().zip(s).all(|(t, &b)| {
        let b = if FOLD { b.to_ascii_lowercase() } else { b };
        t.matches(b)
    })
}

/// Bytes of `w` equal to the literal `l` (in either case under `FOLD`), flagged `0x80`.
#[inline]
fn lit_flags<const FOLD: bool>(w: u64, l: u8) -> u64 {
    let f = bytes::bytes_equal_to(w, l);
    if FOLD && l.is_ascii_lowercase() {
        f | bytes::bytes_equal_to(w, l.to_ascii_uppercase())
    } else {
        f
    }
}

/// The leftmost `j >= from` where `part` (non-empty, star-free) matches `s[j..j + part.len()]`.
/// When the part starts and ends with literals, 8 places are screened at once by those two
/// bytes, so a subject of near misses costs a word operation per 8 bytes, not a comparison
/// loop per byte.
fn find_part<const FOLD: bool>(part: &[Tok], s: &[u8], from: usize) -> Option<usize> {
    let k = part.len();
    let last = s.len().checked_sub(k)?;
    let fits = |j: usize| part_matches::<FOLD>(part, &s[j..j + k]);
    let mut j = from;
    if let (Some(&Tok::Lit(a)), Some(&Tok::Lit(b))) = (part.first(), part.last()) {
        // Words at j and j + k - 1 both lie inside `s` while j + 7 <= last.
        while j + 7 <= last {
            let mut m = lit_flags::<FOLD>(bytes::word(s, j), a)
                & lit_flags::<FOLD>(bytes::word(s, j + k - 1), b);
            while m != 0 {
                let c = j + (m.trailing_zeros() / 8) as usize;
                if fits(c) {
                    return Some(c);
                }
                m &= m - 1;
            }
            j += 8;
        }
    }
    (j..=last).find(|&c| fits(c))
}

// ---------------------------------------------------------------------------
// Value matchers
// ---------------------------------------------------------------------------

/// A test on the value of a header, cookie or (decoded) query argument.
#[derive(Clone, Debug)]
pub enum ValueMatcher {
    /// At least one occurrence of the name, whatever its value.
    Present,
    /// No occurrence of the name at all.
    Absent,
    /// Some occurrence equals these bytes exactly.
    Equals(Box<[u8]>),
    /// Some occurrence matches the glob.
    Glob(Glob),
    /// Some occurrence matches the regex (unanchored unless the regex says so).
    Regex(Regex),
}

impl ValueMatcher {
    /// Test one occurrence's value (`Absent` never matches an occurrence).
    #[inline]
    pub fn matches_value(&self, v: &[u8]) -> bool {
        match self {
            ValueMatcher::Present => true,
            ValueMatcher::Absent => false,
            ValueMatcher::Equals(e) => v == &e[..],
            ValueMatcher::Glob(g) => g.is_match(v),
            ValueMatcher::Regex(r) => r.is_match(v),
        }
    }

    /// Test a sequence of occurrences.
    pub fn matches_all<'a>(&self, mut values: impl Iterator<Item = &'a [u8]>) -> bool {
        match self {
            ValueMatcher::Absent => values.next().is_none(),
            m => values.any(|v| m.matches_value(v)),
        }
    }
}

// ---------------------------------------------------------------------------
// CIDRs
// ---------------------------------------------------------------------------

/// An IP network (address + prefix length), host bits zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IpNet {
    addr: IpAddr,
    prefix: u8,
}

impl IpNet {
    /// Parse `10.0.0.0/8`, `2001:db8::/32` or a bare address (a /32 or /128).
    /// Host bits must be zero (`10.0.0.1/8` is rejected, it is almost always a
    /// typo).
    pub fn parse(s: &str) -> Result<IpNet, String> {
        let (a, p) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let addr: IpAddr = a.trim().parse().map_err(|_| {
            format!("invalid CIDR {s:?}; expected an address like \"10.0.0.0/8\", \"2001:db8::/32\" or \"192.0.2.7\"")
        })?;
        let addr = addr.to_canonical();
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match p {
            None => max,
            Some(p) => match p.trim().parse::<u8>() {
                Ok(n) if n <= max => n,
                _ => {
                    return Err(format!(
                        "invalid prefix length in {s:?}; expected 0..={max}"
                    ))
                }
            },
        };
        let masked = mask_ip(addr, prefix);
        if masked != addr {
            return Err(format!(
                "CIDR {s:?} has host bits set; did you mean \"{masked}/{prefix}\"?"
            ));
        }
        Ok(IpNet { addr, prefix })
    }

    /// Network address.
    pub fn addr(&self) -> IpAddr {
        self.addr
    }

    /// Prefix length.
    pub fn prefix(&self) -> u8 {
        self.prefix
    }

    /// Is `ip` inside this network? IPv4-mapped IPv6 addresses count as IPv4.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        ip.is_ipv4() == self.addr.is_ipv4() && mask_ip(ip, self.prefix) == self.addr
    }
}

impl fmt::Display for IpNet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// Zero all but the first `prefix` bits of `ip` (prefix clamped to the
/// family's width).
pub fn mask_ip(ip: IpAddr, prefix: u8) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => {
            let m = mask32(prefix);
            IpAddr::V4(Ipv4Addr::from(u32::from(v4) & m))
        }
        IpAddr::V6(v6) => {
            let m = mask128(prefix);
            IpAddr::V6(Ipv6Addr::from(u128::from(v6) & m))
        }
    }
}

#[inline]
fn mask32(prefix: u8) -> u32 {
    match prefix {
        0 => 0,
        p if p >= 32 => u32::MAX,
        p => u32::MAX << (32 - p),
    }
}

#[inline]
fn mask128(prefix: u8) -> u128 {
    match prefix {
        0 => 0,
        p if p >= 128 => u128::MAX,
        p => u128::MAX << (128 - p),
    }
}

/// A set of networks, split by family, tested linearly (policy lists are
/// short), and possibly the local client (`unix:`: a peer without an IP address).
#[derive(Clone, Debug, Default)]
pub struct CidrSet {
    v4: Vec<(u32, u32)>,
    v6: Vec<(u128, u128)>,
    nets: Vec<IpNet>,
    local: bool,
}

/// How policies write the local client in address lists (as nginx's `set_real_ip_from unix:`).
pub const LOCAL_CLIENT: &str = "unix:";

impl CidrSet {
    /// Empty set (contains nothing).
    pub fn new() -> CidrSet {
        CidrSet::default()
    }

    /// Add a network.
    pub fn push(&mut self, net: IpNet) {
        match net.addr {
            IpAddr::V4(a) => self.v4.push((u32::from(a), mask32(net.prefix))),
            IpAddr::V6(a) => self.v6.push((u128::from(a), mask128(net.prefix))),
        }
        self.nets.push(net);
    }

    /// Add one list entry: a network as [`IpNet::parse`] reads it, or [`LOCAL_CLIENT`].
    pub fn push_entry(&mut self, entry: &str) -> Result<(), String> {
        if entry.trim() == LOCAL_CLIENT {
            self.local = true;
            return Ok(());
        }
        IpNet::parse(entry).map(|n| self.push(n))
    }

    /// Is the set empty?
    pub fn is_empty(&self) -> bool {
        self.nets.is_empty() && !self.local
    }

    /// Is `client` in the set: an address in one of its networks, or the local client
    /// (`None`) when the set holds `unix:`.
    #[inline]
    pub fn contains_peer(&self, client: Option<IpAddr>) -> bool {
        match client {
            Some(ip) => self.contains(ip),
            None => self.local,
        }
    }

    /// The networks, in insertion order.
    pub fn nets(&self) -> &[IpNet] {
        &self.nets
    }

    /// Is `ip` in any network of the set? IPv4-mapped IPv6 counts as IPv4.
    #[inline]
    pub fn contains(&self, ip: IpAddr) -> bool {
        // As `ip.to_canonical()` then the family's list, with the family tested first (so a
        // caller's loop gets no hoisted conversion).
        match ip {
            IpAddr::V4(a) => self.contains_v4(a),
            IpAddr::V6(a) => match a.to_ipv4_mapped() {
                Some(a) => self.contains_v4(a),
                None => {
                    let a = u128::from(a);
                    self.v6.iter().any(|&(n, m)| a & m == n)
                }
            },
        }
    }

    #[inline]
    pub(crate) fn contains_v4(&self, a: Ipv4Addr) -> bool {
        let a = u32::from(a);
        self.v4.iter().any(|&(n, m)| a & m == n)
    }
}

// ---------------------------------------------------------------------------
// Shapes and classes
// ---------------------------------------------------------------------------

/// One test on the normalized path.
#[derive(Clone, Debug)]
pub enum PathTest {
    /// Path equals this exactly.
    Exact(Box<[u8]>),
    /// Path starts with this.
    Prefix(Box<[u8]>),
    /// Whole path matches the glob.
    Glob(Glob),
    /// Regex matches (unanchored unless written with `^…$`).
    Regex(Regex),
}

impl PathTest {
    #[inline]
    pub(crate) fn matches(&self, path: &[u8]) -> bool {
        match self {
            PathTest::Exact(e) => path == &e[..],
            PathTest::Prefix(p) => path.starts_with(p),
            PathTest::Glob(g) => g.is_match(path),
            PathTest::Regex(r) => r.is_match(path),
        }
    }
}

/// One URL shape: every listed test must pass (AND). Each test that lists
/// several alternatives passes when one of them matches (OR).
#[derive(Clone, Debug, Default)]
pub struct Shape {
    /// Allowed methods (empty: any method). Case-sensitive.
    pub methods: Vec<Box<[u8]>>,
    /// Client address must be in this set (if any).
    pub client: Option<CidrSet>,
    /// Path tests: each inner list is one config field's alternatives.
    pub path: Vec<Box<[PathTest]>>,
    /// Header tests: (lowercase name, matcher).
    pub headers: Vec<(Box<[u8]>, ValueMatcher)>,
    /// Cookie tests: (name, matcher); values are raw (not decoded).
    pub cookies: Vec<(CookieName, ValueMatcher)>,
    /// Query tests: (name, matcher) on percent-decoded names and values.
    pub query: Vec<(Box<[u8]>, ValueMatcher)>,
}

impl Shape {
    /// Does the request match this shape?
    pub fn matches(&self, req: &PreparedRequest<'_>) -> bool {
        if !self.methods.is_empty() && !self.methods.iter().any(|m| &m[..] == req.method) {
            return false;
        }
        if !self
            .path
            .iter()
            .all(|alts| alts.iter().any(|t| t.matches(req.path)))
        {
            return false;
        }
        self.matches_after_path(req)
    }

    /// Has the shape tests beyond method and path?
    pub(crate) fn has_tests_after_path(&self) -> bool {
        self.client.is_some()
            || !self.headers.is_empty()
            || !self.cookies.is_empty()
            || !self.query.is_empty()
    }

    /// The tests after method and path: client, headers, cookies, query. (Out of line: inlined,
    /// the client address conversions it needs are hoisted into every caller's loop.)
    #[inline(never)]
    pub(crate) fn matches_after_path(&self, req: &PreparedRequest<'_>) -> bool {
        if let Some(c) = &self.client {
            if !c.contains_peer(req.client) {
                return false;
            }
        }
        for (name, m) in &self.headers {
            if !m.matches_all(req.header_values(name)) {
                return false;
            }
        }
        for (name, m) in &self.cookies {
            if !m.matches_all(req.cookie_values_named(name)) {
                return false;
            }
        }
        for (name, m) in &self.query {
            if !query_matches(req.query, name, m) {
                return false;
            }
        }
        true
    }
}

/// A named set of shapes (a traffic class or an exemption). Matches when any
/// shape matches.
#[derive(Clone, Debug)]
pub struct Class {
    /// Name from the policy file.
    pub name: String,
    /// Alternatives.
    pub shapes: Vec<Shape>,
}

impl Class {
    /// Does any shape match?
    pub fn matches(&self, req: &PreparedRequest<'_>) -> bool {
        self.shapes.iter().any(|s| s.matches(req))
    }
}

// ---------------------------------------------------------------------------
// Query arguments
// ---------------------------------------------------------------------------

use super::normalize::decode_component;
#[cfg(test)]
use super::normalize::query_args;

/// Decode `raw` (on the stack when short) and hand the result to `f`.
#[inline]
fn with_decoded<R>(raw: &[u8], f: impl FnOnce(&[u8]) -> R) -> R {
    if super::bytes::find2(raw, b'%', b'+').is_none() {
        return f(raw);
    }
    if raw.len() <= QUERY_STACK_BUF {
        let mut buf = [0u8; QUERY_STACK_BUF];
        let n = decode_component(raw, &mut buf);
        f(&buf[..n])
    } else if raw.len() <= QUERY_LONG_STACK_BUF {
        with_decoded_long(raw, f)
    } else {
        // Over 2 KiB: rare enough to take the heap.
        let mut buf = vec![0u8; raw.len()];
        let n = decode_component(raw, &mut buf);
        f(&buf[..n])
    }
}

/// Values between 512 B and 2 KiB decode in a larger stack buffer, kept out of line so the
/// common path does not reserve it.
const QUERY_LONG_STACK_BUF: usize = 2048;

#[inline(never)]
fn with_decoded_long<R>(raw: &[u8], f: impl FnOnce(&[u8]) -> R) -> R {
    let mut buf = [0u8; QUERY_LONG_STACK_BUF];
    let n = decode_component(raw, &mut buf);
    f(&buf[..n])
}

/// Does the query test `(name, m)` pass? The same answer as walking `query_args` and
/// decoding each name and value (`query_matches_plain`, in the tests), in one scan of the query: an
/// argument's name ends at its first `=` or `&`, and its value is searched for its `&`
/// together with the `%` and `+` that would need decoding.
fn query_matches(query: &[u8], name: &[u8], m: &ValueMatcher) -> bool {
    use super::bytes::{find, find2, find3};
    let mut seen = false;
    let mut rest = query;
    while !rest.is_empty() {
        let (n, value) = match find2(rest, b'=', b'&') {
            Some(i) if rest[i] == b'=' => (&rest[..i], Some(&rest[i + 1..])),
            Some(i) => {
                let n = &rest[..i];
                rest = &rest[i + 1..];
                if n.is_empty() {
                    continue; // an empty argument (`&&`)
                }
                (n, None)
            }
            None => {
                let n = rest;
                rest = &rest[rest.len()..];
                (n, None)
            }
        };
        // The value (empty when there is no `=`), whether it has escapes, and what follows.
        let (v, plain) = match value {
            None => (&n[n.len()..], true),
            Some(tail) => {
                let (end, plain) = match find3(tail, b'&', b'%', b'+') {
                    Some(j) if tail[j] == b'&' => (j, true),
                    Some(j) => (j + find(&tail[j..], b'&').unwrap_or(tail.len() - j), false),
                    None => (tail.len(), true),
                };
                rest = tail.get(end + 1..).unwrap_or(&[]);
                (&tail[..end], plain)
            }
        };
        // Decoding never lengthens a name (`%XX` → 1 byte, `+` → 1 byte), nor does reading it
        // as PHP does: a shorter raw name cannot be equal, and an equal one needs no decoding.
        let named = n.len() >= name.len()
            && (bytes::eq(n, name) || with_decoded(n, |d| php_name(d) == name));
        if !named {
            continue;
        }
        seen = true;
        match m {
            ValueMatcher::Absent => return false,
            ValueMatcher::Present => return true,
            _ if plain => {
                if m.matches_value(v) {
                    return true;
                }
            }
            _ => {
                if with_decoded(v, |d| m.matches_value(d)) {
                    return true;
                }
            }
        }
    }
    matches!(m, ValueMatcher::Absent) && !seen
}

/// A decoded argument name as PHP registers it: leading spaces dropped, cut at a NUL byte
/// (`?+title=` and `?title%00x=` are `title` to a PHP application). Never longer than `d`.
#[inline]
fn php_name(d: &[u8]) -> &[u8] {
    let d = &d[d.iter().take_while(|&&b| b == b' ').count()..];
    &d[..bytes::find(d, 0).unwrap_or(d.len())]
}

/// [`query_matches`] as its definition reads: every argument, each name and value decoded.
#[cfg(test)]
fn query_matches_plain(query: &[u8], name: &[u8], m: &ValueMatcher) -> bool {
    let mut seen = false;
    for (n, v) in query_args(query) {
        if !with_decoded(n, |d| php_name(d) == name) {
            continue;
        }
        seen = true;
        match m {
            ValueMatcher::Absent => return false,
            ValueMatcher::Present => return true,
            _ => {
                if with_decoded(v, |d| m.matches_value(d)) {
                    return true;
                }
            }
        }
    }
    matches!(m, ValueMatcher::Absent) && !seen
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_scan_query_matching_is_the_definition() {
        let matchers = [
            ValueMatcher::Present,
            ValueMatcher::Absent,
            ValueMatcher::Equals(b"a b".to_vec().into()),
            ValueMatcher::Equals(b"".to_vec().into()),
            ValueMatcher::Glob(Glob::new("x*").unwrap()),
            ValueMatcher::Regex(Regex::new("^&?%").unwrap()),
        ];
        let names: [&[u8]; 5] = [b"t", b"a b", b"", b"x=", b"t&"];
        let alphabet = b"t=&%+2a0 bx=&";
        let mut next = crate::policy::test_rng::xorshift(0x9e37_79b9_7f4a_7c15u64);
        for _ in 0..40_000 {
            let len = (next() % 24) as usize;
            let q: Vec<u8> = (0..len)
                .map(|_| alphabet[(next() % alphabet.len() as u64) as usize])
                .collect();
            for n in names {
                for m in &matchers {
                    assert_eq!(
                        query_matches(&q, n, m),
                        query_matches_plain(&q, n, m),
                        "{:?} {:?} {m:?}",
                        String::from_utf8_lossy(&q),
                        String::from_utf8_lossy(n)
                    );
                }
            }
        }
    }

    #[test]
    fn glob_kinds() {
        let g = Glob::new("*.css").unwrap();
        assert!(matches!(g.kind, GlobKind::Suffix(_)));
        assert!(g.is_match(b"/app.css"));
        assert!(g.is_match(b"/a/b/c.css"));
        assert!(!g.is_match(b"/app.css.map"));
        let g = Glob::new("/w/Special:WhatLinksHere/*").unwrap();
        assert!(matches!(g.kind, GlobKind::Prefix(_)));
        assert!(g.is_match(b"/w/Special:WhatLinksHere/Foo"));
        assert!(g.is_match(b"/w/Special:WhatLinksHere/"));
        assert!(!g.is_match(b"/w/Special:WhatLinksHere"));
        let g = Glob::new("/api").unwrap();
        assert!(matches!(g.kind, GlobKind::Exact(_)));
        assert!(g.is_match(b"/api") && !g.is_match(b"/api/"));
    }

    #[test]
    fn glob_general() {
        let g = Glob::new("/u/*/p?st/*.[jJ][sS]").unwrap();
        assert!(g.is_match(b"/u/alice/post/x.js"));
        assert!(g.is_match(b"/u/a/b/past/y.JS"));
        assert!(!g.is_match(b"/u/alice/post/x.ts"));
        let g = Glob::new("*a*b*c").unwrap();
        assert!(g.is_match(b"xxaxxbxxc"));
        assert!(g.is_match(b"abcabc"));
        assert!(!g.is_match(b"acb"));
        let g = Glob::new("[!0-9]*").unwrap();
        assert!(g.is_match(b"x1") && !g.is_match(b"1x"));
        let g = Glob::new(r"a\*b").unwrap();
        assert!(g.is_match(b"a*b") && !g.is_match(b"axb"));
        assert!(Glob::new("a[").is_err());
        assert!(Glob::new("a\\").is_err());
        assert!(Glob::new("[z-a]").is_err());
        assert!(Glob::new("[]").is_err());
    }

    #[test]
    fn iglob_ignores_ascii_case_only() {
        let g = Glob::new_ignore_case("*special*:*WhatLinksHere*").unwrap();
        assert!(g.is_match(b"/w/SPECIAL:whatlinkshere/X"));
        assert!(g.is_match(b"/index.php/_special_:_WhatLinksHere"));
        assert!(!g.is_match(b"/w/Special:WhatLinksThere"));
        // Outside ASCII, bytes compare exactly (no Unicode case folding).
        let g = Glob::new_ignore_case("*\u{e9}t\u{e9}").unwrap();
        assert!(g.is_match("/\u{e9}T\u{e9}".as_bytes()));
        assert!(!g.is_match("/\u{c9}t\u{e9}".as_bytes()));
        let g = Glob::new_ignore_case("[A-C]x[!Y]").unwrap();
        assert!(g.is_match(b"bXz") && g.is_match(b"BxZ") && !g.is_match(b"Bxy"));
        for (p, yes, no) in [
            ("/API", "/api", "/apix"),
            ("/Static/*", "/STATIC/a.css", "/stat"),
            ("*.CSS", "/a.css", "/a.cs"),
        ] {
            let g = Glob::new_ignore_case(p).unwrap();
            assert!(!matches!(g.kind, GlobKind::General { .. }), "{p}");
            assert!(
                g.literal_form().is_none(),
                "{p}: letters are no exact literal"
            );
            assert!(
                g.is_match(yes.as_bytes()) && !g.is_match(no.as_bytes()),
                "{p}"
            );
        }
        assert!(Glob::new_ignore_case("*.123")
            .unwrap()
            .literal_form()
            .is_some());
        assert_eq!(
            format!("{:?}", Glob::new_ignore_case("a").unwrap()),
            "IGlob(\"a\")"
        );
    }

    /// Globs answer as the equivalent regex, with and without ignoring case, on subjects long
    /// enough for the 8-at-a-time screening of [`find_part`].
    #[test]
    fn globs_agree_with_regexes() {
        let toks = [
            "a", "B", "*", "*", "?", "[ab]", "[!a]", "[A-C]", "\\*", "ab", "b",
        ];
        let subject = b"aAbBcC*";
        let mut next = crate::policy::test_rng::xorshift(0x9e37_79b9_7f4a_7c15u64);
        for _ in 0..30_000 {
            let parts: Vec<&str> = (0..next() % 8)
                .map(|_| toks[(next() % toks.len() as u64) as usize])
                .collect();
            let s: Vec<u8> = (0..next() % 40)
                .map(|_| subject[(next() % subject.len() as u64) as usize])
                .collect();
            let re: String = parts
                .iter()
                .map(|t| match *t {
                    "*" => ".*",
                    "?" => ".",
                    "[!a]" => "[^a]",
                    t => t,
                })
                .collect();
            let p: String = parts.concat();
            for fold in [false, true] {
                let flags = if fold { "(?is-u)" } else { "(?s-u)" };
                let want = Regex::new(&format!("{flags}^(?:{re})$"))
                    .unwrap()
                    .is_match(&s);
                let g = if fold {
                    Glob::new_ignore_case(&p)
                } else {
                    Glob::new(&p)
                };
                let got = g.unwrap().is_match(&s);
                assert_eq!(
                    got,
                    want,
                    "{p:?} (fold {fold}) on {:?}",
                    String::from_utf8_lossy(&s)
                );
            }
        }
    }

    #[test]
    fn cidr() {
        let n = IpNet::parse("10.0.0.0/8").unwrap();
        assert!(n.contains("10.1.2.3".parse().unwrap()));
        assert!(n.contains("::ffff:10.1.2.3".parse().unwrap()));
        assert!(!n.contains("11.0.0.1".parse().unwrap()));
        assert!(!n.contains("::a00:1".parse().unwrap()));
        let e = IpNet::parse("10.0.0.1/8").unwrap_err();
        assert!(e.contains("\"10.0.0.0/8\""), "{e}");
        assert!(IpNet::parse("10.0.0.0/33").is_err());
        assert!(IpNet::parse("nope").is_err());
        let mut s = CidrSet::new();
        s.push(IpNet::parse("2001:db8::/32").unwrap());
        s.push(IpNet::parse("192.0.2.7").unwrap());
        assert!(s.contains("2001:db8:1::5".parse().unwrap()));
        assert!(s.contains("192.0.2.7".parse().unwrap()));
        assert!(!s.contains("192.0.2.8".parse().unwrap()));
        assert!(IpNet::parse("0.0.0.0/0")
            .unwrap()
            .contains("1.2.3.4".parse().unwrap()));
    }

    #[test]
    fn query_decoding() {
        let mut out = [0u8; 64];
        let n = decode_component(b"Special%3AWhatLinksHere%2FFoo+bar%zz%4", &mut out);
        assert_eq!(&out[..n], b"Special:WhatLinksHere/Foo bar%zz%4");
        let g = ValueMatcher::Glob(Glob::new("Special:WhatLinksHere/*").unwrap());
        assert!(query_matches(
            b"a=1&title=Special%3AWhatLinksHere%2FX",
            b"title",
            &g
        ));
        assert!(query_matches(
            b"title=Main&ti%74le=Special:WhatLinksHere/X",
            b"title",
            &g
        ));
        assert!(!query_matches(b"title=Main", b"title", &g));
        // Names as PHP reads them: leading spaces dropped, cut at a NUL.
        for q in [
            "+title=Special:WhatLinksHere/X",
            "%20%20title=Special:WhatLinksHere/X",
            "title%00x=Special:WhatLinksHere/X",
            "+title%00=Special:WhatLinksHere/X",
        ] {
            assert!(query_matches(q.as_bytes(), b"title", &g), "{q}");
        }
        assert!(!query_matches(
            b"ti+tle=Special:WhatLinksHere/X",
            b"title",
            &g
        ));
        assert!(!query_matches(b"+title=x", b"title", &ValueMatcher::Absent));
        assert!(query_matches(b"x", b"x", &ValueMatcher::Present));
        assert!(query_matches(b"y=1", b"x", &ValueMatcher::Absent));
        assert!(!query_matches(b"x=", b"x", &ValueMatcher::Absent));
        let long = format!("title={}", "a%20".repeat(400));
        let ends = ValueMatcher::Glob(Glob::new("a a *a ").unwrap());
        assert!(query_matches(long.as_bytes(), b"title", &ends));
    }
}
