//! Policy file format: parsing, validation errors with positions, matching,
//! keys and client-IP resolution.

use std::net::IpAddr;
use std::time::Duration;

use weir::policy::config::{
    check_policy, parse_policy, Algorithm, CompiledPolicy, Delay, FailureMode, LogLevel,
    PolicyError,
};
use weir::policy::key::{KeyPart, KEY_BUF_LEN};
use weir::policy::request::{ForwardedSource, OwnedRequest, PreparedRequest, RequestView};

const FULL: &str = r#"
failure_mode = "closed"
headers = true
trusted_proxies = ["10.0.0.0/8", "2001:db8:ffff::/48"]
client_ip_header = "X-Forwarded-For"

[zones.per_ip]
size = "10m"
algorithm = "gcra"
rate = "10r/s"

[zones.tools]
description = "expensive wiki tools"
size = "512k"
algorithm = "gcra"
rate = "30r/m"

[zones.search]
size = 1048576
algorithm = "sliding"
events = 100
window = "1h30m"

[zones.uploads]
size = "1m"
algorithm = "concurrency"
max = 4

[classes.wiki-tools]
match = [
  { path_glob = "/w/Special:WhatLinksHere/*" },
  { path = "/index.php", query.title = { glob = "Special:WhatLinksHere/*" } },
]

[classes.search]
[[classes.search.match]]
method = ["GET", "HEAD"]
path_prefix = "/search"
header.user-agent = { regex = "(?i)bot|crawler" }

[classes.upload]
match = [{ method = "POST", path_regex = "^/upload/[0-9]+$" }]

[exempt.health]
match = [{ path = ["/healthz", "/readyz"] }]

[exempt.static]
match = [{ path_glob = ["*.css", "*.js", "*.png"] }]

[exempt.office]
match = [{ client = ["192.0.2.0/24", "2001:db8:1::/48"] }]

[exempt.logged-in]
match = [{ cookie.session = { present = true } }]

[[limit]]
class = "*"
zone = "per_ip"
burst = 20
nodelay = true

[[limit]]
name = "tools-per-net"
class = "wiki-tools"
zone = "tools"
key = ["ip", "method"]
ipv4_prefix = 24
ipv6_prefix = 56
burst = 5
delay = 2
status = 503
log_level = "warn"

[[limit]]
class = ["search", "wiki-tools"]
zone = "search"
key = ["header:X-Api-Key", "cookie:sid", "path"]
dry_run = true
cost = 2

[[limit]]
class = "upload"
zone = "uploads"
key = "global"
queue = 10
timeout = "30s"
"#;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn parse(src: &str) -> CompiledPolicy {
    match parse_policy(src, Some("policy.toml")) {
        Ok(p) => p,
        Err(e) => panic!("{e}"),
    }
}

fn err(src: &str) -> PolicyError {
    match parse_policy(src, Some("policy.toml")) {
        Ok(_) => panic!("expected an error"),
        Err(e) => e,
    }
}

/// Assert `line:col` and that the message contains `needle`.
#[track_caller]
fn assert_err(src: &str, line: usize, col: usize, needle: &str) {
    let e = err(src);
    assert_eq!(
        (e.line, e.column),
        (line, col),
        "wrong position for error: {e}"
    );
    assert!(
        e.message.contains(needle),
        "message {:?} lacks {needle:?}",
        e.message
    );
}

/// Split a raw target at `?` (the real engine normalizes the path with
/// `normalize::normalize_target`; these tests use already-normal paths).
fn split(target: &str) -> (&str, &str) {
    target.split_once('?').unwrap_or((target, ""))
}

struct Req {
    view: OwnedRequest,
}

