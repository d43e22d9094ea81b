//! The classes and exemptions of a policy compiled into one matcher for the engine's hot path.
//!
//! [`Class::matches`] tests every shape on its own: the same path literal written in four
//! classes (`path = "/w/index.php"`) is compared four times, `*.css` is an `ends_with` per
//! shape, and every method list is a list of slice comparisons. [`ClassSet`] gives the same
//! answers with less work per request:
//!
//! * every distinct path test of the policy is one *atom*. Literal atoms (exact paths,
//!   prefixes, `*.ext` suffixes and the globs that reduce to them) are all decided in one go
//!   per request, before any shape is looked at: each compares the path's first or last 8
//!   bytes, read once as one word, with its own (longer literals compare the rest), and sets a
//!   bit. A shape's path field is then one mask test. Other atoms (general globs, regexes) run
//!   at most once per request, when a shape whose cheaper tests passed needs them;
//! * every distinct method is one bit, found once per request; a shape's method list is a
//!   mask;
//! * each class is evaluated at most once per request (a cache of known and matched classes,
//!   as the engine kept before).
//!
//! Header, cookie and query tests, client CIDRs, general globs and regexes run exactly as in
//! [`Shape::matches`], after the cheap tests of the shape have passed. A policy with more
//! distinct path tests or methods than the masks hold is matched shape by shape as before.

use super::{Class, LiteralGlob, PathTest, Shape};
use crate::policy::bytes;
use crate::policy::request::PreparedRequest;

/// Literal path atoms a compiled set holds (one bit each).
const MAX_LITERALS: usize = 64;
/// Other path atoms (general globs, regexes) a compiled set holds.
const MAX_TESTS: usize = 64;
/// Distinct methods a compiled set holds (bit 63 stands for every other method).
const MAX_METHODS: usize = 63;
const OTHER_METHOD: u64 = 1 << 63;
/// Classes whose result is cached per request (more are evaluated each time they are asked).
const CACHED_CLASSES: usize = 64;

/// Low `n` bytes of `s` (at most 8) as a little-endian word.
#[inline]
fn le_word(s: &[u8]) -> u64 {
    let n = s.len();
    if n >= 8 {
        u64::from_le_bytes(s[..8].try_into().unwrap_or([0; 8]))
    } else if n >= 4 {
        let lo = u32::from_le_bytes(s[..4].try_into().unwrap_or([0; 4])) as u64;
        let hi = u32::from_le_bytes(s[n - 4..].try_into().unwrap_or([0; 4])) as u64;
        lo | hi << (8 * (n - 4))
    } else {
        s.iter().rev().fold(0u64, |acc, &b| acc << 8 | b as u64)
    }
}

/// Mask of the low `n` bytes (`n` ≤ 8).
#[inline]
fn low_bytes(n: usize) -> u64 {
    if n >= 8 {
        u64::MAX
    } else {
        (1u64 << (8 * n)) - 1
    }
}

/// The path's first and last 8 bytes, read once per request.
#[derive(Clone, Copy)]
struct PathWords<'a> {
    path: &'a [u8],
    /// First `min(8, len)` bytes, little-endian, zero above.
    head: u64,
    /// Last `min(8, len)` bytes, little-endian with the path's last byte in the top byte, zero
    /// below.
    tail: u64,
}

impl<'a> PathWords<'a> {
    #[inline]
    fn new(path: &'a [u8]) -> PathWords<'a> {
        let n = path.len();
        let head = le_word(&path[..n.min(8)]);
        let tail = if n >= 8 {
            le_word(&path[n - 8..])
        } else {
            head.checked_shl(8 * (8 - n) as u32).unwrap_or(0)
        };
        PathWords { path, head, tail }
    }
}

/// A literal path test: exact, prefix or suffix, compared a word at a time.
#[derive(Clone, Debug)]
struct Literal {
    bit: u64,
    len: usize,
    /// Exact and prefix: the literal's first `min(8, len)` bytes as the path's `head` holds
    /// them, under `mask`. Suffix: its last `min(8, len)` bytes as `tail >> shift` holds them.
    word: u64,
    mask: u64,
    shift: u32,
    /// Bytes beyond the word: after the first 8 (exact, prefix) or before the last 8 (suffix).
    rest: Box<[u8]>,
}

impl Literal {
    fn head(bit: u64, lit: &[u8]) -> Literal {
        let n = lit.len().min(8);
        Literal {
            bit,
            len: lit.len(),
            word: le_word(&lit[..n]),
            mask: low_bytes(n),
            shift: 0,
            rest: lit[n..].into(),
        }
    }

