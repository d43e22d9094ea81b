//! Unit tests of globs, value matchers, CIDR sets, shapes and query tests.

use super::*;
use crate::policy::net::*;

#[test]
fn one_scan_query_matching_is_the_definition() {
    let matchers = [
        ValueMatcher::Present,
        ValueMatcher::Absent,
        ValueMatcher::Equals(b"a b".to_vec().into()),
        ValueMatcher::Equals(b"".to_vec().into()),
        ValueMatcher::Glob(Glob::new("x*").unwrap()),
        ValueMatcher::Regex(Regex::new("^&?%").unwrap()),
    ];
    let names: [&[u8]; 5] = [b"t", b"a b", b"", b"x=", b"t&"];
    let alphabet = b"t=&%+2a0 bx=&";
    let mut next = crate::policy::test_rng::xorshift(0x9e37_79b9_7f4a_7c15u64);
    for _ in 0..40_000 {
        let len = (next() % 24) as usize;
        let q: Vec<u8> = (0..len)
            .map(|_| alphabet[(next() % alphabet.len() as u64) as usize])
            .collect();
        for n in names {
            for m in &matchers {
                assert_eq!(
                    query_matches(&q, n, m),
                    query_matches_plain(&q, n, m),
                    "{:?} {:?} {m:?}",
                    String::from_utf8_lossy(&q),
                    String::from_utf8_lossy(n)
                );
            }
        }
    }
}

#[test]
fn glob_kinds() {
    let g = Glob::new("*.css").unwrap();
    assert!(matches!(g.kind, GlobKind::Suffix(_)));
    assert!(g.is_match(b"/app.css"));
    assert!(g.is_match(b"/a/b/c.css"));
    assert!(!g.is_match(b"/app.css.map"));
    let g = Glob::new("/w/Special:WhatLinksHere/*").unwrap();
    assert!(matches!(g.kind, GlobKind::Prefix(_)));
    assert!(g.is_match(b"/w/Special:WhatLinksHere/Foo"));
    assert!(g.is_match(b"/w/Special:WhatLinksHere/"));
    assert!(!g.is_match(b"/w/Special:WhatLinksHere"));
    let g = Glob::new("/api").unwrap();
    assert!(matches!(g.kind, GlobKind::Exact(_)));
    assert!(g.is_match(b"/api") && !g.is_match(b"/api/"));
}

#[test]
fn glob_general() {
    let g = Glob::new("/u/*/p?st/*.[jJ][sS]").unwrap();
    assert!(g.is_match(b"/u/alice/post/x.js"));
    assert!(g.is_match(b"/u/a/b/past/y.JS"));
    assert!(!g.is_match(b"/u/alice/post/x.ts"));
    let g = Glob::new("*a*b*c").unwrap();
    assert!(g.is_match(b"xxaxxbxxc"));
    assert!(g.is_match(b"abcabc"));
    assert!(!g.is_match(b"acb"));
    let g = Glob::new("[!0-9]*").unwrap();
    assert!(g.is_match(b"x1") && !g.is_match(b"1x"));
    let g = Glob::new(r"a\*b").unwrap();
    assert!(g.is_match(b"a*b") && !g.is_match(b"axb"));
    assert!(Glob::new("a[").is_err());
    assert!(Glob::new("a\\").is_err());
    assert!(Glob::new("[z-a]").is_err());
    assert!(Glob::new("[]").is_err());
}

#[test]
fn iglob_ignores_ascii_case_only() {
    let g = Glob::new_ignore_case("*special*:*WhatLinksHere*").unwrap();
    assert!(g.is_match(b"/w/SPECIAL:whatlinkshere/X"));
    assert!(g.is_match(b"/index.php/_special_:_WhatLinksHere"));
    assert!(!g.is_match(b"/w/Special:WhatLinksThere"));
    // Outside ASCII, bytes compare exactly (no Unicode case folding).
    let g = Glob::new_ignore_case("*\u{e9}t\u{e9}").unwrap();
    assert!(g.is_match("/\u{e9}T\u{e9}".as_bytes()));
    assert!(!g.is_match("/\u{c9}t\u{e9}".as_bytes()));
    let g = Glob::new_ignore_case("[A-C]x[!Y]").unwrap();
    assert!(g.is_match(b"bXz") && g.is_match(b"BxZ") && !g.is_match(b"Bxy"));
    for (p, yes, no) in [
        ("/API", "/api", "/apix"),
        ("/Static/*", "/STATIC/a.css", "/stat"),
        ("*.CSS", "/a.css", "/a.cs"),
    ] {
        let g = Glob::new_ignore_case(p).unwrap();
        assert!(!matches!(g.kind, GlobKind::General { .. }), "{p}");
        assert!(
            g.literal_form().is_none(),
            "{p}: letters are no exact literal"
        );
        assert!(
            g.is_match(yes.as_bytes()) && !g.is_match(no.as_bytes()),
            "{p}"
        );
    }
    assert!(Glob::new_ignore_case("*.123")
        .unwrap()
        .literal_form()
        .is_some());
    assert_eq!(
        format!("{:?}", Glob::new_ignore_case("a").unwrap()),
        "IGlob(\"a\")"
    );
}