impl Req {
    fn new(method: &str, target: &str, peer: &str) -> Self {
        Req {
            view: OwnedRequest::new(method, target, ip(peer)),
        }
    }
    fn header(mut self, n: &str, v: &str) -> Self {
        self.view = self.view.header(n, v);
        self
    }
    fn with<R>(&self, policy: &CompiledPolicy, f: impl FnOnce(&PreparedRequest<'_>) -> R) -> R {
        let target = std::str::from_utf8(self.view.target()).unwrap();
        let (path, query) = split(target);
        let p = policy.prepare(&self.view, path.as_bytes(), query.as_bytes());
        f(&p)
    }
    fn limits(&self, policy: &CompiledPolicy) -> Vec<String> {
        self.with(policy, |p| {
            policy
                .matching_limits(p)
                .map(|(_, l)| l.name.clone())
                .collect()
        })
    }
    fn exemption(&self, policy: &CompiledPolicy) -> Option<String> {
        self.with(policy, |p| policy.exemption(p).map(|c| c.name.clone()))
    }
    fn key(&self, policy: &CompiledPolicy, limit: &str) -> Vec<u8> {
        let l = policy.limits.iter().find(|l| l.name == limit).unwrap();
        self.with(policy, |p| {
            let mut buf = [0u8; KEY_BUF_LEN];
            let n = l.key.build(p, &mut buf);
            buf[..n].to_vec()
        })
    }
}

#[test]
fn full_policy_parses() {
    let p = parse(FULL);
    assert_eq!(p.failure_mode, FailureMode::Closed);
    assert!(p.emit_headers);
    assert_eq!(p.client_ip.trusted.nets().len(), 2);
    assert_eq!(
        p.client_ip.source,
        ForwardedSource::List(b"x-forwarded-for".to_vec().into())
    );

    let z = |n: &str| &p.zones[p.zone_index(n).unwrap()];
    assert_eq!(z("per_ip").size, 10 << 20);
    assert_eq!(z("tools").size, 512 << 10);
    assert_eq!(z("search").size, 1 << 20);
    match z("per_ip").algorithm {
        Algorithm::Gcra { rate } => assert_eq!(rate.interval_ns(), Ok(100_000_000)),
        a => panic!("{a:?}"),
    }
    match z("tools").algorithm {
        Algorithm::Gcra { rate } => assert_eq!(rate.interval_ns(), Ok(2_000_000_000)),
        a => panic!("{a:?}"),
    }
    assert_eq!(
        z("search").algorithm,
        Algorithm::Sliding {
            events: 100,
            window: Duration::from_secs(5400)
        }
    );
    assert_eq!(z("uploads").algorithm, Algorithm::Concurrency { max: 4 });

    assert_eq!(p.classes.len(), 3);
    assert_eq!(
        p.classes[p.class_index("wiki-tools").unwrap()].shapes.len(),
        2
    );
    assert_eq!(p.exemptions.len(), 4);

    let names: Vec<_> = p.limits.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "*/per_ip",
            "tools-per-net",
            "search+wiki-tools/search",
            "upload/uploads"
        ]
    );
    let all = &p.limits[0];
    assert!(all.classes.is_empty());
    assert_eq!(
        (all.burst, all.delay, all.status),
        (20, Delay::NoDelay, 429)
    );
    assert_eq!(all.log_level, LogLevel::Error);
    assert_eq!(&all.key.parts[..], &[KeyPart::IP]);
    assert!(!all.dry_run);

    let t = &p.limits[1];
    assert_eq!((t.burst, t.delay, t.status), (5, Delay::After(2), 503));
    assert_eq!(t.log_level, LogLevel::Warn);
    assert_eq!(
        &t.key.parts[..],
        &[
            KeyPart::Ip {
                v4_prefix: 24,
                v6_prefix: 56
            },
            KeyPart::Method
        ]
    );

    let s = &p.limits[2];
    assert!(s.dry_run);
    assert_eq!(s.cost, 2);
    assert_eq!(s.classes.len(), 2);
    assert_eq!(
        &s.key.parts[..],
        &[
            KeyPart::Header(b"x-api-key".to_vec().into()),
            KeyPart::Cookie(b"sid".to_vec().into()),
            KeyPart::Path
        ]
    );

    let u = &p.limits[3];
    assert_eq!((u.queue, u.timeout), (10, Duration::from_secs(30)));
    assert_eq!(&u.key.parts[..], &[KeyPart::Global]);
}

