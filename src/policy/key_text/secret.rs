//! The keyed hashes of key text: a hidden value (`~` and 16 hex digits) and a hashed address
//! (`h:` …) are SipHash-2-4 of the value under a per-engine key, so equal values look equal
//! while that key lives and the value is not shown; a key's reference (`#` …) is its hash
//! through a keyed bijection, so key operations can turn it back into the hash they act on.

/// SipHash-2-4 of `bytes` under the 128-bit key `(k0, k1)`.
fn siphash(k0: u64, k1: u64, bytes: &[u8]) -> u64 {
    let mut v = [
        k0 ^ 0x736f_6d65_7073_6575,
        k1 ^ 0x646f_7261_6e64_6f6d,
        k0 ^ 0x6c79_6765_6e65_7261,
        k1 ^ 0x7465_6462_7974_6573,
    ];
    fn round(v: &mut [u64; 4]) {
        v[0] = v[0].wrapping_add(v[1]);
        v[1] = v[1].rotate_left(13) ^ v[0];
        v[0] = v[0].rotate_left(32);
        v[2] = v[2].wrapping_add(v[3]);
        v[3] = v[3].rotate_left(16) ^ v[2];
        v[0] = v[0].wrapping_add(v[3]);
        v[3] = v[3].rotate_left(21) ^ v[0];
        v[2] = v[2].wrapping_add(v[1]);
        v[1] = v[1].rotate_left(17) ^ v[2];
        v[2] = v[2].rotate_left(32);
    }
    let absorb = |v: &mut [u64; 4], m: u64| {
        v[3] ^= m;
        round(v);
        round(v);
        v[0] ^= m;
    };
    let chunks = bytes.chunks_exact(8);
    let rest = chunks.remainder();
    for c in chunks {
        absorb(&mut v, u64::from_le_bytes(c.try_into().unwrap_or([0; 8])));
    }
    let mut last = [0u8; 8];
    last[..rest.len()].copy_from_slice(rest);
    last[7] = bytes.len() as u8;
    absorb(&mut v, u64::from_le_bytes(last));
    v[2] ^= 0xff;
    for _ in 0..4 {
        round(&mut v);
    }
    v[0] ^ v[1] ^ v[2] ^ v[3]
}

/// The keyed hash of a hidden value or address under the engine's `seed`.
pub fn keyed(seed: u64, bytes: &[u8]) -> u64 {
    siphash(seed, seed.rotate_left(32) ^ 0x6b65_7974_6578_7421, bytes)
}

const M1: u64 = 0xbf58_476d_1ce4_e5b9;
const M2: u64 = 0x94d0_49bb_1331_11eb;

/// The multiplicative inverse of odd `a` modulo 2⁶⁴ (Newton's iteration).
const fn inverse(a: u64) -> u64 {
    let mut x = a;
    let mut i = 0;
    while i < 6 {
        x = x.wrapping_mul(2u64.wrapping_sub(a.wrapping_mul(x)));
        i += 1;
    }
    x
}

/// Undoes `x ^= x >> s`.
fn unshift(y: u64, s: u32) -> u64 {
    let (mut x, mut t) = (y, y >> s);
    while t != 0 {
        x ^= t;
        t >>= s;
    }
    x
}

/// A key's reference: its `hash` through a bijection keyed by `key` (the zone's).
pub fn seal(hash: u64, key: u64) -> u64 {
    let mut x = hash ^ key;
    x ^= x >> 30;
    x = x.wrapping_mul(M1);
    x ^= x >> 27;
    x = x.wrapping_mul(M2);
    x ^= x >> 31;
    x ^ key.rotate_left(29)
}

/// The hash whose reference under `key` is `reference` ([`seal`]'s inverse).
pub fn unseal(reference: u64, key: u64) -> u64 {
    let mut x = unshift(reference ^ key.rotate_left(29), 31);
    x = x.wrapping_mul(const { inverse(M2) });
    x = unshift(x, 27);
    x = x.wrapping_mul(const { inverse(M1) });
    unshift(x, 30) ^ key
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn siphash_matches_the_reference_vectors() {
        let k0 = u64::from_le_bytes([0, 1, 2, 3, 4, 5, 6, 7]);
        let k1 = u64::from_le_bytes([8, 9, 10, 11, 12, 13, 14, 15]);
        let msg: Vec<u8> = (0..15).collect();
        assert_eq!(siphash(k0, k1, &msg), 0xa129_ca61_49be_45e5);
        assert_eq!(siphash(k0, k1, b""), 0x726f_db47_dd0e_0e31);
    }

    #[test]
    fn references_turn_back_into_their_hash() {
        let mut x = 0x1234_5678_9abc_def1u64;
        for _ in 0..10_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let key = x.rotate_left(11);
            assert_eq!(unseal(seal(x, key), key), x);
            assert_ne!(seal(x, key), seal(x, key ^ 1));
        }
    }
}
