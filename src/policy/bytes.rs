//! Byte search and equality in the short strings of one request (cookie pairs, query
//! arguments, names): a word at a time, inline, with no call and no setup. On the tens of bytes these usually are, a
//! vectorized search spends more on its dispatch and set-up than on the search.

const LO: u64 = 0x0101_0101_0101_0101;
const HI: u64 = 0x8080_8080_8080_8080;

/// `0x80` in every byte of `w` that is zero, and possibly in bytes above a zero byte (a
/// borrow); the lowest flagged byte is always the first zero byte.
#[inline(always)]
fn zero_bytes(w: u64) -> u64 {
    w.wrapping_sub(LO) & !w & HI
}

/// The 8 bytes of `s` at `i` as a little-endian word; `s[i..i + 8]` must exist.
#[inline(always)]
pub fn word(s: &[u8], i: usize) -> u64 {
    u64::from_le_bytes(s[i..i + 8].try_into().unwrap_or([0; 8]))
}

/// The first index of a byte of `s` for which `hit(word ^ pattern)` flags it, scanning words.
#[inline(always)]
fn find_by(s: &[u8], flags: impl Fn(u64) -> u64, byte: impl Fn(u8) -> bool) -> Option<usize> {
    let n = s.len();
    if n < 8 {
        return s.iter().position(|&b| byte(b));
    }
    let mut i = 0;
    while i + 8 <= n {
        let z = flags(word(s, i));
        if z != 0 {
            return Some(i + (z.trailing_zeros() / 8) as usize);
        }
        i += 8;
    }
    if i < n {
        // The last word overlaps bytes already searched; none of them matched, so none of
        // them is flagged (flags only ever sit above a true match).
        let z = flags(word(s, n - 8));
        if z != 0 {
            return Some(n - 8 + (z.trailing_zeros() / 8) as usize);
        }
    }
    None
}

/// `0x80` in exactly the bytes of `w` that are zero.
#[inline(always)]
fn zero_bytes_exact(w: u64) -> u64 {
    const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    !(((w & LOW7).wrapping_add(LOW7)) | w | LOW7)
}

/// The bytes of `s` (shorter than 8) as a little-endian word, zero-padded, without a copy loop.
#[inline(always)]
pub fn short_word(s: &[u8]) -> u64 {
    let n = s.len();
    debug_assert!(n < 8);
    if n >= 4 {
        // Two overlapping 4-byte loads; the overlap holds the same bytes in both.
        let lo = u32::from_le_bytes(s[..4].try_into().unwrap_or([0; 4]));
        let hi = u32::from_le_bytes(s[n - 4..].try_into().unwrap_or([0; 4]));
        lo as u64 | (hi as u64) << (8 * (n - 4))
    } else {
        s.iter().rev().fold(0u64, |acc, &b| acc << 8 | b as u64)
    }
}

/// `0x80` in exactly the bytes of `w` equal to `b`.
#[inline(always)]
pub fn bytes_equal_to(w: u64, b: u8) -> u64 {
    zero_bytes_exact(w ^ LO.wrapping_mul(b as u64))
}

/// The last index of `b` in `s` (as `memchr::memrchr`).
#[inline]
pub fn rfind(s: &[u8], b: u8) -> Option<usize> {
    let n = s.len();
    if n < 8 {
        return s.iter().rposition(|&x| x == b);
    }
    let p = LO.wrapping_mul(b as u64);
    let mut end = n;
    while end >= 8 {
        let z = zero_bytes_exact(word(s, end - 8) ^ p);
        if z != 0 {
            return Some(end - 1 - (z.leading_zeros() / 8) as usize);
        }
        end -= 8;
    }
    if end > 0 {
        // The first word overlaps bytes already searched: none of them is `b`, and the exact
        // test flags nothing else.
        let z = zero_bytes_exact(word(s, 0) ^ p);
        if z != 0 {
            return Some(7 - (z.leading_zeros() / 8) as usize);
        }
    }
    None
}

/// The first index of `b` in `s` (as `memchr::memchr`).
#[inline]
pub fn find(s: &[u8], b: u8) -> Option<usize> {
    let p = LO.wrapping_mul(b as u64);
    find_by(s, |w| zero_bytes(w ^ p), |x| x == b)
}

/// The first index of `a` or `b` in `s` (as `memchr::memchr2`).
#[inline]
pub fn find2(s: &[u8], a: u8, b: u8) -> Option<usize> {
    let (pa, pb) = (LO.wrapping_mul(a as u64), LO.wrapping_mul(b as u64));
    find_by(
        s,
        |w| zero_bytes(w ^ pa) | zero_bytes(w ^ pb),
        |x| x == a || x == b,
    )
}