#[test]
fn defaults() {
    let p = parse(
        r#"
[zones.z]
size = "1m"
algorithm = "gcra"
rate = "1r/s"

[[limit]]
class = "*"
zone = "z"
"#,
    );
    assert_eq!(p.failure_mode, FailureMode::Open);
    assert!(!p.emit_headers);
    assert!(p.client_ip.trusted.is_empty());
    let l = &p.limits[0];
    assert_eq!(
        (l.burst, l.delay, l.status, l.cost),
        (0, Delay::Delay, 429, 1)
    );
    assert_eq!(&l.key.parts[..], &[KeyPart::IP]);
}

#[test]
fn a_policy_without_limits_is_refused() {
    assert_err("", 1, 1, "no [[limit]]");
    assert_err(ZONE, 5, 1, "no [[limit]]");
}

// ---------------------------------------------------------------------------
// Errors and positions
// ---------------------------------------------------------------------------

const ZONE: &str = "[zones.z]\nsize = \"1m\"\nalgorithm = \"gcra\"\nrate = \"1r/s\"\n";

#[test]
fn display_format() {
    let src = "[zones.z]\nsize = \"1m\"\nalgorithm = \"gcra\"\nrate = \"5r/w\"\n";
    let e = err(src);
    assert_eq!(
        e.to_string(),
        "policy.toml:4:10: unknown rate unit \"r/w\"; expected r/s, r/m, r/h or r/d"
    );
    let e = parse_policy(src, None).err().unwrap();
    assert_eq!(
        e.to_string(),
        "4:10: unknown rate unit \"r/w\"; expected r/s, r/m, r/h or r/d"
    );
}

#[test]
fn unknown_fields_are_errors() {
    assert_err("burst = 3\n", 1, 1, "unknown field `burst`");
    assert_err(
        "[zones.z]\nsize = \"1m\"\nalgoritm = \"gcra\"\n",
        3,
        1,
        "unknown field `algoritm`",
    );
    let src = format!("{ZONE}[classes.c]\nmatch = [{{ pth = \"/x\" }}]\n");
    assert_err(&src, 6, 12, "unknown field `pth`");
    let src = format!("{ZONE}[classes.c]\nmatch = [{{ header.x = {{ globb = \"a\" }} }}]\n");
    assert_err(&src, 6, 25, "unknown field `globb`");
    let src = format!("{ZONE}[[limit]]\nclass = \"*\"\nzone = \"z\"\nburts = 3\n");
    assert_err(&src, 8, 1, "unknown field `burts`");
}

#[test]
fn toml_syntax_and_type_errors() {
    assert_err("failure_mode = \n", 1, 16, "");
    assert_err("headers = \"yes\"\n", 1, 11, "bool");
    assert_err(
        "[zones.z]\nalgorithm = \"gcra\"\n",
        1,
        1,
        "missing field `size`",
    );
    assert_err(
        "[zones.z]\nsize = \"1m\"\nalgorithm = \"gcra\"\n[zones.z]\n",
        4,
        8,
        "duplicate",
    );
}

#[test]
fn value_syntax_errors() {
    // size
    assert_err(
        "[zones.z]\nsize = \"10mb\"\nalgorithm = \"gcra\"\nrate = \"1r/s\"\n",
        2,
        11,
        "unknown size unit \"mb\"",
    );
    assert_err(
        "[zones.z]\nsize = \"lots\"\nalgorithm = \"gcra\"\nrate = \"1r/s\"\n",
        2,
        8,
        "invalid size",
    );
    assert_err(
        "[zones.z]\nsize = 0\nalgorithm = \"gcra\"\nrate = \"1r/s\"\n",
        2,
        8,
        "must be positive",
    );
    // rate
    assert_err(
        "[zones.z]\nsize = \"1m\"\nalgorithm = \"gcra\"\nrate = \"ten\"\n",
        4,
        8,
        "invalid rate \"ten\"",
    );
    assert_err(
        "[zones.z]\nsize = \"1m\"\nalgorithm = \"gcra\"\nrate = \"0r/s\"\n",
        4,
        8,
        "at least 1",
    );
    // duration
    assert_err(
        "[zones.z]\nsize = \"1m\"\nalgorithm = \"sliding\"\nevents = 5\nwindow = \"1h30x\"\n",
        5,
        15,
        "unknown time unit \"x\"",
    );
    assert_err(
        "[zones.z]\nsize = \"1m\"\nalgorithm = \"sliding\"\nevents = 5\nwindow = \"30m1h\"\n",
        5,
        15,
        "largest first",
    );
    assert_err(
        "[zones.z]\nsize = \"1m\"\nalgorithm = \"sliding\"\nevents = 5\nwindow = \"8d\"\n",
        5,
        10,
        "between 1s and 7d",
    );
    // escaped string: position falls back to the value start
    assert_err(
        "[zones.z]\nsize = \"1m\"\nalgorithm = \"gcra\"\nrate = \"5r\\u002Fw\"\n",
        4,
        8,
        "unknown rate unit \"r/w\"",
    );
}

