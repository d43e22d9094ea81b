//! Properties of the normalizer that the engine's fast path relies on.

use proptest::prelude::*;
use weir::policy::matching::normalize::{is_normal, normalize_path};

fn path() -> impl Strategy<Value = Vec<u8>> {
    let piece = prop_oneof![
        Just(b"/".to_vec()),
        Just(b".".to_vec()),
        Just(b"..".to_vec()),
        Just(b"%2F".to_vec()),
        Just(b"%41".to_vec()),
        Just(b"%".to_vec()),
        Just(b"?".to_vec()),
        Just(b"#".to_vec()),
        Just(b"a".to_vec()),
        Just(b"b.c".to_vec()),
        Just(b";".to_vec()),
        Just("é".as_bytes().to_vec()),
    ];
    prop::collection::vec(piece, 0..12).prop_map(|parts| {
        let mut p = b"/".to_vec();
        parts.into_iter().for_each(|x| p.extend(x));
        p
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(5000))]

    /// A path the fast path accepts as already normal is exactly what normalization returns.
    #[test]
    fn normal_paths_normalize_to_themselves(p in path()) {
        let mut out = vec![0u8; p.len()];
        if is_normal(&p) {
            let n = normalize_path(&p, &mut out).expect("a normal path is valid");
            prop_assert_eq!(&out[..n], &p[..]);
        }
    }
}
