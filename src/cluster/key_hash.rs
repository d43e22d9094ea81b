//! The cluster key hash. Every node names a key the same way (the shared tables' tags and
//! the Redis key names are made of it), so it is defined here, bit for bit, independent of the
//! build, the CPU and any crate's version (ahash's output depends on all three).
//!
//! Hand-written on purpose: it runs on every request to a cluster zone, where SipHash-1-3 cost
//! about 110 instructions for an address key against the local tables' 30, most of what a
//! cluster zone added to a local one's request path. This is a keyed multiply-fold hash (the
//! construction of wyhash and foldhash): 64×64→128-bit products folded to 64 bits, the key
//! mixed in before every product. Its key comes from the zone name and the Redis password,
//! a secret every node shares: without it an attacker cannot choose keys that collide or
//! crowd one probe window.

/// Odd 64-bit constants (splitmix64's and the golden ratio's).
const C0: u64 = 0x9e37_79b9_7f4a_7c15;
const C1: u64 = 0xbf58_476d_1ce4_e5b9;
const C2: u64 = 0x94d0_49bb_1331_11eb;

/// A zone's key hash: its two 64-bit keys.
#[derive(Clone, Copy, Debug)]
pub(crate) struct KeyHash {
    k0: u64,
    k1: u64,
}

/// The 128-bit product of `a` and `b`, its halves xor-ed.
#[inline(always)]
fn fold(a: u64, b: u64) -> u64 {
    let p = u128::from(a) * u128::from(b);
    (p as u64) ^ (p >> 64) as u64
}

#[inline(always)]
fn read8(m: &[u8], i: usize) -> u64 {
    u64::from_le_bytes([
        m[i],
        m[i + 1],
        m[i + 2],
        m[i + 3],
        m[i + 4],
        m[i + 5],
        m[i + 6],
        m[i + 7],
    ])
}

#[inline(always)]
fn read4(m: &[u8], i: usize) -> u64 {
    u64::from(u32::from_le_bytes([m[i], m[i + 1], m[i + 2], m[i + 3]]))
}

impl KeyHash {
    /// The hash of zone `zone`'s keys; `password` is the Redis password (none: the zone name
    /// alone keys it).
    pub(crate) fn new(zone: &str, password: Option<&str>) -> KeyHash {
        let (k0, k1) = seed(zone, password);
        KeyHash { k0, k1 }
    }

    /// The hash of `m`, never 0 (0 marks an empty table slot).
    #[inline]
    pub(crate) fn hash(&self, m: &[u8]) -> u64 {
        self.finish(self.absorb(self.k0, m))
    }

    /// A hasher of a key written in pieces (a key's parts, as `KeySpec::hash_pieces` writes
    /// them): each piece is absorbed with its length, so where one ends is never ambiguous.
    pub(crate) fn pieces(&self) -> Pieces {
        Pieces {
            keys: *self,
            acc: self.k0,
        }
    }

    /// `acc` with `m` folded in. The bytes are read as two words (overlapping for 4 to 16
    /// bytes; longer ones fold 16 bytes at a time first), and with the length they determine
    /// `m`, so distinct byte strings differ in the last product's inputs.
    #[inline]
    fn absorb(&self, acc: u64, m: &[u8]) -> u64 {
        let n = m.len();
        let mut acc = acc ^ (n as u64).wrapping_mul(C0);
        let (a, b) = if n > 16 {
            let mut i = 0;
            while n - i > 16 {
                acc = fold(read8(m, i) ^ self.k1, read8(m, i + 8) ^ acc);
                i += 16;
            }
            (read8(m, n - 16), read8(m, n - 8))
        } else if n >= 8 {
            (read8(m, 0), read8(m, n - 8))
        } else if n >= 4 {
            (read4(m, 0), read4(m, n - 4))
        } else if n > 0 {
            let (x, y, z) = (m[0], m[n / 2], m[n - 1]);
            (u64::from(x) << 16 | u64::from(y) << 8 | u64::from(z), 0)
        } else {
            (0, 0)
        };
        fold(a ^ self.k1 ^ C1, b ^ acc)
    }

    #[inline]
    fn finish(&self, acc: u64) -> u64 {
        fold(acc ^ C2, self.k0 ^ self.k1.rotate_left(32)).max(1)
    }
}

/// [`KeyHash`] over a key's pieces ([`KeyHash::pieces`]).
#[derive(Clone, Copy)]
pub(crate) struct Pieces {
    keys: KeyHash,
    acc: u64,
}

impl std::hash::Hasher for Pieces {
    #[inline]
    fn write(&mut self, piece: &[u8]) {
        self.acc = self.keys.absorb(self.acc, piece);
    }

