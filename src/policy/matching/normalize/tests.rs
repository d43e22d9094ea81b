//! Unit tests of target splitting, path normalization and query decoding.

use super::*;

#[test]
fn is_normal_words_agree_with_bytewise() {
    // Every path of up to 7 bytes over the bytes that matter, at every offset across a
    // word boundary (a prefix of plain bytes moves them), against the byte walk.
    let alphabet = b"/.%?#a";
    let mut checked = 0;
    for len in 0..=7u32 {
        for mut code in 0..alphabet.len().pow(len) {
            let mut tail = Vec::new();
            for _ in 0..len {
                tail.push(alphabet[code % alphabet.len()]);
                code /= alphabet.len();
            }
            for pad in [0, 5, 7, 8, 13] {
                let mut p = b"/".to_vec();
                p.extend(std::iter::repeat_n(b'x', pad));
                p.extend(&tail);
                assert_eq!(
                    is_normal(&p),
                    is_normal_bytewise(&p),
                    "{:?}",
                    p.escape_ascii()
                );
                checked += 1;
            }
            assert_eq!(is_normal(&tail), is_normal_bytewise(&tail));
        }
    }
    assert!(checked > 1_000_000, "{checked}");
}

fn norm(t: &str) -> Result<String, UriError> {
    norm_bytes(t.as_bytes()).map(|v| String::from_utf8(v).unwrap())
}

fn norm_bytes(t: &[u8]) -> Result<Vec<u8>, UriError> {
    let mut out = vec![0u8; t.len()];
    let n = normalize_target(t, &mut out)?;
    assert!(n <= t.len());
    out.truncate(n);
    Ok(out)
}

#[test]
fn plain_paths_are_unchanged() {
    for p in [
        "/",
        "/a",
        "/a/b/",
        "/a.b",
        "/a./b",
        "/a;b=c",
        "/a\\b",
        "/~x/!$&'()*+,",
    ] {
        assert_eq!(norm(p).unwrap(), p, "{p}");
    }
}

#[test]
fn slashes_merge() {
    assert_eq!(norm("//a///b//").unwrap(), "/a/b/");
    assert_eq!(norm("/a/%2F/b").unwrap(), "/a/b");
    assert_eq!(norm("/%2F%2f").unwrap(), "/");
}

#[test]
fn dot_segments() {
    assert_eq!(norm("/a/./b").unwrap(), "/a/b");
    assert_eq!(norm("/a/.").unwrap(), "/a/");
    assert_eq!(norm("/a/..").unwrap(), "/");
    assert_eq!(norm("/a/b/../c").unwrap(), "/a/c");
    assert_eq!(norm("/a/.../b").unwrap(), "/a/.../b");
    assert_eq!(norm("/a/..b/.c").unwrap(), "/a/..b/.c");
    assert_eq!(norm("/a/b/..?x").unwrap(), "/a/");
    assert_eq!(norm("/a/b/.#x").unwrap(), "/a/b/");
    assert_eq!(norm("/a//..").unwrap(), "/");
}

#[test]
fn encoded_dots_and_slashes_take_part() {
    assert_eq!(norm("/a/%2e%2E/b").unwrap(), "/b");
    assert_eq!(norm("/a/b/..%2Fc").unwrap(), "/a/c");
    assert_eq!(norm("/a%2Fb%2F..%2F..%2Fc").unwrap(), "/c");
    assert_eq!(norm("/a/.%2e").unwrap(), "/");
}

#[test]
fn above_root_is_rejected() {
    assert!(matches!(norm("/.."), Err(UriError::AboveRoot { .. })));
    assert!(matches!(
        norm("/../a"),
        Err(UriError::AboveRoot { offset: 3 })
    ));
    assert!(matches!(
        norm("/a/../../b"),
        Err(UriError::AboveRoot { .. })
    ));
    assert!(matches!(norm("/%2e%2e"), Err(UriError::AboveRoot { .. })));
    assert!(matches!(norm("/..?x"), Err(UriError::AboveRoot { .. })));
}

#[test]
fn escapes() {
    assert_eq!(norm("/%61%62c").unwrap(), "/abc");
    assert_eq!(norm("/%25%23%3F%3f").unwrap(), "/%#??");
    assert_eq!(norm("/.%25").unwrap(), "/.%");
    assert_eq!(norm("/..%23").unwrap(), "/..#");
    assert_eq!(
        norm_bytes(b"/%0a%7F%20%C3%A9").unwrap(),
        b"/\n\x7f \xc3\xa9"
    );
    assert!(matches!(
        norm("/%"),
        Err(UriError::InvalidEscape { offset: 1 })
    ));
    assert!(matches!(
        norm("/a%4"),
        Err(UriError::InvalidEscape { offset: 2 })
    ));
    assert!(matches!(norm("/%g0"), Err(UriError::InvalidEscape { .. })));
    assert!(matches!(norm("/%4?"), Err(UriError::InvalidEscape { .. })));
    assert!(matches!(
        norm("/%00"),
        Err(UriError::EncodedNul { offset: 1 })
    ));
    // Escapes in the query are not the path's business.
    assert_eq!(norm("/a?%zz").unwrap(), "/a");
}

#[test]
fn forbidden_bytes() {
    for t in [
        &b"/a\0"[..],
        b"/a b",
        b"/a\tb",
        b"/\x7f",
        b"/a?b\x01",
        b"/a#\r",
    ] {
        assert!(
            matches!(norm_bytes(t), Err(UriError::ForbiddenByte { .. })),
            "{t:?}"
        );
    }
    assert!(matches!(
        norm_bytes(b"/%4\x01"),
        Err(UriError::ForbiddenByte { offset: 3, .. })
    ));
}

