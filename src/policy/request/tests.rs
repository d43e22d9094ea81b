//! Unit tests of request views, cookies, header plans and client IP resolution.

use super::*;
use crate::policy::net::IpNet;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[test]
fn cookies() {
    let r = OwnedRequest::new("GET", "/", ip("192.0.2.1"))
        .header("Cookie", "a=1; session = \"xyz\" ;b")
        .header("cookie", "c=3; a=2");
    assert_eq!(r.cookie(b"a"), Some(&b"1"[..]));
    assert_eq!(r.cookie(b"session"), Some(&b"xyz"[..]));
    assert_eq!(r.cookie(b"c"), Some(&b"3"[..]));
    assert_eq!(r.cookie(b"b"), None);
    let v: &dyn RequestView = &r;
    let all: Vec<_> = cookie_values(v, b"a").collect();
    assert_eq!(all, vec![&b"1"[..], &b"2"[..]]);
}

#[test]
fn nodes() {
    assert_eq!(parse_node(b"192.0.2.1"), Some(ip("192.0.2.1")));
    assert_eq!(parse_node(b"192.0.2.1:8080"), Some(ip("192.0.2.1")));
    assert_eq!(parse_node(b"[2001:db8::1]:80"), Some(ip("2001:db8::1")));
    assert_eq!(parse_node(b"[2001:db8::1]"), Some(ip("2001:db8::1")));
    assert_eq!(parse_node(b"::ffff:192.0.2.1"), Some(ip("192.0.2.1")));
    assert_eq!(parse_node(b"unknown"), None);
    assert_eq!(parse_node(b"_hidden"), None);
    assert_eq!(parse_node(b"[2001:db8::1]x"), None);
}

#[test]
fn padded_copies_hold_the_right_bytes_at_every_length() {
    let src: Vec<u8> = (1..=40).collect();
    for n in 0..=src.len() {
        let s = &src[..n];
        let tail = &s[n.saturating_sub(16)..];
        let mut last = [0u8; 32];
        last[32 - tail.len()..].copy_from_slice(tail);
        assert_eq!(last16_of_32(s), last, "last16_of_32, length {n}");
        let head = &s[..n.min(16)];
        let mut first = [0u8; 16];
        first[..head.len()].copy_from_slice(head);
        assert_eq!(first16(s), first, "first16, length {n}");
    }
}