    #[inline]
    fn finish(&self) -> u64 {
        self.keys.finish(self.acc)
    }
}

/// The two keys of a zone's hash: a fixed FNV-1a + splitmix64 mix of its name and password,
/// stable forever.
pub(crate) fn seed(zone: &str, password: Option<&str>) -> (u64, u64) {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for b in zone
        .bytes()
        .chain([0xff])
        .chain(password.unwrap_or("").bytes())
    {
        h = (h ^ b as u64).wrapping_mul(0x0100_0000_01b3);
    }
    let mix = |mut z: u64| {
        z = z.wrapping_add(C0);
        z = (z ^ (z >> 30)).wrapping_mul(C1);
        z = (z ^ (z >> 27)).wrapping_mul(C2);
        z ^ (z >> 31)
    };
    (mix(h), mix(h ^ 0x5745_4952_434c_5553))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn key_hash_is_stable() {
        // Pinned: every node, every build, names a key the same way. A change here renames
        // every cluster key in Redis (nodes of two versions would count apart).
        let (k0, k1) = seed("api", None);
        assert_eq!((k0, k1), (0x6466_3079_b316_e224, 0x49a5_f7a4_5b75_17df));
        let h = KeyHash::new("api", None);
        let got: Vec<u64> = [
            &b""[..],
            b"k",
            b"192.0.2.7",
            b"ip=192.0.2.7 path=/w/index.php",
        ]
        .iter()
        .map(|m| h.hash(m))
        .collect();
        assert_eq!(got, PINNED, "{got:#x?}");
        let (p0, _) = seed("api", Some("secret"));
        assert_ne!(k0, p0);
    }

    const PINNED: [u64; 4] = [
        0x94ee_a882_696d_7204,
        0xc9e2_abeb_7291_f989,
        0x4f1a_0888_8825_f615,
        0xa70b_6d4d_0bf6_6503,
    ];

    /// Keys differing in one byte, in their length, or only in the zone's key hash apart,
    /// across every length path (0–3, 4–7, 8–16, longer).
    #[test]
    fn distinct_keys_hash_apart() {
        let h = KeyHash::new("z", Some("pw"));
        let mut seen = HashSet::new();
        let mut n = 0;
        for len in 0..48usize {
            let base: Vec<u8> = (0..len as u8).map(|i| i.wrapping_mul(37)).collect();
            assert!(seen.insert(h.hash(&base)), "len {len}");
            n += 1;
            for i in 0..len {
                for bit in [0x01u8, 0x80] {
                    let mut m = base.clone();
                    m[i] ^= bit;
                    assert!(seen.insert(h.hash(&m)), "len {len} byte {i} bit {bit:#x}");
                    n += 1;
                }
            }
        }
        assert_eq!(seen.len(), n);
        // Another zone (or password) names the same key differently.
        let other = KeyHash::new("z", Some("pw2"));
        assert_ne!(h.hash(b"192.0.2.7"), other.hash(b"192.0.2.7"));
    }

    /// Pieces keep their boundaries: the same bytes split differently hash apart.
    #[test]
    fn pieces_hash_apart_by_boundary() {
        use std::hash::Hasher;
        let h = KeyHash::new("z", Some("pw"));
        let of = |parts: &[&[u8]]| {
            let mut p = h.pieces();
            parts.iter().for_each(|x| p.write(x));
            p.finish()
        };
        let splits: [&[&[u8]]; 6] = [
            &[b"abcdef"],
            &[b"abc", b"def"],
            &[b"ab", b"cdef"],
            &[b"abcdef", b""],
            &[b"", b"abcdef"],
            &[b"abcd", b"e", b"f"],
        ];
        let all: HashSet<u64> = splits.iter().map(|s| of(s)).collect();
        assert_eq!(all.len(), splits.len());
        assert_eq!(of(&[b"abc", b"def"]), of(&[b"abc", b"def"]));
        // One piece is the one-shot hash.
        assert_eq!(of(&[b"192.0.2.7"]), h.hash(b"192.0.2.7"));
    }

    /// Consecutive addresses spread over the high bits a table's home bucket is taken from.
    #[test]
    fn addresses_spread_over_buckets() {
        let h = KeyHash::new("z", None);
        let mut buckets = [0u32; 64];
        for i in 0..64_000u32 {
            let ip = i.to_be_bytes();
            buckets[(h.hash(&ip) >> 58) as usize] += 1;
        }
        assert!(
            buckets.iter().all(|&c| (800..1200).contains(&c)),
            "{buckets:?}"
        );
    }
}