#[test]
fn utf8_passes_through() {
    assert_eq!(norm("/ünï/çødé").unwrap(), "/ünï/çødé");
    assert_eq!(norm_bytes(b"/\xff\xfe").unwrap(), b"/\xff\xfe");
}

#[test]
fn split_origin_form() {
    let t = split_target(b"/a/b?x=1&y#frag?z").unwrap();
    assert_eq!(t.path, b"/a/b");
    assert_eq!(t.query, Some(&b"x=1&y"[..]));
    assert_eq!(t.fragment, Some(&b"frag?z"[..]));
    assert_eq!(t.scheme, None);
    let t = split_target(b"/a#b?c").unwrap();
    assert_eq!((t.path, t.query), (&b"/a"[..], None));
    let t = split_target(b"/a?").unwrap();
    assert_eq!(t.query, Some(&b""[..]));
}

/// Path, query and fragment of every target over a small alphabet, with and without a
/// `#` (the two ways `split_rest` takes), against a plain reading of RFC 3986.
#[test]
fn split_agrees_with_reference() {
    let alphabet = b"/a?#=&";
    for len in 0..=7u32 {
        for mut code in 0..6u32.pow(len) {
            let mut rest = vec![];
            for _ in 0..len {
                rest.push(alphabet[(code % 6) as usize]);
                code /= 6;
            }
            let end = rest
                .iter()
                .position(|&b| b == b'?' || b == b'#')
                .unwrap_or(rest.len());
            let path: &[u8] = if end == 0 { b"/" } else { &rest[..end] };
            let (query, fragment) = match rest.get(end) {
                Some(b'?') => {
                    let q = &rest[end + 1..];
                    match q.iter().position(|&b| b == b'#') {
                        Some(h) => (Some(&q[..h]), Some(&q[h + 1..])),
                        None => (Some(q), None),
                    }
                }
                Some(_) => (None, Some(&rest[end + 1..])),
                None => (None, None),
            };
            let want = (path, query, fragment);
            // Absolute form: the authority ends at `/`, `?` or the end, so what follows
            // it may also be empty or start with `?`.
            if matches!(rest.first(), None | Some(b'/' | b'?')) {
                let t = [&b"http://h"[..], &rest].concat();
                let got = split_target(&t).unwrap();
                assert_eq!((got.path, got.query, got.fragment), want, "{t:?}");
            }
            // Origin form: the same target from its leading `/`.
            if rest.first() == Some(&b'/') {
                let got = split_target(&rest).unwrap();
                assert_eq!((got.path, got.query, got.fragment), want, "{rest:?}");
            }
        }
    }
}

#[test]
fn split_absolute_form() {
    let t = split_target(b"HTTPS://Example.COM:8080/p?q").unwrap();
    assert_eq!(t.scheme, Some(&b"HTTPS"[..]));
    assert_eq!(t.host, Some(&b"Example.COM"[..]));
    assert_eq!(t.port, Some(&b"8080"[..]));
    assert_eq!(t.path, b"/p");
    assert_eq!(t.path_offset(), 24);
    assert_eq!(t.query, Some(&b"q"[..]));
    let t = split_target(b"http://h?q").unwrap();
    assert_eq!((t.path, t.query), (&b"/"[..], Some(&b"q"[..])));
    assert_eq!(split_target(b"http://h").unwrap().path, b"/");
    assert_eq!(
        split_target(b"http://[::1]:80/x").unwrap().host,
        Some(&b"[::1]"[..])
    );
    assert_eq!(norm("http://h/a/../b").unwrap(), "/b");
    assert!(matches!(
        norm("http://h/%zz"),
        Err(UriError::InvalidEscape { offset: 9 })
    ));
}

#[test]
fn split_rejects() {
    for t in [
        "",
        "*",
        "a",
        "http:/x",
        "http//x",
        "http:x",
        "http:///x",
        "http://./",
        "http://a..b/",
        "http://h_/x",
        "http://h#x",
        "http://h:8a/",
        "http://[::1/",
        "http://[::1]x/",
        "1http://h/",
        "?x",
        "%2F",
    ] {
        assert!(split_target(t.as_bytes()).is_err(), "{t:?}");
    }
    assert!(split_target(b"http://a./").is_ok());
    assert!(split_target(b"foo+bar.baz-1://h:/").is_ok());
}

#[test]
fn small_buffer_is_an_error_not_a_panic() {
    let mut out = [0u8; 2];
    assert!(matches!(
        normalize_target(b"/abc", &mut out),
        Err(UriError::OutputTooSmall { capacity: 2 })
    ));
    assert_eq!(normalize_target(b"//a", &mut out), Ok(2));
}

#[test]
fn query_helpers() {
    let args: Vec<_> = query_args(b"a=1&&b&c=x=y&=v").collect();
    assert_eq!(
        args,
        vec![
            (&b"a"[..], &b"1"[..]),
            (&b"b"[..], &b""[..]),
            (&b"c"[..], &b"x=y"[..]),
            (&b""[..], &b"v"[..]),
        ]
    );
    let mut out = [0u8; 64];
    let raw = b"Special%3AWhatLinksHere%2FX";
    let n = decode_component(raw, &mut out);
    assert_eq!(&out[..n], b"Special:WhatLinksHere/X");
    let n = decode_component(b"a+b%2%zz%", &mut out);
    assert_eq!(&out[..n], b"a b%2%zz%");
    let mut tiny = [0u8; 2];
    assert_eq!(decode_component(b"abc", &mut tiny), 2);
}

#[test]
fn errors_display() {
    let e = norm("/a/%zz").unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid percent-escape at offset 3: '%' must be followed by two hex digits"
    );
    let e = norm_bytes(b"/a\x01").unwrap_err();
    assert!(e.to_string().contains("0x01 at offset 2"), "{e}");
}