#[test]
fn fast_v4_parse_agrees_with_std() {
    let mut cases: Vec<String> = [
        "0.0.0.0",
        "255.255.255.255",
        "256.1.1.1",
        "01.2.3.4",
        "1.2.3.04",
        "1.2.3.0",
        "1.2.3",
        "1.2.3.4.5",
        "1.2.3.4 ",
        " 1.2.3.4",
        "1.2.3.4:",
        "1.2.3.4:80",
        "1.2.3.4:123456",
        "1.2.3.4:80:90",
        "1.2.3.4567",
        "1..2.3",
        "1.2.3.4:8a",
        "1.2.3.-4",
        "::1.2.3.4",
        "1.2.3.4]",
        "",
        "1.2.3.4:00080",
        "999.1.1.1",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for a in [
        0u32, 1, 9, 10, 99, 100, 199, 200, 249, 250, 255, 256, 300, 1000,
    ] {
        cases.push(format!("{a}.{a}.0.{a}"));
        cases.push(format!("10.{a}.1.2:{a}"));
    }
    for c in &cases {
        assert_eq!(
            parse_node(c.as_bytes()),
            parse_node_slow(c.as_bytes()),
            "{c:?}"
        );
    }
}

#[test]
fn fast_parse_agrees_with_std_on_random_nodes() {
    let fixed = [
        "::",
        "::1",
        "1::",
        ":::",
        "::1:",
        "1:2",
        "1:2:3:4:5:6:7:8",
        "1:2:3:4:5:6:7:8:9",
        "1:2:3:4:5:6:7::",
        "::2:3:4:5:6:7:8",
        "1::2:3:4:5:6:7:8",
        "2001:db8::17",
        "2001:DB8:0:0:0:0:0:1",
        "12345::",
        "::ffff:192.0.2.1",
        "::ffff:c000:201",
        "1:::2",
        "[2001:db8::1]:80",
        "fe80::1%eth0",
        "0:0:0:0:0:0:0:0",
        "::ffff:0:0",
    ];
    for c in fixed {
        assert_eq!(
            parse_node(c.as_bytes()),
            parse_node_slow(c.as_bytes()),
            "{c:?}"
        );
    }
    let alphabet = b"0123456789abcdefABCDEF0::::::::..[]% g";
    let mut next = crate::policy::test_rng::xorshift(0x9e37_79b9_7f4a_7c15u64);
    let mut valid = 0;
    for _ in 0..300_000 {
        let len = (next() % 26) as usize;
        let s: Vec<u8> = (0..len)
            .map(|_| alphabet[(next() % alphabet.len() as u64) as usize])
            .collect();
        let slow = parse_node_slow(&s);
        valid += slow.is_some() as u32;
        assert_eq!(parse_node(&s), slow, "{:?}", String::from_utf8_lossy(&s));
    }
    assert!(valid > 100, "{valid}");
}

#[test]
fn v4_line_walk_agrees_with_buffered() {
    // Lines of IPv4-like entries with the separators and the near misses (leading zeros,
    // 256, four-digit octets, ports, extra dots, empty entries) the fast walk must hand on.
    let r = resolver(ForwardedSource::List(b"x-forwarded-for".to_vec().into()));
    let peer = ip("10.0.0.1");
    let atoms = [
        "1", "0", "9", "10", "25", "99", "100", "199", "255", "256", "300", "01", "007", "1234",
        ".", ".", ".", ",", ",", " ", "\t", ":", ":80", "a", "",
    ];
    let mut rng = crate::policy::test_rng::xorshift(0x2545_f491_4f6c_dd1du64);
    let mut next = move |n: usize| (rng() % n as u64) as usize;
    let (mut fast, mut trusted_hops) = (0, 0);
    for _ in 0..200_000 {
        let mut line = String::new();
        for _ in 0..next(5) + 1 {
            if next(3) == 0 {
                for _ in 0..next(6) {
                    line.push_str(atoms[next(atoms.len())]);
                }
            } else {
                let first = ["10", "198", "1"][next(3)];
                let octets = [first, atoms[next(10)], atoms[next(10)], atoms[next(10)]];
                line.push_str(&octets.join("."));
            }
            line.push_str([", ", ",", " ,\t", ""][next(4)]);
        }
        let req = OwnedRequest::new("GET", "/", peer).header("X-Forwarded-For", &line);
        let want = r.resolve_buffered(&req, Some(peer));
        if let Some(got) = r.walk_v4_line(line.as_bytes()) {
            assert_eq!(Some(got), want, "{line:?}");
            fast += 1;
            trusted_hops += (r.trusted.contains(got) && got != peer) as u32;
        }
        assert_eq!(r.resolve(&req), want, "{line:?}");
    }
    // Both the fast walk's answers and its all-trusted case were exercised.
    assert!(
        fast > 10_000 && trusted_hops > 1_000,
        "{fast} {trusted_hops}"
    );
}

#[test]
fn walk_in_place_agrees_with_buffered() {
    let r = resolver(ForwardedSource::List(b"x-forwarded-for".to_vec().into()));
    let long = (0..40).map(|i| format!("10.0.0.{i}")).collect::<Vec<_>>();
    let lines: Vec<Vec<&str>> = vec![
        vec![],
        vec![""],
        vec!["198.51.100.1"],
        vec!["198.51.100.1, 10.1.1.1"],
        vec![" , 10.1.1.1 ,, "],
        vec!["1.1.1.1, garbage, 10.2.2.2"],
        vec!["10.3.3.3", "10.2.2.2"],
        vec!["203.0.113.5, 198.51.100.1", "10.9.9.9"],
        vec!["2001:db8:ffff::1, [2001:db8::5]:80, 10.0.0.3:443"],
        vec!["a", "b", "c", "d", "10.0.0.1"],
        vec!["1.1.1.1", "10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"],
    ];
    let mut lines = lines;
    let joined = long.join(",");
    lines.push(vec![&joined]);
    lines.push(vec!["1.1.1.1", &joined]);
    for ls in &lines {
        let mut req = OwnedRequest::new("GET", "/", ip("10.0.0.1"));
        for l in ls {
            req = req.header("X-Forwarded-For", l);
        }
        let peer = ip("10.0.0.1");
        assert_eq!(
            r.resolve(&req),
            r.resolve_buffered(&req, Some(peer)),
            "{ls:?}"
        );
    }
}

#[test]
fn name_matcher_is_eq_ignore_ascii_case() {
    let names = [
        "x-forwarded-for",
        "cookie",
        "user-agent",
        "a",
        "x-api-key-long-name-17",
        "x_y@[`{",
    ];
    let cands = [
        "X-Forwarded-For",
        "x-forwarded-foR",
        "x-forwarded-fo",
        "accept-language",
        "COOKIE",
        "cookie",
        "cookiE ",
        "User-Agent",
        "user-agenT",
        "A",
        "b",
        "X-API-KEY-LONG-NAME-17",
        "x-api-key-long-name-18",
        "X_Y@[`{",
        "x_y`{@[",
        "",
        "x\u{0}y",
    ];
    for n in names {
        let m = NameMatcher::new(n.as_bytes());
        for c in cands.iter().chain(&names) {
            assert_eq!(
                m.matches(c.as_bytes()),
                c.as_bytes().eq_ignore_ascii_case(n.as_bytes()),
                "{n:?} {c:?}"
            );
        }
    }
}

#[test]
fn named_cookie_is_filtered_cookie_pairs() {
    let headers = [
        "a=1; session = \"xyz\" ;b",
        "session=1; session=2",
        " \tsession\t=\t3 ",
        "sessionx=1; xsession=2; session",
        "session=",
        "session==x",
        "=session=1; session=\"",
        "a=b=c; a=b",
        "s e=1; s e = 2",
        ";;session=4;;",
        "",
        "session",
        "session ;session=5",
        "sessionx=1;session\t= 6 ; x",
        "s=1; session=\"q\"; session=2",
        "GeoIP=US:CA:San_Francisco; session=8f3a2c1de4b5; enwikiUserName=Alice",
        " ; =; session = ;",
    ];
    // The same headers, long enough for the finder's walk.
    let pad = "tracking_id=GA1.2.1234567.89; theme=dark; lang=en; consent=yes; ab=bucket7";
    let long: Vec<String> = headers
        .iter()
        .flat_map(|h| {
            [
                format!("{pad}; {h}"),
                format!("{h};{pad}"),
                format!("{h}{pad}"),
            ]
        })
        .collect();
    for h in headers
        .iter()
        .copied()
        .chain(long.iter().map(|h| h.as_str()))
    {
        for name in ["session", "a", "a=b", " a", "s e", "", "b"] {
            let [pairs, walk, finder] = cookie_walks(h, name);
            assert_eq!((&walk, &finder), (&pairs, &pairs), "{h:?} {name:?}");
        }
    }
}

/// The values of cookie `name` in header `h`: by [`CookiePairs`], by [`NamedCookie`]'s
/// pair-by-pair walk and by its finder's walk (the same as the pair walk for headers
/// shorter than `FINDER_MIN_LEN`).
fn cookie_walks<'h>(h: &'h str, name: &str) -> [Vec<&'h [u8]>; 3] {
    let pairs = CookiePairs::new(h.as_bytes())
        .filter(|(n, _)| *n == name.as_bytes())
        .map(|(_, v)| v)
        .collect();
    let prepared = CookieName::new(name.as_bytes());
    let walk = |finder| {
        NamedCookie {
            rest: h.as_bytes(),
            name: name.as_bytes(),
            plain: NamedCookie::plain(name.as_bytes()),
            finder,
        }
        .collect()
    };
    [pairs, walk(None), walk(prepared.finder.as_deref())]
}