/// Globs answer as the equivalent regex, with and without ignoring case, on subjects long
/// enough for the 8-at-a-time screening of [`find_part`].
#[test]
fn globs_agree_with_regexes() {
    let toks = [
        "a", "B", "*", "*", "?", "[ab]", "[!a]", "[A-C]", "\\*", "ab", "b",
    ];
    let subject = b"aAbBcC*";
    let mut next = crate::policy::test_rng::xorshift(0x9e37_79b9_7f4a_7c15u64);
    for _ in 0..30_000 {
        let parts: Vec<&str> = (0..next() % 8)
            .map(|_| toks[(next() % toks.len() as u64) as usize])
            .collect();
        let s: Vec<u8> = (0..next() % 40)
            .map(|_| subject[(next() % subject.len() as u64) as usize])
            .collect();
        let re: String = parts
            .iter()
            .map(|t| match *t {
                "*" => ".*",
                "?" => ".",
                "[!a]" => "[^a]",
                t => t,
            })
            .collect();
        let p: String = parts.concat();
        for fold in [false, true] {
            let flags = if fold { "(?is-u)" } else { "(?s-u)" };
            let want = Regex::new(&format!("{flags}^(?:{re})$"))
                .unwrap()
                .is_match(&s);
            let g = if fold {
                Glob::new_ignore_case(&p)
            } else {
                Glob::new(&p)
            };
            let got = g.unwrap().is_match(&s);
            assert_eq!(
                got,
                want,
                "{p:?} (fold {fold}) on {:?}",
                String::from_utf8_lossy(&s)
            );
        }
    }
}

#[test]
fn cidr() {
    let n = IpNet::parse("10.0.0.0/8").unwrap();
    assert!(n.contains("10.1.2.3".parse().unwrap()));
    assert!(n.contains("::ffff:10.1.2.3".parse().unwrap()));
    assert!(!n.contains("11.0.0.1".parse().unwrap()));
    assert!(!n.contains("::a00:1".parse().unwrap()));
    let e = IpNet::parse("10.0.0.1/8").unwrap_err();
    assert!(e.contains("\"10.0.0.0/8\""), "{e}");
    assert!(IpNet::parse("10.0.0.0/33").is_err());
    assert!(IpNet::parse("nope").is_err());
    let mut s = CidrSet::new();
    s.push(IpNet::parse("2001:db8::/32").unwrap());
    s.push(IpNet::parse("192.0.2.7").unwrap());
    assert!(s.contains("2001:db8:1::5".parse().unwrap()));
    assert!(s.contains("192.0.2.7".parse().unwrap()));
    assert!(!s.contains("192.0.2.8".parse().unwrap()));
    assert!(IpNet::parse("0.0.0.0/0")
        .unwrap()
        .contains("1.2.3.4".parse().unwrap()));
}

#[test]
fn query_decoding() {
    let mut out = [0u8; 64];
    let n = decode_component(b"Special%3AWhatLinksHere%2FFoo+bar%zz%4", &mut out);
    assert_eq!(&out[..n], b"Special:WhatLinksHere/Foo bar%zz%4");
    let g = ValueMatcher::Glob(Glob::new("Special:WhatLinksHere/*").unwrap());
    assert!(query_matches(
        b"a=1&title=Special%3AWhatLinksHere%2FX",
        b"title",
        &g
    ));
    assert!(query_matches(
        b"title=Main&ti%74le=Special:WhatLinksHere/X",
        b"title",
        &g
    ));
    assert!(!query_matches(b"title=Main", b"title", &g));
    // Names as PHP reads them: leading spaces dropped, cut at a NUL.
    for q in [
        "+title=Special:WhatLinksHere/X",
        "%20%20title=Special:WhatLinksHere/X",
        "title%00x=Special:WhatLinksHere/X",
        "+title%00=Special:WhatLinksHere/X",
    ] {
        assert!(query_matches(q.as_bytes(), b"title", &g), "{q}");
    }
    assert!(!query_matches(
        b"ti+tle=Special:WhatLinksHere/X",
        b"title",
        &g
    ));
    assert!(!query_matches(b"+title=x", b"title", &ValueMatcher::Absent));
    assert!(query_matches(b"x", b"x", &ValueMatcher::Present));
    assert!(query_matches(b"y=1", b"x", &ValueMatcher::Absent));
    assert!(!query_matches(b"x=", b"x", &ValueMatcher::Absent));
    let long = format!("title={}", "a%20".repeat(400));
    let ends = ValueMatcher::Glob(Glob::new("a a *a ").unwrap());
    assert!(query_matches(long.as_bytes(), b"title", &ends));
}
