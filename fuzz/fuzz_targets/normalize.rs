//! Fuzz target for `weir::policy::matching::normalize`: no input may panic, and no
//! output may be longer than its input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weir::policy::matching::normalize::{
    decode_component, normalize_path, normalize_target, query_args, split_target,
};

fuzz_target!(|data: &[u8]| {
    // Output buffers: exactly input-sized (the documented sufficient size)
    // and one deliberately too small, which must error instead of panicking.
    let mut out = vec![0u8; data.len()];
    let mut small = vec![0u8; data.len() / 2];

    let whole = normalize_target(data, &mut out);
    if let Ok(n) = whole {
        assert!(n <= data.len());
        assert!(
            n >= 1 && out[0] == b'/',
            "normalized path must start with '/'"
        );
        let norm = out[..n].to_vec();
        // Normalizing is idempotent up to escapes: a normalized path without
        // '%', '?', '#' or forbidden bytes normalizes to itself.
        if !norm
            .iter()
            .any(|&b| matches!(b, b'%' | b'?' | b'#') || b <= 0x20 || b == 0x7f)
        {
            let mut again = vec![0u8; norm.len()];
            let m = normalize_path(&norm, &mut again).expect("normalized path re-normalizes");
            assert_eq!(&again[..m], &norm[..], "normalization is not idempotent");
        }
        // A too small buffer is an error, never a panic or a wrong length.
        if let Ok(m) = normalize_target(data, &mut small) {
            assert_eq!(&small[..m], &norm[..]);
        }
    } else {
        let _ = normalize_target(data, &mut small);
    }

    match split_target(data) {
        Ok(t) => {
            assert!(t.path.first() == Some(&b'/'));
            let mut p = vec![0u8; t.path.len()];
            let r = normalize_path(t.path, &mut p);
            assert_eq!(r.is_ok(), whole.is_ok());
            if let Some(q) = t.query {
                for (name, value) in query_args(q) {
                    assert!(name.len() + value.len() < q.len() + 1);
                    let mut buf = vec![0u8; name.len().max(value.len())];
                    assert!(decode_component(name, &mut buf) <= name.len());
                    assert!(decode_component(value, &mut buf) <= value.len());
                }
            }
        }
        Err(e) => {
            assert!(whole.is_err());
            let _ = e.to_string();
        }
    }

    // The lenient helpers on arbitrary bytes.
    let _ = normalize_path(data, &mut out);
    for (name, value) in query_args(data) {
        let mut buf = vec![0u8; name.len() + value.len()];
        assert!(decode_component(name, &mut buf) <= name.len());
        assert!(decode_component(value, &mut buf) <= value.len());
    }
    assert!(decode_component(data, &mut out) <= data.len());
    let _ = decode_component(data, &mut small);
});