#[test]
fn zone_errors() {
    assert_err(
        "[zones.z]\nsize = \"1m\"\nalgorithm = \"leaky\"\n",
        3,
        13,
        "unknown algorithm \"leaky\"; expected \"gcra\", \"sliding\", \"sliding_log\" or \"concurrency\"",
    );
    assert_err(
        "[zones.z]\nsize = \"1m\"\nalgorithm = \"gcra\"\n",
        3,
        13,
        "needs `rate`",
    );
    assert_err(
        "[zones.z]\nsize = \"1m\"\nalgorithm = \"gcra\"\nrate = \"1r/s\"\nmax = 3\n",
        5,
        7,
        "`max` is a concurrency parameter",
    );
    assert_err(
        "[zones.z]\nsize = \"1m\"\nalgorithm = \"concurrency\"\nmax = 0\n",
        4,
        7,
        "max must be between 1",
    );
    assert_err(
        "[zones.\"bad name\"]\nsize = \"1m\"\nalgorithm = \"concurrency\"\nmax = 1\n",
        1,
        8,
        "invalid zone name \"bad name\"",
    );
}

#[test]
fn matcher_errors() {
    let c = |m: &str| format!("{ZONE}[classes.c]\nmatch = [{m}]\n");
    assert_err(&c("{ path_regex = \"a(\" }"), 6, 25, "invalid regex \"a(\"");
    assert_err(&c("{ path_glob = \"/a[\" }"), 6, 24, "unclosed `[`");
    assert_err(
        &c("{ client = [\"10.0.0.0/8\", \"10.0.0.1/8\"] }"),
        6,
        36,
        "did you mean \"10.0.0.0/8\"",
    );
    assert_err(&c("{ client = \"300.0.0.1\" }"), 6, 21, "invalid CIDR");
    assert_err(&c("{ path = \"x\" }"), 6, 19, "must start with '/'");
    assert_err(&c("{ method = \"get\" }"), 6, 21, "did you mean \"GET\"");
    assert_err(
        &c("{ header.x = { glob = \"a\", regex = \"b\" } }"),
        6,
        23,
        "exactly one of",
    );
    assert_err(&c("{ }"), 6, 10, "empty match entry");
    assert_err(&c("{ path = [] }"), 6, 19, "empty list");
    assert_err(
        &format!("{ZONE}[classes.c]\nmatch = []\n"),
        6,
        9,
        "empty `match` list",
    );
    assert_err(
        &format!("{ZONE}trusted_proxies = [\"10.0.0.0/33\"]\n"),
        5,
        1,
        // a top-level key after a table belongs to the table: schema error
        "unknown field `trusted_proxies`",
    );
    assert_err(
        "trusted_proxies = [\"10.0.0.0/33\"]\n",
        1,
        20,
        "invalid prefix length",
    );
    assert_err(
        "client_ip_header = \"forwarded\"\n",
        1,
        20,
        "without trusted_proxies",
    );
    assert_err(
        "failure_mode = \"ajar\"\n",
        1,
        16,
        "expected \"open\" or \"closed\"",
    );
}

