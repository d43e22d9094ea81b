//! The compiled class matcher (`ClassSet`) answers exactly what the shapes answer one by one
//! (`Class::matches`), for every class and exemption, on random requests built from the
//! policy's own literals (so that prefixes, suffixes and exact paths hit and nearly hit).

use proptest::prelude::*;
use weir::policy::matching::classset::ClassSet;
use weir::policy::request::PreparedRequest;
use weir::policy::{CompiledPolicy, OwnedRequest};

use crate::fixture;

/// Literals of every length around the 8-byte word, suffixes longer than a word, general
/// globs, case-insensitive globs (kept apart from the same glob matched exactly), regexes,
/// methods, and query, header and cookie tests beside path tests.
const POLICY: &str = r#"
[zones.z]
size = "64k"
algorithm = "gcra"
rate = "10r/s"

[classes.short]
match = [{ path = ["/", "/a", "/abc", "/abcdefg", "/abcdefgh", "/abcdefghi"] }]

[classes.prefixes]
match = [
  { path_prefix = ["/a", "/abcdefgh", "/abcdefghij/kl"] },
  { method = "POST", path_glob = "/w/Special:*" },
]

[classes.suffixes]
match = [{ path_glob = ["*.css", "*h", "*.tar.gz.sig", "*defghij/kl", "*"] , method = ["GET", "PUT"] }]

[classes.general]
match = [
  { path_glob = ["/u/*/p?st/*", "*a*b*"] },
  { path_regex = "^/upload/[0-9]+$", method = "LONGMETH" },
]

[classes.mixed]
match = [
  { path = "/w/index.php", query.title = { glob = "Special:*" } },
  { path_prefix = "/a", header.user-agent = { regex = "(?i)bot" } },
  { path_glob = "*.css", cookie.session = { present = false } },
  { path_prefix = ["/abc", "/w/"], path_glob = ["*.php", "*c"] },
]

[classes.client]
match = [{ client = ["192.0.2.0/24"], path_prefix = "/a" }, { client = ["198.51.100.0/24"] }]

[classes.dupes]
match = [{ path = "/w/index.php" }, { path_prefix = "/a", method = "GET" }, { path_glob = "*.css" }]

[classes.folded]
match = [
  { path_iglob = ["*.CSS", "/W/special:*", "/abc", "*.123", "*a*B*"] },
  { path_prefix = "/w/", query.title = { iglob = "special:*" } },
]

[exempt.e1]
match = [{ path = ["/healthz", "/abcdefgh"] }]

[exempt.e2]
match = [{ path_glob = ["*.png", "*.woff2"], method = "GET" }]

[[limit]]
class = "*"
zone = "z"
"#;

const FRAGMENTS: &[&str] = &[
    "/",
    "/a",
    "b",
    "c",
    "/abc",
    "defg",
    "h",
    "i",
    "j",
    "/kl",
    ".css",
    ".png",
    ".woff2",
    ".tar",
    ".gz",
    ".sig",
    ".CSS",
    "/ABC",
    "/W/",
    "sPECIAL:",
    ".123",
    "/w/",
    "index.php",
    "Special:",
    "/u/",
    "p",
    "o",
    "s",
    "t",
    "/upload/",
    "12",
    "x",
    ".php",
    "healthz",
    "/api/",
    "/search",
    ".rss",
    "/feed/",
    "Main_Page",
    "",
];

const METHODS: &[&str] = &["GET", "POST", "PUT", "HEAD", "LONGMETH", "DELETE", "X"];

fn request() -> impl Strategy<Value = OwnedRequest> {
    (
        prop::sample::select(METHODS),
        prop::collection::vec(prop::sample::select(FRAGMENTS), 0..6),
        prop::sample::select(&["", "title=Special:X", "title=Main", "action=history&diff=1"][..]),
        any::<bool>(),
        any::<bool>(),
        prop::sample::select(&["192.0.2.9", "198.51.100.3", "203.0.113.1"][..]),
    )
        .prop_map(|(m, parts, query, bot, cookie, ip)| {
            let path: String = parts.concat();
            let target = if query.is_empty() {
                path
            } else {
                format!("{path}?{query}")
            };
            let mut r = OwnedRequest::new(m, &target, ip.parse().unwrap());
            if bot {
                r = r.header("User-Agent", "SomeBot/1.0");
            }
            if cookie {
                r = r.header("Cookie", "session=1");
            }
            r
        })
}