proptest::proptest! {
    /// Both walks of a `Cookie` header (pair by pair, and the finder's) find exactly the
    /// values [`CookiePairs`] gives for the name, in order, in any header.
    #[test]
    fn named_cookie_walks_agree(
        h in "[sa=; \t\"e]{0,40}",
        pad in proptest::bool::ANY,
        name in proptest::sample::select(vec!["s", "sa", "se", "ss", "a=", "s "]),
    ) {
        let pad = if pad { "x=01234567890123456789012345678901234567890123456789012345678901234567890123456789;" } else { "" };
        let h = format!("{pad}{h}");
        let [pairs, walk, finder] = cookie_walks(&h, name);
        proptest::prop_assert_eq!(&walk, &pairs);
        proptest::prop_assert_eq!(&finder, &pairs);
    }
}

#[test]
fn header_cache_one_pass() {
    let r = OwnedRequest::new("GET", "/", ip("10.0.0.1"))
        .header("User-Agent", "ua")
        .header("Cookie", "a=1")
        .header("X-Seen", "1")
        .header("cookie", "b=2");
    let plan = HeaderPlan::new([&b"user-agent"[..], b"cookie", b"x-missing"]);
    let cache = HeaderCache::fill(&plan, &r);
    let p = PreparedRequest::with_headers(&r, b"/", b"", Some(ip("10.0.0.1")), &cache);
    assert_eq!(p.header(b"user-agent"), Some(&b"ua"[..]));
    assert_eq!(p.header(b"x-missing"), None);
    assert_eq!(p.header(b"x-seen"), Some(&b"1"[..]));
    assert_eq!(p.header_values(b"cookie").count(), 2);
    assert_eq!(p.cookie_values(b"b").collect::<Vec<_>>(), vec![&b"2"[..]]);
    assert_eq!(
        (p.cookie(b"a"), p.cookie(b"b")),
        (Some(&b"1"[..]), Some(&b"2"[..]))
    );
    let one = OwnedRequest::new("GET", "/", ip("10.0.0.1")).header("Cookie", "x=1; s = 2");
    let cache = HeaderCache::fill(&plan, &one);
    let p = PreparedRequest::with_headers(&one, b"/", b"", Some(ip("10.0.0.1")), &cache);
    assert_eq!((p.cookie(b"s"), p.cookie(b"y")), (Some(&b"2"[..]), None));
    assert_eq!(p.header_values(b"x-missing").count(), 0);
    // Names of one length, and names past the length table's last entry.
    let long_a = "x-".repeat(40);
    let long_b = "y-".repeat(35);
    let plan = HeaderPlan::new([long_a.as_bytes(), long_b.as_bytes(), b"ab", b"cd"]);
    let r = OwnedRequest::new("GET", "/", ip("10.0.0.1"))
        .header(&long_b.to_uppercase(), "b")
        .header("CD", "d")
        .header(&long_a, "a")
        .header("ab", "x")
        .header("ab", "y");
    let cache = HeaderCache::fill(&plan, &r);
    let p = PreparedRequest::with_headers(&r, b"/", b"", Some(ip("10.0.0.1")), &cache);
    assert_eq!(p.header(long_a.as_bytes()), Some(&b"a"[..]));
    assert_eq!(p.header(long_b.as_bytes()), Some(&b"b"[..]));
    assert_eq!(p.header(b"cd"), Some(&b"d"[..]));
    assert_eq!(
        p.header_values(b"ab").collect::<Vec<_>>(),
        [&b"x"[..], b"y"]
    );
    assert_eq!(
        (cache.first[0], cache.first[3]),
        (Some(&b"a"[..]), Some(&b"d"[..]))
    );
    assert_eq!(cache.multi, 1 << 2);
}