    fn tail(bit: u64, lit: &[u8]) -> Literal {
        let n = lit.len().min(8);
        Literal {
            bit,
            len: lit.len(),
            word: le_word(&lit[lit.len() - n..]),
            mask: u64::MAX,
            shift: 8 * (8 - n) as u32,
            rest: lit[..lit.len() - n].into(),
        }
    }
}

/// A policy's literal path tests, all evaluated in one go per request.
#[derive(Clone, Debug, Default)]
struct Literals {
    exact: Vec<Literal>,
    prefix: Vec<Literal>,
    suffix: Vec<Literal>,
}

impl Literals {
    /// The bits of the literals `p` matches.
    #[inline]
    fn eval(&self, p: &PathWords<'_>) -> u64 {
        let n = p.path.len();
        let mut hit = 0;
        for l in &self.exact {
            if n == l.len
                && p.head == l.word
                && (l.rest.is_empty() || bytes::eq(&p.path[8..], &l.rest))
            {
                hit |= l.bit;
            }
        }
        for l in &self.prefix {
            if n >= l.len
                && p.head & l.mask == l.word
                && (l.rest.is_empty() || bytes::eq(&p.path[8..l.len], &l.rest))
            {
                hit |= l.bit;
            }
        }
        for l in &self.suffix {
            if n >= l.len
                && p.tail.checked_shr(l.shift).unwrap_or(0) == l.word
                && (l.rest.is_empty() || bytes::eq(&p.path[n - l.len..n - 8], &l.rest))
            {
                hit |= l.bit;
            }
        }
        hit
    }
}

/// One shape: the cheap tests as masks, the rest as the shape itself.
#[derive(Clone, Debug)]
struct CompiledShape {
    /// Method bits the shape allows (every bit: any method).
    methods: u64,
    /// Per path field: (literal bits, other test bits); one of them must match.
    path: Box<[(u64, u64)]>,
    /// The shape has client, header, cookie or query tests.
    after_path: bool,
    /// The shape, for those tests.
    shape: Shape,
}

#[derive(Clone, Debug)]
enum Compiled {
    Masks {
        methods: Box<[(usize, u64)]>,
        literals: Literals,
        tests: Box<[PathTest]>,
        shapes: Box<[CompiledShape]>,
        /// Classes, then exemptions, each a range of `shapes`.
        classes: Box<[(u32, u32)]>,
        exemptions: Box<[(u32, u32)]>,
    },
    /// Too many atoms or methods: the shapes one by one.
    Plain {
        classes: Box<[Class]>,
        exemptions: Box<[Class]>,
    },
}

/// A policy's classes and exemptions, compiled (see the module documentation).
#[derive(Clone, Debug)]
pub struct ClassSet {
    compiled: Compiled,
}

/// The per-request memory of a [`ClassSet`]: the literal atoms that matched, which other
/// atoms and classes are known and which matched.
pub struct Facts<'a> {
    path: &'a [u8],
    /// The request method's bit.
    method: u64,
    literals: u64,
    tests_known: u64,
    tests_hit: u64,
    classes_known: u64,
    classes_hit: u64,
}

/// What compiling a policy's path tests collects: the literal and other atoms, deduplicated.
#[derive(Default)]
struct Atoms {
    literals: Literals,
    tests: Vec<PathTest>,
    keys: Vec<(String, bool, u64)>,
}

impl Atoms {
    /// The atom for `t`: (literal bits, test bits), one bit set; `None` when full.
    fn add(&mut self, t: &PathTest) -> Option<(u64, u64)> {
        let key = format!("{t:?}");
        if let Some(&(_, lit, bit)) = self.keys.iter().find(|k| k.0 == key) {
            return Some(if lit { (bit, 0) } else { (0, bit) });
        }
        let lit = match t {
            PathTest::Exact(e) => Some(LiteralGlob::Exact(e)),
            PathTest::Prefix(p) => Some(LiteralGlob::Prefix(p)),
            PathTest::Glob(g) => g.literal_form(),
            PathTest::Regex(_) => None,
        };
        let lits = &mut self.literals;
        let n_lits = lits.exact.len() + lits.prefix.len() + lits.suffix.len();
        let r = match lit {
            Some(_) if n_lits >= MAX_LITERALS => return None,
            None if self.tests.len() >= MAX_TESTS => return None,
            Some(l) => {
                let bit = 1u64 << n_lits;
                match l {
                    LiteralGlob::Exact(l) => lits.exact.push(Literal::head(bit, l)),
                    LiteralGlob::Prefix(l) => lits.prefix.push(Literal::head(bit, l)),
                    LiteralGlob::Suffix(l) => lits.suffix.push(Literal::tail(bit, l)),
                }
                (bit, 0)
            }
            None => {
                let bit = 1u64 << self.tests.len();
                self.tests.push(t.clone());
                (0, bit)
            }
        };
        self.keys.push((key, r.0 != 0, r.0 | r.1));
        Some(r)
    }
}