#[test]
fn limit_errors() {
    let two = format!(
        "{ZONE}[zones.c]\nsize = \"1m\"\nalgorithm = \"concurrency\"\nmax = 2\n[classes.k]\nmatch = [{{ path = \"/\" }}]\n"
    );
    // line numbers of `two`: 1-4 zone z, 5-8 zone c, 9-10 class k, limit starts on 11
    let l = |body: &str| format!("{two}[[limit]]\n{body}\n");
    assert_err(
        &l("class = \"k\"\nzone = \"nope\""),
        13,
        8,
        "unknown zone \"nope\"; defined zones: \"c\", \"z\"",
    );
    assert_err(
        &l("class = [\"k\", \"x\"]\nzone = \"z\""),
        12,
        15,
        "unknown class \"x\"; defined classes: \"k\"",
    );
    assert_err(
        &l("class = [\"k\", \"*\"]\nzone = \"z\""),
        12,
        9,
        "cannot be combined",
    );
    assert_err(
        &l("class = \"k\"\nzone = \"c\"\nburst = 3"),
        14,
        9,
        "`burst` applies only to gcra zones; zone \"c\" is concurrency",
    );
    assert_err(
        &l("class = \"k\"\nzone = \"c\"\nnodelay = true"),
        14,
        11,
        "applies only to gcra",
    );
    assert_err(
        &l("class = \"k\"\nzone = \"z\"\nqueue = 3"),
        14,
        9,
        "applies only to concurrency",
    );
    assert_err(
        &l("class = \"k\"\nzone = \"z\"\nburst = 3\ndelay = 4"),
        15,
        9,
        "exceeds burst",
    );
    assert_err(
        &l("class = \"k\"\nzone = \"z\"\nburst = 3\ndelay = 1\nnodelay = true"),
        15,
        9,
        "not both",
    );
    assert_err(
        &l("class = \"k\"\nzone = \"z\"\nstatus = 200"),
        14,
        10,
        "status must be between 400 and 599",
    );
    assert_err(
        &l("class = \"k\"\nzone = \"z\"\nlog_level = \"loud\""),
        14,
        13,
        "unknown log_level",
    );
    assert_err(
        &l("class = \"k\"\nzone = \"z\"\ncost = 0"),
        14,
        8,
        "cost must be between 1",
    );
    assert_err(
        &l("class = \"k\"\nzone = \"z\"\nburst = 1\ncost = 3"),
        15,
        8,
        "can never be admitted",
    );
    assert_err(
        &l("class = \"k\"\nzone = \"c\"\ntimeout = \"5s\""),
        14,
        11,
        "without `queue`",
    );
    assert_err(
        &l("class = \"k\"\nzone = \"c\"\nqueue = 1\ntimeout = \"2h\""),
        15,
        11,
        "between 1ms and 1h",
    );
    assert_err(
        &l("class = \"k\"\nzone = \"z\"\nkey = [\"ip\", \"host\"]"),
        14,
        14,
        "unknown key part \"host\"",
    );
    assert_err(
        &l("class = \"k\"\nzone = \"z\"\nkey = [\"ip\", \"ip\"]"),
        14,
        14,
        "listed twice",
    );
    assert_err(
        &l("class = \"k\"\nzone = \"z\"\nkey = [\"ip\", \"global\"]"),
        14,
        14,
        "\"global\" cannot be combined",
    );
    assert_err(
        &l("class = \"k\"\nzone = \"z\"\nkey = \"header:bad name\""),
        14,
        7,
        "invalid header name",
    );
    assert_err(
        &l("class = \"k\"\nzone = \"z\"\nkey = \"path\"\nipv6_prefix = 48"),
        15,
        15,
        "no \"ip\" or \"var:\" part",
    );
    assert_err(
        &l("class = \"k\"\nzone = \"z\"\nipv4_prefix = 33"),
        14,
        15,
        "ipv4_prefix must be between 0 and 32",
    );
    assert_err(&l("zone = \"z\""), 11, 1, "missing field `class`");
    // duplicate names (implicit and explicit)
    let dup = format!(
        "{two}[[limit]]\nclass = \"k\"\nzone = \"z\"\n[[limit]]\nclass = \"k\"\nzone = \"z\"\n"
    );
    assert_err(
        &dup,
        14,
        1,
        "duplicate limit name \"k/z\" (first used on line 11)",
    );
    let dup = format!("{two}[[limit]]\nname = \"a\"\nclass = \"k\"\nzone = \"z\"\n[[limit]]\nname = \"a\"\nclass = \"k\"\nzone = \"c\"\n");
    assert_err(&dup, 16, 8, "duplicate limit name \"a\"");
}