fn resolver(source: ForwardedSource) -> ClientIpResolver {
    let mut trusted = CidrSet::new();
    trusted.push(IpNet::parse("10.0.0.0/8").unwrap());
    trusted.push(IpNet::parse("2001:db8:ffff::/48").unwrap());
    ClientIpResolver { trusted, source }
}

#[test]
fn forwarded_rfc7239() {
    let r = resolver(ForwardedSource::Forwarded);
    let req = OwnedRequest::new("GET", "/", ip("10.0.0.1")).header(
        "Forwarded",
        "for=198.51.100.9, for=\"[2001:db8::17]:4711\";proto=https, For=10.1.1.1;by=10.0.0.1",
    );
    assert_eq!(r.resolve(&req), Some(ip("2001:db8::17")));
    let req = OwnedRequest::new("GET", "/", ip("10.0.0.1"))
        .header("Forwarded", "for=198.51.100.9, for=_hidden, for=10.1.1.1");
    assert_eq!(r.resolve(&req), Some(ip("10.1.1.1")));
    // XFF is ignored in Forwarded mode.
    let req = OwnedRequest::new("GET", "/", ip("10.0.0.1")).header("X-Forwarded-For", "1.2.3.4");
    assert_eq!(r.resolve(&req), Some(ip("10.0.0.1")));
}