impl ClassSet {
    /// Compiles `classes` and `exemptions` (indexes as in the policy).
    pub fn new(classes: &[Class], exemptions: &[Class]) -> ClassSet {
        ClassSet::build(classes, exemptions).unwrap_or_else(|| ClassSet::plain(classes, exemptions))
    }

    /// Per-shape matching, as [`Class::matches`] (the reference the compiled form is tested
    /// against, and the form for policies beyond the compiled limits).
    pub fn plain(classes: &[Class], exemptions: &[Class]) -> ClassSet {
        ClassSet {
            compiled: Compiled::Plain {
                classes: classes.into(),
                exemptions: exemptions.into(),
            },
        }
    }

    /// Compiled into masks (`false`: matched shape by shape, the policy being beyond the
    /// masks' limits).
    pub fn is_compiled(&self) -> bool {
        matches!(self.compiled, Compiled::Masks { .. })
    }

    fn build(classes: &[Class], exemptions: &[Class]) -> Option<ClassSet> {
        let mut methods: Vec<Box<[u8]>> = Vec::new();
        let mut atoms = Atoms::default();
        let mut shapes = Vec::new();
        let mut ranges = |list: &[Class], shapes: &mut Vec<CompiledShape>| -> Option<Box<[_]>> {
            let mut out = Vec::new();
            for c in list {
                let start = shapes.len() as u32;
                for s in &c.shapes {
                    let mut mask = if s.methods.is_empty() { u64::MAX } else { 0 };
                    for m in &s.methods {
                        let i = match methods.iter().position(|x| x[..] == m[..]) {
                            Some(i) => i,
                            None => {
                                methods.push(m.clone());
                                methods.len() - 1
                            }
                        };
                        if i >= MAX_METHODS || m.len() > 8 {
                            return None;
                        }
                        mask |= 1 << i;
                    }
                    let mut path = Vec::new();
                    for alts in &s.path {
                        let (mut lits, mut tests) = (0, 0);
                        for t in alts.iter() {
                            let (l, o) = atoms.add(t)?;
                            lits |= l;
                            tests |= o;
                        }
                        path.push((lits, tests));
                    }
                    shapes.push(CompiledShape {
                        methods: mask,
                        path: path.into(),
                        after_path: s.has_tests_after_path(),
                        shape: s.clone(),
                    });
                }
                out.push((start, shapes.len() as u32));
            }
            Some(out.into())
        };
        let classes = ranges(classes, &mut shapes)?;
        let exemptions = ranges(exemptions, &mut shapes)?;
        let methods = methods.iter().map(|m| (m.len(), le_word(m))).collect();
        Some(ClassSet {
            compiled: Compiled::Masks {
                methods,
                literals: atoms.literals,
                tests: atoms.tests.into(),
                shapes: shapes.into(),
                classes,
                exemptions,
            },
        })
    }