#[test]
fn all_errors_are_collected_in_file_order() {
    let src = "failure_mode = \"ajar\"\n[zones.b]\nsize = \"1x\"\nalgorithm = \"gcra\"\nrate = \"1r/w\"\n[zones.a]\nsize = \"1m\"\nalgorithm = \"nope\"\n";
    let errs = check_policy(src, Some("p.toml")).err().unwrap();
    let pos: Vec<_> = errs.iter().map(|e| (e.line, e.column)).collect();
    // The last: no [[limit]], at the end of the file.
    assert_eq!(
        pos,
        vec![(1, 16), (3, 10), (5, 10), (8, 13), (9, 1)],
        "{errs:?}"
    );
    assert_eq!(parse_policy(src, None).err().unwrap().line, 1);
}

// ---------------------------------------------------------------------------
// Matching
// ---------------------------------------------------------------------------

#[test]
fn wiki_tools_matches_both_shapes() {
    let p = parse(FULL);
    let tools = "tools-per-net";
    let lim = |t: &str| Req::new("GET", t, "198.51.100.7").limits(&p);
    assert!(lim("/w/Special:WhatLinksHere/Main_Page").contains(&tools.to_string()));
    assert!(
        lim("/index.php?title=Special:WhatLinksHere/Main_Page&limit=500")
            .contains(&tools.to_string())
    );
    // percent-encoded query value is decoded before matching
    assert!(
        lim("/index.php?title=Special%3AWhatLinksHere%2FMain_Page").contains(&tools.to_string())
    );
    // a duplicate argument can't hide the match
    assert!(lim("/index.php?title=Main&title=Special:WhatLinksHere/X").contains(&tools.to_string()));
    // shapes don't mix: path glob shape doesn't apply to /index.php, and the
    // query test needs path /index.php
    assert!(!lim("/index.php?title=Main_Page").contains(&tools.to_string()));
    assert!(!lim("/w/index.php?title=Special:WhatLinksHere/X").contains(&tools.to_string()));
    assert!(!lim("/w/Special:RecentChanges").contains(&tools.to_string()));
    assert_eq!(
        lim("/w/Special:WhatLinksHere/X"),
        ["*/per_ip", "tools-per-net", "search+wiki-tools/search"]
    );
    assert_eq!(lim("/w/Main_Page"), ["*/per_ip"]);
}

#[test]
fn method_header_regex_matchers() {
    let p = parse(FULL);
    let s = "search+wiki-tools/search";
    let bot = |m: &str, ua: &str| {
        Req::new(m, "/search?q=x", "198.51.100.7")
            .header("User-Agent", ua)
            .limits(&p)
            .contains(&s.to_string())
    };
    assert!(bot("GET", "Mozilla/5.0 (compatible; Googlebot/2.1)"));
    assert!(bot("HEAD", "SomeCrawler"));
    assert!(!bot("POST", "SomeCrawler"));
    assert!(!bot("GET", "Mozilla/5.0 Firefox"));
    assert!(!Req::new("GET", "/search", "198.51.100.7")
        .limits(&p)
        .contains(&s.to_string()));

    let up = |m: &str, t: &str| {
        Req::new(m, t, "198.51.100.7")
            .limits(&p)
            .contains(&"upload/uploads".to_string())
    };
    assert!(up("POST", "/upload/123"));
    assert!(!up("POST", "/upload/12a"));
    assert!(!up("PUT", "/upload/123"));
}

