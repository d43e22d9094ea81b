//! Key text round-trips: for every kind of key part and arbitrary values, the text a key is
//! rendered as (whole, hiding values, cut short) parses back to the very hash evaluation
//! charges.

use proptest::prelude::*;

use super::text::{parse_key, Named};
use crate::policy::request::{OwnedRequest, PreparedRequest};
use crate::policy::{parse_policy, Engine};

const KEYS: &[&str] = &[
    "\"ip\"",
    "\"global\"",
    "\"path\"",
    "\"method\"",
    "\"header:x-k\"",
    "\"cookie:s\"",
    "\"var:v\"",
    "[\"ip\", \"method\", \"path\", \"header:x-k\", \"cookie:s\", \"var:v\"]",
    "[\"header:x-k\", \"header:y\"]",
];

/// One engine per key, per hide list, per masked prefix.
fn engines() -> Vec<Engine> {
    let mut out = Vec::new();
    for hide in [
        "",
        "[key_text]\nhide = []\n",
        "[key_text]\nhide = [\"ip\", \"path\", \"method\", \"var\", \"cookie\"]\n",
    ] {
        for (i, key) in KEYS.iter().enumerate() {
            let prefix = if i == 0 || i == 6 {
                "ipv4_prefix = 24\n"
            } else {
                ""
            };
            let src = format!(
                "{hide}[zones.z]\nsize = \"64k\"\nalgorithm = \"gcra\"\nrate = \"1r/m\"\n\
                 [[limit]]\nname = \"l\"\nclass = \"*\"\nzone = \"z\"\nkey = {key}\n{prefix}"
            );
            out.push(Engine::new(parse_policy(&src, None).unwrap()).unwrap());
        }
    }
    out
}

fn bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..40),
        proptest::collection::vec(any::<u8>(), 150..400),
        Just(b"(absent)".to_vec()),
        Just(b" path=/x".to_vec()),
        Just(b"a\"b\\c".to_vec()),
        Just(b"~0123456789abcdef".to_vec()),
        Just(b"x #0123456789abcdef".to_vec()),
        Just(b"192.0.2.77".to_vec()),
        Just(b"(cut)".to_vec()),
        Just(vec![0xe2, 0x80, 0xa6]),
    ]
}

/// A cookie value as the cookie parser can give it: no `;`, no surrounding whitespace.
fn cookie(v: &[u8]) -> Vec<u8> {
    let v: Vec<u8> = v.iter().copied().filter(|&b| b != b';').collect();
    let t = |b: &u8| !b.is_ascii_whitespace();
    match (v.iter().position(t), v.iter().rposition(t)) {
        (Some(a), Some(b)) => v[a..=b].to_vec(),
        _ => Vec::new(),
    }
}

fn path(v: &[u8]) -> String {
    let mut p = String::from("/");
    for &b in v {
        match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b'/' => {
                p.push(b as char)
            }
            _ => p += &format!("%{b:02X}"),
        }
    }
    p
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn rendered_text_parses_back_to_the_same_hash(
        header in proptest::option::of(bytes()),
        header_y in proptest::option::of(bytes()),
        cookie_v in proptest::option::of(bytes()),
        var in proptest::option::of(bytes()),
        path_v in bytes(),
        method in proptest::collection::vec(any::<u8>(), 1..12),
        v4 in any::<[u8; 4]>(),
        local in any::<bool>(),
        max in prop_oneof![Just(crate::policy::key_text::TEXT_MAX), 40usize..200],
    ) {
        thread_local! {
            static ENGINES: Vec<Engine> = engines();
        }
        let mut req = if local {
            OwnedRequest::local("GET", &path(&path_v))
        } else {
            OwnedRequest::new("GET", &path(&path_v), std::net::IpAddr::from(v4))
        };
        req.method = method;
        if let Some(h) = &header {
            req.headers.push((b"x-k".to_vec(), h.clone()));
        }
        if let Some(h) = &header_y {
            req.headers.push((b"y".to_vec(), h.clone()));
        }
        if let Some(c) = &cookie_v {
            let mut pair = b"s=".to_vec();
            pair.extend_from_slice(&cookie(c));
            req.headers.push((b"cookie".to_vec(), pair));
        }
        if let Some(v) = &var {
            req = req.var(0, v.clone());
        }
        ENGINES.with(|engines| {
            for e in engines {
                let mut text = String::new();
                let want = e
                    .with_key_request(0, &req, |p, ok| {
                        e.write_key_text(0, p, ok, max, &mut text);
                        ok.then(|| e.key_hash_of(0, p)).flatten()
                    })
                    .unwrap();
                let Some(want) = want else { continue };
                assert!(text.len() <= max, "{text}");
                assert!(
                    text.bytes().all(|b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\'),
                    "{text}"
                );
                let parts = &e.policy().limits[0].key.parts;
                let got = match parse_key(parts, text.as_bytes()) {
                    Ok(Named::Reference(r)) => e.key_of_reference(0, r),
                    Ok(Named::Request(r, reference)) => {
                        let p = PreparedRequest::new(&r.view, &r.path, b"", r.client);
                        let h = e.key_hash_of(0, &p).expect("the limit applies");
                        if let Some(r) = reference {
                            assert_eq!(e.key_of_reference(0, r), h, "{text}");
                        }
                        h
                    }
                    Err(why) => panic!("{text:?}: {why}"),
                };
                assert_eq!(got, want, "{text}");
            }
        });
    }
}

/// A 154-byte header key: logs show it whole; the status's 104 bytes cut it with `(cut)` and
/// its reference, which names the key.
#[test]
fn a_long_header_key_is_whole_in_logs_and_cut_with_its_reference_in_the_status() {
    let src = "[key_text]\nhide = []\n[zones.z]\nsize = \"64k\"\nalgorithm = \"gcra\"\n\
               rate = \"1r/m\"\n[[limit]]\nname = \"l\"\nclass = \"*\"\nzone = \"z\"\n\
               key = \"header:x-k\"\n";
    let e = Engine::new(parse_policy(src, None).unwrap()).unwrap();
    let value = "v".repeat(154);
    let req = OwnedRequest::new("GET", "/", "192.0.2.1".parse().unwrap()).header("x-k", &value);
    let mut logged = String::new();
    e.render_key(0, &req, &mut logged);
    assert_eq!(logged, value);
    let mut cut = String::new();
    let want = e
        .with_key_request(0, &req, |p, ok| {
            e.write_key_text(0, p, ok, 104, &mut cut);
            e.key_hash_of(0, p)
        })
        .flatten()
        .unwrap();
    assert!(cut.len() <= 104 && cut.contains("(cut) #"), "{cut}");
    let parts = &e.policy().limits[0].key.parts;
    match parse_key(parts, cut.as_bytes()) {
        Ok(Named::Reference(r)) => assert_eq!(e.key_of_reference(0, r), want),
        _ => panic!("{cut}: not a reference"),
    }
    let without = cut.split(" #").next().unwrap();
    assert!(parse_key(parts, without.as_bytes()).is_err_and(|e| e.contains("cut")));
}
