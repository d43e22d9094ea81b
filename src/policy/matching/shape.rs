//! Value matchers, URL shapes and classes: the tests a policy's `match` entries compile to.

use super::*;

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
    /// Variable tests: (name, its index among the policy's variables, matcher); a variable
    /// has one value or none ([`crate::policy::RequestView::var`]).
    pub vars: Vec<(Box<[u8]>, usize, ValueMatcher)>,
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
            || !self.vars.is_empty()
    }

    /// The tests after method and path: client, headers, cookies, query, variables. (Out of line: inlined,
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
        for (_, index, m) in &self.vars {
            if !m.matches_all(req.view.var(*index).into_iter()) {
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
