use super::*;
use crate::policy::request::OwnedRequest;

fn key(spec: &KeySpec, req: &OwnedRequest, path: &str, client: &str) -> Vec<u8> {
    let client = (client != "local").then(|| client.parse().unwrap());
    let p = PreparedRequest::new(req, path.as_bytes(), b"", client);
    let mut buf = [0u8; KEY_BUF_LEN];
    let n = spec.build(&p, &mut buf);
    buf[..n].to_vec()
}

#[test]
fn ip_encoding() {
    let r = OwnedRequest::new("GET", "/", "192.0.2.1".parse().unwrap());
    let spec = KeySpec::new(vec![KeyPart::Ip {
        v4_prefix: 24,
        v6_prefix: 64,
    }]);
    assert_eq!(
        key(&spec, &r, "/", "192.0.2.77"),
        vec![0, 1, 4, 24, 192, 0, 2, 0]
    );
    assert_eq!(
        key(&spec, &r, "/", "::ffff:192.0.2.77"),
        key(&spec, &r, "/", "192.0.2.1")
    );
    // The local client: one key, apart from every address (even with /0 prefixes).
    assert_eq!(key(&spec, &r, "/", "local"), vec![0, 1, 0, 24, 64]);
    let any = KeySpec::new(vec![KeyPart::Ip {
        v4_prefix: 0,
        v6_prefix: 0,
    }]);
    for c in ["0.0.0.0", "::", "192.0.2.1"] {
        assert_ne!(key(&any, &r, "/", "local"), key(&any, &r, "/", c));
    }
}

#[test]
fn ip_key_is_build() {
    let r = OwnedRequest::new("GET", "/", "192.0.2.1".parse().unwrap());
    for (v4, v6) in [(32, 64), (24, 48), (0, 0), (17, 128), (32, 127)] {
        let spec = KeySpec::new(vec![KeyPart::Ip {
            v4_prefix: v4,
            v6_prefix: v6,
        }]);
        for c in [
            "192.0.2.77",
            "::ffff:10.1.2.3",
            "2001:db8:1:2:3:4:5:6",
            "::",
            "0.0.0.0",
            "local",
        ] {
            let p = PreparedRequest::new(&r, b"/", b"", (c != "local").then(|| c.parse().unwrap()));
            let mut out = [0u8; 20];
            let n = ip_key(p.client, v4, v6, &mut out);
            assert_eq!(out[..n], key(&spec, &r, "/", c)[..], "{c} /{v4} /{v6}");
        }
    }
}

#[test]
fn copy_short_copies() {
    let src: Vec<u8> = (1..=40).collect();
    for n in 0..=40 {
        let mut dst = vec![0u8; n];
        copy_short(&mut dst, &src[..n]);
        assert_eq!(dst, &src[..n]);
    }
}

#[test]
fn var_parts_unambiguous() {
    let var = |name: &[u8], index| KeyPart::Var {
        name: name.into(),
        index,
        mask: VarMask::default(),
    };
    let specs = [
        vec![var(b"a", 0)],
        vec![var(b"b", 1)],
        vec![KeyPart::Header(b"a".to_vec().into())],
        vec![var(b"a", 0), var(b"b", 1)],
        vec![var(b"b", 1), var(b"a", 0)],
    ]
    .map(KeySpec::new);
    // Values that shift bytes between the two variables; each value also in header `a`.
    let mut seen: Vec<Vec<u8>> = Vec::new();
    for (a, b) in [("x", "yz"), ("xy", "z"), ("xyz", "")] {
        let r = OwnedRequest::new("GET", "/", "192.0.2.1".parse().unwrap())
            .header("a", a)
            .var(0, a)
            .var(1, b);
        let p = PreparedRequest::new(&r, b"/", b"", r.peer);
        for spec in &specs {
            let mut buf = [0u8; KEY_BUF_LEN];
            let n = spec.build(&p, &mut buf);
            assert!(!seen.contains(&buf[..n].to_vec()), "{spec:?} {a:?} {b:?}");
            seen.push(buf[..n].to_vec());
        }
    }
}

/// A one-variable key's kept prefix, finished with the value, is the key's piece hash
/// (the cluster zones' `ClusterVar` plan and `General` plan name keys alike).
#[test]
fn var_prefix_finishes_as_hash_pieces() {
    use std::hash::BuildHasher;
    let hasher = ahash::RandomState::with_seeds(1, 2, 3, 4);
    let var = |mask| KeyPart::Var {
        name: b"server_name".to_vec().into(),
        index: 1,
        mask,
    };
    let spec = KeySpec::new(vec![var(VarMask::default())]);
    let (index, prefix) = spec.var_prefix(hasher.build_hasher()).unwrap();
    assert_eq!(index, 1);
    let base = OwnedRequest::new("GET", "/", "192.0.2.1".parse().unwrap());
    for v in ["a", "bench", "x".repeat(300).as_str()] {
        let r = base.clone().var(1, v);
        let p = PreparedRequest::new(&r, b"/", b"", r.peer);
        assert_eq!(
            KeySpec::finish_var(prefix.clone(), v.as_bytes()),
            spec.hash_pieces(&p, hasher.build_hasher()),
            "{v}"
        );
    }
    // Masked, or not alone: no prefix.
    let masked = VarMask {
        v4: Some(24),
        v6: None,
    };
    assert!(KeySpec::new(vec![var(masked)])
        .var_prefix(hasher.build_hasher())
        .is_none());
    assert!(KeySpec::new(vec![KeyPart::IP, var(VarMask::default())])
        .var_prefix(hasher.build_hasher())
        .is_none());
}