#[test]
fn exemptions() {
    let p = parse(FULL);
    let ex = |r: Req| r.exemption(&p);
    assert_eq!(
        ex(Req::new("GET", "/healthz", "198.51.100.7")).as_deref(),
        Some("health")
    );
    assert_eq!(ex(Req::new("GET", "/healthz/x", "198.51.100.7")), None);
    // static: *.css on the normalized path, query ignored
    assert_eq!(
        ex(Req::new("GET", "/app.css?v=3", "198.51.100.7")).as_deref(),
        Some("static")
    );
    assert_eq!(
        ex(Req::new("GET", "/a/b/site.js", "198.51.100.7")).as_deref(),
        Some("static")
    );
    assert_eq!(ex(Req::new("GET", "/app.css.php", "198.51.100.7")), None);
    // office CIDRs, v4 and v6, and via a trusted proxy
    assert_eq!(
        ex(Req::new("GET", "/", "192.0.2.55")).as_deref(),
        Some("office")
    );
    assert_eq!(
        ex(Req::new("GET", "/", "2001:db8:1:2::9")).as_deref(),
        Some("office")
    );
    assert_eq!(
        ex(Req::new("GET", "/", "10.0.0.1").header("X-Forwarded-For", "192.0.2.55")).as_deref(),
        Some("office")
    );
    assert_eq!(
        ex(Req::new("GET", "/", "198.51.100.7").header("X-Forwarded-For", "192.0.2.55")),
        None
    );
    // logged-in cookie
    assert_eq!(
        ex(Req::new("GET", "/", "198.51.100.7").header("Cookie", "theme=dark; session=abc"))
            .as_deref(),
        Some("logged-in")
    );
    assert_eq!(
        ex(Req::new("GET", "/", "198.51.100.7").header("Cookie", "sessionx=abc")),
        None
    );
}

#[test]
fn value_matchers_present_absent_equals() {
    let src = format!(
        "{ZONE}[classes.c]\nmatch = [{{ header.x-a = {{ present = false }}, cookie.k = {{ equals = \"v\" }}, query.q = {{ present = true }} }}]\n[[limit]]\nclass = \"c\"\nzone = \"z\"\n"
    );
    let p = parse(&src);
    let m = |r: Req| !r.limits(&p).is_empty();
    assert!(m(
        Req::new("GET", "/?q", "198.51.100.1").header("Cookie", "k=v")
    ));
    assert!(!m(
        Req::new("GET", "/?q", "198.51.100.1").header("Cookie", "k=w")
    ));
    assert!(!m(
        Req::new("GET", "/", "198.51.100.1").header("Cookie", "k=v")
    ));
    assert!(!m(Req::new("GET", "/?q", "198.51.100.1")
        .header("Cookie", "k=v")
        .header("X-A", "")));
}

// ---------------------------------------------------------------------------
// Keys and client IPs
// ---------------------------------------------------------------------------

#[test]
fn ipv6_64_aggregation() {
    let p = parse(FULL);
    let k = |peer: &str| Req::new("GET", "/", peer).key(&p, "*/per_ip");
    let a = k("2001:db8:aa:bb:1::1");
    assert_eq!(a, k("2001:db8:aa:bb:ffff:ffff:ffff:ffff"));
    assert_ne!(a, k("2001:db8:aa:bc::1"));
    assert_eq!(a[..4], [0, 1, 6, 64]);
    // IPv4: /32 by default
    assert_ne!(k("198.51.100.1"), k("198.51.100.2"));
    // /56 and /24 for the tools limit, method part keeps GET/POST apart
    let t = |m: &str, peer: &str| {
        Req::new(m, "/w/Special:WhatLinksHere/X", peer).key(&p, "tools-per-net")
    };
    assert_eq!(t("GET", "2001:db8:aa:bb::1"), t("GET", "2001:db8:aa:ff::1"));
    assert_ne!(t("GET", "2001:db8:aa:bb::1"), t("GET", "2001:db8:ab:bb::1"));
    assert_eq!(t("GET", "198.51.100.1"), t("GET", "198.51.100.200"));
    assert_ne!(t("GET", "198.51.100.1"), t("POST", "198.51.100.1"));
}