    /// The per-request memory for `req`: its method's bit and every literal path atom.
    #[inline]
    pub fn facts<'a>(&self, req: &PreparedRequest<'a>) -> Facts<'a> {
        let mut facts = Facts {
            path: req.path,
            method: OTHER_METHOD,
            literals: 0,
            tests_known: 0,
            tests_hit: 0,
            classes_known: 0,
            classes_hit: 0,
        };
        if let Compiled::Masks {
            methods, literals, ..
        } = &self.compiled
        {
            let m = req.method;
            if m.len() <= 8 && !methods.is_empty() {
                let w = le_word(m);
                if let Some(i) = methods
                    .iter()
                    .position(|&(len, word)| len == m.len() && word == w)
                {
                    facts.method = 1 << i;
                }
            }
            facts.literals = literals.eval(&PathWords::new(req.path));
        }
        facts
    }

    /// The first exemption that matches `req`.
    #[inline]
    pub fn exemption(&self, req: &PreparedRequest<'_>, facts: &mut Facts<'_>) -> Option<usize> {
        match &self.compiled {
            Compiled::Plain { exemptions, .. } => exemptions.iter().position(|e| e.matches(req)),
            Compiled::Masks { exemptions, .. } => exemptions
                .iter()
                .position(|&(a, b)| self.any_shape(a, b, req, facts)),
        }
    }

    /// Does class `c` match `req`? (Each class is evaluated once per request.) Always inlined:
    /// the engine's limit loop is its hot caller, and a call per limit costs it measurably.
    #[inline(always)]
    pub fn class(&self, c: usize, req: &PreparedRequest<'_>, facts: &mut Facts<'_>) -> bool {
        let bit = if c < CACHED_CLASSES { 1u64 << c } else { 0 };
        if facts.classes_known & bit != 0 {
            return facts.classes_hit & bit != 0;
        }
        let hit = match &self.compiled {
            Compiled::Plain { classes, .. } => classes[c].matches(req),
            Compiled::Masks { classes, .. } => {
                let (a, b) = classes[c];
                self.any_shape(a, b, req, facts)
            }
        };
        facts.classes_known |= bit;
        if hit {
            facts.classes_hit |= bit;
        }
        hit
    }

    #[inline]
    fn any_shape(&self, a: u32, b: u32, req: &PreparedRequest<'_>, facts: &mut Facts<'_>) -> bool {
        let Compiled::Masks { shapes, tests, .. } = &self.compiled else {
            return false;
        };
        shapes[a as usize..b as usize].iter().any(|s| {
            s.methods & facts.method != 0
                && s.path.iter().all(|&(lits, others)| {
                    facts.literals & lits != 0 || (others != 0 && facts.any_test(others, tests))
                })
                && (!s.after_path || s.shape.matches_after_path(req))
        })
    }
}

impl Facts<'_> {
    /// Does any of the other (non-literal) atoms in `mask` match? Evaluates the unknown ones
    /// until one does.
    #[inline(never)]
    fn any_test(&mut self, mask: u64, tests: &[PathTest]) -> bool {
        if self.tests_hit & mask != 0 {
            return true;
        }
        let mut unknown = mask & !self.tests_known;
        while unknown != 0 {
            let i = unknown.trailing_zeros() as usize;
            let bit = 1u64 << i;
            unknown &= !bit;
            self.tests_known |= bit;
            if tests[i].matches(self.path) {
                self.tests_hit |= bit;
                return true;
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::matching::Glob;

    /// One test compiled alone: does it match `path`?
    fn compiled_matches(t: &PathTest, path: &[u8]) -> bool {
        let mut atoms = Atoms::default();
        let (lit, other) = atoms.add(t).unwrap();
        let hit = atoms.literals.eval(&PathWords::new(path));
        if lit != 0 {
            hit & lit != 0
        } else {
            other != 0 && atoms.tests[0].matches(path)
        }
    }

    #[test]
    fn literal_atoms_agree_with_tests() {
        let lits = [
            "",
            "/",
            "/a",
            "/ab",
            "/abc",
            "/abcd",
            "/abcde",
            "/abcdefg",
            "/abcdefgh",
            "/abcdefghi",
            "/w/index.php",
            "/w/Special:WhatLinksHere/",
            ".css",
            ".woff2",
            "s",
            "/healthz",
        ];
        let paths = [
            "",
            "/",
            "/a",
            "/ab",
            "/abc",
            "/abcd",
            "/abcde",
            "/abcdefg",
            "/abcdefgh",
            "/abcdefghi",
            "/abcdefghij",
            "/w/index.php",
            "/w/index.phpx",
            "/w/Special:WhatLinksHere/X",
            "/app.css",
            "x.css",
            ".css",
            "/f.woff2",
            "/s",
            "/healthz",
            "/healthz/",
            "/abcdefghi.css",
        ];
        for l in lits {
            let mut tests = vec![
                PathTest::Exact(l.as_bytes().into()),
                PathTest::Prefix(l.as_bytes().into()),
            ];
            for g in [l.to_string(), format!("{l}*"), format!("*{l}")] {
                if let Ok(g) = Glob::new(&g) {
                    tests.push(PathTest::Glob(g));
                }
            }
            for t in tests {
                for p in paths {
                    assert_eq!(
                        compiled_matches(&t, p.as_bytes()),
                        t.matches(p.as_bytes()),
                        "{t:?} on {p:?}"
                    );
                }
            }
        }
    }
}
