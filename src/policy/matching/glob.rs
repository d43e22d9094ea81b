//! Globs: `*`, `?` and `[...]` patterns, pre-tokenized, matched without allocation.

use super::*;

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
    pub(super) src: String,
    pub(super) ignore_case: bool,
    pub(super) kind: GlobKind,
}

#[derive(Clone)]
pub(super) enum GlobKind {
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
pub(super) enum Tok {
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
    pub(super) fn fold_case(&mut self) {
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
    pub(super) fn matches(&self, b: u8) -> bool {
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

    pub(super) fn build(pattern: &str, ignore_case: bool) -> Result<Glob, String> {
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
    pub(super) fn is_match_ignore_case(&self, s: &[u8]) -> bool {
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

pub(super) fn parse_class(pattern: &str, start: usize) -> Result<(Tok, usize), String> {
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

pub(super) fn split_at_stars(toks: &[Tok]) -> GlobKind {
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
    pub(super) fn match_general<const FOLD: bool>(&self, s: &[u8]) -> bool {
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
pub(super) fn part_matches<const FOLD: bool>(part: &[Tok], s: &[u8]) -> bool {
    part.iter().zip(s).all(|(t, &b)| {
        let b = if FOLD { b.to_ascii_lowercase() } else { b };
        t.matches(b)
    })
}

/// Bytes of `w` equal to the literal `l` (in either case under `FOLD`), flagged `0x80`.
#[inline]
pub(super) fn lit_flags<const FOLD: bool>(w: u64, l: u8) -> u64 {
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
pub(super) fn find_part<const FOLD: bool>(part: &[Tok], s: &[u8], from: usize) -> Option<usize> {
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