/// The first index of `a`, `b` or `c` in `s` (as `memchr::memchr3`).
#[inline]
pub fn find3(s: &[u8], a: u8, b: u8, c: u8) -> Option<usize> {
    let (pa, pb, pc) = (
        LO.wrapping_mul(a as u64),
        LO.wrapping_mul(b as u64),
        LO.wrapping_mul(c as u64),
    );
    find_by(
        s,
        |w| zero_bytes(w ^ pa) | zero_bytes(w ^ pb) | zero_bytes(w ^ pc),
        |x| x == a || x == b || x == c,
    )
}

/// `a == b`, inline for the short slices the hot path compares (header and cookie names,
/// glob prefixes and suffixes, query argument names), where a `memcmp` call costs more than
/// the comparison: up to 32 bytes as overlapping word (or half-word) compares.
#[inline]
pub fn eq(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    let half = |s: &[u8], i: usize| u32::from_le_bytes(s[i..i + 4].try_into().unwrap_or([0; 4]));
    match n {
        0..=3 => a.iter().zip(b).all(|(x, y)| x == y),
        4..=7 => half(a, 0) == half(b, 0) && half(a, n - 4) == half(b, n - 4),
        8..=16 => word(a, 0) == word(b, 0) && word(a, n - 8) == word(b, n - 8),
        17..=32 => {
            (word(a, 0) ^ word(b, 0)) | (word(a, 8) ^ word(b, 8)) == 0
                && (word(a, n - 16) ^ word(b, n - 16)) | (word(a, n - 8) ^ word(b, n - 8)) == 0
        }
        _ => a == b,
    }
}

/// `s.starts_with(p)` with [`eq`].
#[inline]
pub fn starts_with(s: &[u8], p: &[u8]) -> bool {
    s.len() >= p.len() && eq(&s[..p.len()], p)
}

/// `s.ends_with(p)` with [`eq`].
#[inline]
pub fn ends_with(s: &[u8], p: &[u8]) -> bool {
    s.len() >= p.len() && eq(&s[s.len() - p.len()..], p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eq_agrees_with_slices() {
        let base: Vec<u8> = (0..40u8).map(|i| b'a' + i % 26).collect();
        for n in 0..=40 {
            // (0..=40 covers every arm of `eq`.)
            let a = &base[..n];
            assert!(eq(a, a) && starts_with(&base, a) && ends_with(a, a));
            assert!(!eq(a, &base[..n.saturating_sub(1)]) || n == 0);
            // One byte changed at every position, and every prefix and suffix length.
            for i in 0..n {
                let mut b = a.to_vec();
                b[i] ^= 0x20;
                assert!(!eq(a, &b), "{n} {i}");
                assert!(starts_with(a, &b[..i]), "{n} {i}");
                assert!(!starts_with(a, &b[..=i]), "{n} {i}");
                assert!(ends_with(a, &b[i + 1..]), "{n} {i}");
                assert!(!ends_with(a, &b[i..]), "{n} {i}");
            }
        }
    }

    #[test]
    fn agrees_with_memchr() {
        let mut next = crate::policy::test_rng::xorshift(0x2545_f491_4f6c_dd1du64);
        // Small alphabets with 0x00, 0x01, 0x80 and 0xff around the needles make borrows and
        // high bytes common.
        let alphabet = [b'a', b';', b'=', 0, 1, 0x80, 0xff, b'%', b'+', b':', b'<'];
        for _ in 0..200_000 {
            let len = (next() % 40) as usize;
            let s: Vec<u8> = (0..len)
                .map(|_| alphabet[(next() % alphabet.len() as u64) as usize])
                .collect();
            let (a, b) = (
                alphabet[(next() % alphabet.len() as u64) as usize],
                alphabet[(next() % alphabet.len() as u64) as usize],
            );
            assert_eq!(find(&s, a), memchr::memchr(a, &s), "{s:?} {a}");
            assert_eq!(find2(&s, a, b), memchr::memchr2(a, b, &s), "{s:?} {a} {b}");
            assert_eq!(rfind(&s, a), memchr::memrchr(a, &s), "{s:?} {a}");
            let c = alphabet[(next() % alphabet.len() as u64) as usize];
            assert_eq!(find3(&s, a, b, c), memchr::memchr3(a, b, c, &s), "{s:?}");
        }
    }
}