#[test]
fn xff_repeated_lines_and_limits() {
    let r = resolver(ForwardedSource::List(b"x-forwarded-for".to_vec().into()));
    let req = OwnedRequest::new("GET", "/", ip("10.0.0.1"))
        .header("X-Forwarded-For", "203.0.113.5, 198.51.100.1")
        .header("X-Forwarded-For", "10.9.9.9");
    assert_eq!(r.resolve(&req), Some(ip("198.51.100.1")));
    let req = OwnedRequest::new("GET", "/", ip("10.0.0.1"))
        .header("X-Forwarded-For", "10.3.3.3, 10.2.2.2");
    assert_eq!(r.resolve(&req), Some(ip("10.3.3.3")));
    let req = OwnedRequest::new("GET", "/", ip("10.0.0.1"))
        .header("X-Forwarded-For", "1.1.1.1, garbage, 10.2.2.2");
    assert_eq!(r.resolve(&req), Some(ip("10.2.2.2")));
    let long = (0..100)
        .map(|i| format!("10.0.0.{}", i % 250))
        .collect::<Vec<_>>()
        .join(", ");
    let req = OwnedRequest::new("GET", "/", ip("10.0.0.1"))
        .header("X-Forwarded-For", &format!("1.1.1.1, {long}"));
    // Only the rightmost MAX_HOPS are examined; all trusted → leftmost kept.
    assert!(r.trusted.contains_peer(r.resolve(&req)));
}

/// A peer without an IP address is the local client; its forwarding header counts only
/// when `unix:` is trusted, and the walk falls back to the local client as it would to a
/// trusted peer's address.
#[test]
fn local_peer_resolves_through_unix_trust() {
    let local = |xff: &str| OwnedRequest::local("GET", "/").header("X-Forwarded-For", xff);
    for source in [
        ForwardedSource::List(b"x-forwarded-for".to_vec().into()),
        ForwardedSource::Forwarded,
    ] {
        let mut r = resolver(source);
        assert_eq!(r.resolve(&local("203.0.113.5")), None, "unix: not trusted");
        assert_eq!(r.resolve(&OwnedRequest::local("GET", "/")), None);
        r.trusted.push_entry("unix:").unwrap();
        assert_eq!(
            r.resolve(&OwnedRequest::local("GET", "/")),
            None,
            "no header"
        );
    }
    let mut r = resolver(ForwardedSource::List(b"x-forwarded-for".to_vec().into()));
    r.trusted.push_entry("unix:").unwrap();
    assert_eq!(r.resolve(&local("203.0.113.5")), Some(ip("203.0.113.5")));
    assert_eq!(
        r.resolve(&local("203.0.113.5, 10.1.1.1")),
        Some(ip("203.0.113.5"))
    );
    assert_eq!(r.resolve(&local("garbage")), None);
    assert_eq!(r.resolve(&local("2001:db8::7, garbage")), None);
    assert_eq!(r.resolve(&local("10.1.1.1")), Some(ip("10.1.1.1")));
    // Trusting unix: does not make any address trusted.
    let req = OwnedRequest::new("GET", "/", ip("192.0.2.9")).header("X-Forwarded-For", "1.1.1.1");
    assert_eq!(r.resolve(&req), Some(ip("192.0.2.9")));
}