fn agree(policy: &CompiledPolicy, req: &OwnedRequest) -> Result<(), TestCaseError> {
    let compiled = ClassSet::new(&policy.classes, &policy.exemptions);
    let plain = ClassSet::plain(&policy.classes, &policy.exemptions);
    prop_assert_eq!(
        compiled.is_compiled(),
        policy.classes.len() < 20 || policy.classes.iter().any(|c| c.name == "m69")
    );
    let target = std::str::from_utf8(&req.target).unwrap();
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let prepared = PreparedRequest::new(req, path.as_bytes(), query.as_bytes(), req.peer);
    let mut f = compiled.facts(&prepared);
    let mut g = plain.facts(&prepared);
    prop_assert_eq!(
        compiled.exemption(&prepared, &mut f),
        plain.exemption(&prepared, &mut g)
    );
    prop_assert_eq!(
        compiled.exemption(&prepared, &mut f),
        policy.exemptions.iter().position(|e| e.matches(&prepared))
    );
    // Every class, in an order that asks some of them twice.
    for c in (0..policy.classes.len()).chain((0..policy.classes.len()).rev()) {
        let want = policy.classes[c].matches(&prepared);
        prop_assert_eq!(
            compiled.class(c, &prepared, &mut f),
            want,
            "class {} on {:?}",
            &policy.classes[c].name,
            &prepared
        );
        prop_assert_eq!(plain.class(c, &prepared, &mut g), want);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn compiled_classes_agree_with_shapes(req in request()) {
        agree(&CompiledPolicy::parse(POLICY, None).unwrap(), &req)?;
    }

    #[test]
    fn compiled_realistic_policy_agrees(req in request()) {
        agree(&CompiledPolicy::parse(fixture::REALISTIC_POLICY, None).unwrap(), &req)?;
    }
}

#[test]
fn fixture_requests_agree() {
    let policy = CompiledPolicy::parse(fixture::REALISTIC_POLICY, None).unwrap();
    for c in 1..=3u8 {
        for r in [
            fixture::wiki_tool(c),
            fixture::static_asset(c),
            fixture::api_call(c),
            fixture::bot_search(c),
            fixture::long_diff(c),
        ] {
            agree(&policy, &r).unwrap();
        }
    }
}

#[test]
fn beyond_the_masks_falls_back_to_shapes() {
    let mut src = String::from(POLICY);
    for i in 0..70 {
        src += &format!("[classes.c{i}]\nmatch = [{{ path = \"/p{i}\" }}]\n");
    }
    let policy = CompiledPolicy::parse(&src, None).unwrap();
    assert!(!ClassSet::new(&policy.classes, &policy.exemptions).is_compiled());
    for p in ["/p3", "/p69", "/abc", "/x.css"] {
        agree(
            &policy,
            &OwnedRequest::new("GET", p, "192.0.2.1".parse().unwrap()),
        )
        .unwrap();
    }
}

#[test]
fn classes_past_the_cache_are_evaluated_each_time() {
    let mut src = String::from(POLICY);
    for i in 0..70 {
        src += &format!(
            "[classes.m{i}]\nmatch = [{{ path_prefix = \"/a\", client = [\"10.0.{i}.0/24\"] }}]\n"
        );
    }
    let policy = CompiledPolicy::parse(&src, None).unwrap();
    assert!(policy.classes.len() > 64);
    assert!(ClassSet::new(&policy.classes, &policy.exemptions).is_compiled());
    for ip in ["10.0.3.1", "10.0.67.1", "10.0.69.9", "192.0.2.1"] {
        for p in ["/a", "/abc", "/x.css", "/"] {
            agree(&policy, &OwnedRequest::new("GET", p, ip.parse().unwrap())).unwrap();
        }
    }
}