#[test]
fn composite_keys() {
    let p = parse(FULL);
    let k = |r: Req| r.key(&p, "search+wiki-tools/search");
    let base = || Req::new("GET", "/search", "198.51.100.1");
    let a = k(base().header("X-Api-Key", "k1").header("Cookie", "sid=s1"));
    assert_eq!(
        a,
        k(Req::new("GET", "/search", "203.0.113.9")
            .header("x-api-key", "k1")
            .header("Cookie", "sid=s1"))
    );
    assert_ne!(
        a,
        k(base().header("X-Api-Key", "k2").header("Cookie", "sid=s1"))
    );
    assert_ne!(
        a,
        k(base().header("X-Api-Key", "k1").header("Cookie", "sid=s2"))
    );
    assert_ne!(k(base().header("X-Api-Key", "")), k(base()));
    let global = |peer: &str| Req::new("POST", "/upload/1", peer).key(&p, "upload/uploads");
    assert_eq!(global("198.51.100.1"), global("2001:db8::1"));
}

#[test]
fn xff_untrusted_peer_ignored() {
    let p = parse(FULL);
    let r = Req::new("GET", "/", "198.51.100.7").header("X-Forwarded-For", "203.0.113.1");
    assert_eq!(p.client_ip(&r.view), Some(ip("198.51.100.7")));
}

#[test]
fn xff_trusted_chain_picks_first_untrusted_from_right() {
    let p = parse(FULL);
    let r = Req::new("GET", "/", "10.1.2.3").header(
        "X-Forwarded-For",
        "6.6.6.6, 203.0.113.1, 10.0.0.9, 2001:db8:ffff::1",
    );
    // 2001:db8:ffff::1 and 10.0.0.9 are trusted hops; 203.0.113.1 is the
    // client; 6.6.6.6 was supplied by the client and is ignored.
    assert_eq!(p.client_ip(&r.view), Some(ip("203.0.113.1")));
    // keys follow the resolved address
    let direct = Req::new("GET", "/", "203.0.113.1").key(&p, "*/per_ip");
    assert_eq!(r.key(&p, "*/per_ip"), direct);
    // trusted peer without the header: the peer
    assert_eq!(
        p.client_ip(&Req::new("GET", "/", "10.1.2.3").view),
        Some(ip("10.1.2.3"))
    );
}

#[test]
fn forwarded_header_mode() {
    let src = format!(
        "trusted_proxies = [\"10.0.0.0/8\"]\nclient_ip_header = \"Forwarded\"\n{ZONE}\
         [[limit]]\nclass = \"*\"\nzone = \"z\"\n"
    );
    let p = parse(&src);
    assert_eq!(p.client_ip.source, ForwardedSource::Forwarded);
    let r = Req::new("GET", "/", "10.0.0.2")
        .header(
            "Forwarded",
            "for=192.0.2.60;proto=http, for=\"[2001:db8:cafe::17]:4711\", for=10.0.0.3",
        )
        .header("X-Forwarded-For", "1.1.1.1");
    assert_eq!(p.client_ip(&r.view), Some(ip("2001:db8:cafe::17")));
}

#[test]
fn documented_example_parses() {
    let doc = include_str!("../../docs/POLICY.md");
    let start = doc.find("## Complete example").unwrap();
    let block = &doc[start..];
    let block = &block[block.find("```toml\n").unwrap() + 8..];
    let block = &block[..block.find("```").unwrap()];
    let p = parse(block);
    assert_eq!(p.limits.len(), 5);
    assert_eq!(p.exemptions.len(), 3);
    let health = p.class_index("health").unwrap();
    assert_eq!(
        p.class_lanes[health],
        Some(weir::policy::config::Lane::Critical)
    );
    assert!(p.zones[p.zone_index("app").unwrap()].learn.is_some());
    let r = Req::new(
        "GET",
        "/index.php?title=Special:WhatLinksHere/X",
        "198.51.100.7",
    );
    assert!(r.limits(&p).contains(&"tools-per-net".to_string()));
}
