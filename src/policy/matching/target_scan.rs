//! One pass over the part of a request target after the authority: is there a byte nginx
//! refuses (controls, space, DEL), is there a `#`, and where is the first `?`. Sixteen bytes
//! per step with SSE2 (every x86_64 CPU has it); a byte at a time for targets under 16 bytes
//! and on other architectures.

/// What [`scan`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scan {
    /// Some byte is a control, space or DEL ([`forbidden`]).
    pub forbidden: bool,
    /// Some byte is `#`.
    pub hash: bool,
    /// The index of the first `?`.
    pub question: Option<usize>,
}

/// Bytes a request target may not contain: controls, space and DEL.
#[inline]
pub fn forbidden(b: u8) -> bool {
    b <= 0x20 || b == 0x7F
}

/// [`Scan`] of `s`, byte by byte: the definition [`scan`] agrees with.
#[inline]
fn scan_bytewise(s: &[u8]) -> Scan {
    Scan {
        forbidden: s.iter().any(|&b| forbidden(b)),
        hash: s.contains(&b'#'),
        question: s.iter().position(|&b| b == b'?'),
    }
}

/// [`Scan`] of `s`.
#[cfg(not(target_arch = "x86_64"))]
#[inline]
pub fn scan(s: &[u8]) -> Scan {
    scan_bytewise(s)
}

/// [`Scan`] of `s`, sixteen bytes at a time.
#[cfg(target_arch = "x86_64")]
#[inline]
pub fn scan(s: &[u8]) -> Scan {
    use std::arch::x86_64::*;

    /// Bit masks (bit i = byte i of the 16) of forbidden bytes, `#` and `?` in `chunk`.
    #[inline(always)]
    fn masks(chunk: &[u8; 16]) -> (u32, u32, u32) {
        // SAFETY: SSE2 is part of x86_64; the load reads exactly the 16 bytes of `chunk`
        // (unaligned load).
        unsafe {
            let v = _mm_loadu_si128(chunk.as_ptr().cast());
            // `b <= 0x20` ⇔ saturating `b - 0x20` is 0.
            let low = _mm_cmpeq_epi8(_mm_subs_epu8(v, _mm_set1_epi8(0x20)), _mm_setzero_si128());
            let del = _mm_cmpeq_epi8(v, _mm_set1_epi8(0x7F));
            let hash = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'#' as i8));
            let question = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'?' as i8));
            (
                _mm_movemask_epi8(_mm_or_si128(low, del)) as u32,
                _mm_movemask_epi8(hash) as u32,
                _mm_movemask_epi8(question) as u32,
            )
        }
    }

    let n = s.len();
    if n < 16 {
        // A padded copy would stall the vector load behind the copy's narrower stores.
        return scan_bytewise(s);
    }
    let (mut bad, mut hash, mut question) = (0u32, 0u32, None);
    let chunk = |i: usize| masks(s[i..i + 16].try_into().unwrap_or(&[b'a'; 16]));
    let mut i = 0;
    // Up to the first `?` (nearly always in the first chunk or two) ...
    while i + 16 <= n {
        let (b, h, q) = chunk(i);
        (bad, hash) = (bad | b, hash | h);
        i += 16;
        if q != 0 {
            question = Some(i - 16 + q.trailing_zeros() as usize);
            break;
        }
    }
    // ... then forbidden bytes and `#` alone.
    while i + 16 <= n {
        let (b, h, _) = chunk(i);
        (bad, hash) = (bad | b, hash | h);
        i += 16;
    }
    if i < n {
        // The last 16 bytes, overlapping bytes already seen: flags are or-ed, and a `?`
        // found earlier comes first.
        let (b, h, q) = chunk(n - 16);
        (bad, hash) = (bad | b, hash | h);
        if question.is_none() && q != 0 {
            question = Some(n - 16 + q.trailing_zeros() as usize);
        }
    }
    Scan {
        forbidden: bad != 0,
        hash: hash != 0,
        question,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scan_agrees_with_bytewise() {
        // Bytes at the edges of each test, and the bytes tested for.
        let alphabet = [
            0x00, 0x1F, 0x20, 0x21, 0x7E, 0x7F, 0x80, 0xFF, b'#', b'?', b'a', b'/',
        ];
        let mut next = crate::policy::test_rng::xorshift(0x9e37_79b9_7f4a_7c15u64);
        for _ in 0..200_000 {
            let len = (next() % 70) as usize;
            // Mostly harmless bytes, so that single hits at every position are common.
            let s: Vec<u8> = (0..len)
                .map(|_| match next() % 8 {
                    0 => alphabet[(next() % alphabet.len() as u64) as usize],
                    _ => b'a' + (next() % 26) as u8,
                })
                .collect();
            assert_eq!(scan(&s), scan_bytewise(&s), "{s:?}");
        }
        // Every single special byte at every position of every length up to 40.
        for len in 0..40 {
            for pos in 0..len {
                for &b in &alphabet {
                    let mut s = vec![b'z'; len];
                    s[pos] = b;
                    assert_eq!(scan(&s), scan_bytewise(&s), "{s:?}");
                }
            }
        }
    }
}