#[test]
fn vars_set_needs_every_var_non_empty() {
    let spec = KeySpec::new(vec![
        KeyPart::IP,
        KeyPart::Var {
            name: b"a".to_vec().into(),
            index: 0,
            mask: VarMask::default(),
        },
        KeyPart::Var {
            name: b"b".to_vec().into(),
            index: 1,
            mask: VarMask::default(),
        },
    ]);
    let base = OwnedRequest::new("GET", "/", "192.0.2.1".parse().unwrap());
    for (r, set) in [
        (base.clone().var(0, "1").var(1, "2"), true),
        (base.clone().var(0, "1"), false),
        (base.clone().var(0, "1").var(1, ""), false),
        (base.clone().var(1, "2"), false),
        (base.clone(), false),
    ] {
        let p = PreparedRequest::new(&r, b"/", b"", r.peer);
        assert_eq!(spec.vars_set(&p), set, "{:?}", r.vars);
    }
    // Keys without var parts always apply.
    let p = PreparedRequest::new(&base, b"/", b"", base.peer);
    assert!(KeySpec::new(vec![KeyPart::Path]).vars_set(&p));
}

#[test]
fn composite_unambiguous() {
    let r = OwnedRequest::new("GET", "/", "192.0.2.1".parse().unwrap())
        .header("X-A", "")
        .header("Cookie", "a=");
    let h = KeySpec::new(vec![KeyPart::Header(b"x-a".to_vec().into())]);
    let hb = KeySpec::new(vec![KeyPart::Header(b"x-b".to_vec().into())]);
    let c = KeySpec::new(vec![KeyPart::Cookie(b"x-a".to_vec().into())]);
    let k_h = key(&h, &r, "/", "192.0.2.1");
    assert_ne!(k_h, key(&hb, &r, "/", "192.0.2.1"));
    assert_ne!(k_h, key(&c, &r, "/", "192.0.2.1"));
    let pm = KeySpec::new(vec![KeyPart::Path, KeyPart::Method]);
    let r2 = OwnedRequest::new("T", "/", "192.0.2.1".parse().unwrap());
    let r3 = OwnedRequest::new("ET", "/", "192.0.2.1".parse().unwrap());
    assert_ne!(
        key(&pm, &r2, "/GE", "192.0.2.1"),
        key(&pm, &r3, "/GET", "192.0.2.1")
    );
}

#[test]
fn long_keys_hashed() {
    let r = OwnedRequest::new("GET", "/", "192.0.2.1".parse().unwrap());
    let spec = KeySpec::new(vec![KeyPart::Path]);
    let a = "/".to_string() + &"x".repeat(400) + "a";
    let b = "/".to_string() + &"x".repeat(400) + "b";
    let ka = key(&spec, &r, &a, "192.0.2.1");
    let kb = key(&spec, &r, &b, "192.0.2.1");
    assert_eq!(ka.len(), KEY_BUF_LEN);
    assert_eq!(ka[0], FORMAT_HASHED);
    assert_ne!(ka, kb);
    assert_eq!(ka, key(&spec, &r, &a, "192.0.2.1"));
    // Exactly fitting key stays plain.
    let fit = "/".to_string() + &"y".repeat(KEY_BUF_LEN - 1 - 5 - 1);
    let kf = key(&spec, &r, &fit, "192.0.2.1");
    assert_eq!((kf.len(), kf[0]), (KEY_BUF_LEN, FORMAT_PLAIN));
}

/// Hashing the pieces tells keys apart exactly as their bytes do: over many specs and
/// requests (values that shift bytes between parts, absent and empty values, long keys),
/// two piece hashes are equal iff the two keys' bytes are.
#[test]
fn piece_hashes_separate_keys_as_bytes_do() {
    let specs = [
        vec![KeyPart::Path, KeyPart::Method],
        vec![KeyPart::Method, KeyPart::Path],
        vec![
            KeyPart::IP,
            KeyPart::Cookie(b"s".to_vec().into()),
            KeyPart::Path,
        ],
        vec![KeyPart::Header(b"x-a".to_vec().into())],
        vec![KeyPart::Header(b"x-b".to_vec().into())],
        vec![KeyPart::Cookie(b"x-a".to_vec().into())],
        vec![
            KeyPart::Ip {
                v4_prefix: 24,
                v6_prefix: 48,
            },
            KeyPart::Global,
        ],
    ]
    .map(KeySpec::new);
    let long = "/".to_string() + &"x".repeat(400);
    let mut cases = Vec::new();
    for (method, path) in [
        ("GET", "/a"),
        ("GE", "/Ta"),
        ("T", "/a"),
        ("GET", long.as_str()),
    ] {
        for client in ["192.0.2.1", "192.0.2.9", "2001:db8::1", "local"] {
            for headers in [
                &[][..],
                &[("x-a", ""), ("cookie", "s=1")],
                &[("x-a", "v"), ("cookie", "s=")],
            ] {
                let mut r = match client {
                    "local" => OwnedRequest::local(method, path),
                    c => OwnedRequest::new(method, path, c.parse().unwrap()),
                };
                for (n, v) in headers {
                    r = r.header(n, v);
                }
                cases.push((r, path, client));
            }
        }
    }
    let table = crate::table::Table::new(crate::table::Table::bytes_for(64), 1, 0).unwrap();
    let mut seen: Vec<(Vec<u8>, u64)> = Vec::new();
    for spec in &specs {
        for (r, path, client) in &cases {
            let p = PreparedRequest::new(r, path.as_bytes(), b"", r.peer);
            let h = spec.hash_pieces(&p, table.key_hasher());
            assert_eq!(h, spec.hash_pieces(&p, table.key_hasher()));
            seen.push((key(spec, r, path, client), h));
        }
    }
    for (a, ha) in &seen {
        for (b, hb) in &seen {
            assert_eq!(a == b, ha == hb, "{a:?} {b:?}");
        }
    }
}
