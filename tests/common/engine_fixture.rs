//! A realistic policy and request mix, shared by `benches/policy.rs` and
//! `tests/policy/no_alloc.rs`.
#![allow(dead_code)]

use std::net::IpAddr;

use weir::policy::{Action, Engine, OwnedRequest};

/// 10 classes (path prefix / glob / regex, query-arg glob, header regex,
/// cookie, CIDR), 3 exemptions, 4 limits: per-IP gcra, global class gcra,
/// per-API-key sliding window, one concurrency limit. Behind trusted proxies.
pub const REALISTIC_POLICY: &str = r#"
failure_mode = "open"
headers = true
trusted_proxies = ["172.16.0.0/12", "2001:db8:ffff::/48"]
client_ip_header = "x-forwarded-for"

[zones.per_ip]
size = "1m"
algorithm = "gcra"
rate = "10r/s"

[zones.tools_global]
size = "64k"
algorithm = "gcra"
rate = "200r/s"

[zones.api_keys]
size = "1m"
algorithm = "sliding"
events = 6000
window = "1m"

[zones.expensive]
size = "256k"
algorithm = "concurrency"
max = 4

[classes.wiki-tools]
match = [
  { path_glob = "/w/Special:WhatLinksHere/*" },
  { path = "/w/index.php", query.title = { glob = "Special:WhatLinksHere/*" } },
  { path = "/w/index.php", query.title = { glob = "Special:RecentChangesLinked/*" } },
]

[classes.search]
match = [{ method = ["GET", "HEAD"], path_prefix = "/search" }]

[classes.bots]
match = [{ header.user-agent = { regex = "(?i)bot|crawler|spider|scrapy" } }]

[classes.history]
match = [{ path = "/w/index.php", query.action = { equals = "history" } }]

[classes.diff]
match = [{ path = "/w/index.php", query.diff = { present = true } }]

[classes.upload]
match = [{ method = "POST", path_regex = "^/upload/[0-9]+$" }]

[classes.api]
match = [{ path_prefix = ["/api/", "/w/api.php"] }]

[classes.api-write]
match = [{ method = ["POST", "PUT", "DELETE"], path_prefix = "/api/" }]

[classes.anon-feeds]
match = [{ path_glob = ["/feed/*", "*.rss", "*.atom"], cookie.session = { present = false } }]

[classes.partners]
match = [{ client = ["203.0.113.0/24", "2001:db8:42::/48"] }]

[exempt.health]
match = [{ path = ["/healthz", "/readyz"] }]

[exempt.static]
match = [{ path_glob = ["*.css", "*.js", "*.png", "*.svg", "*.woff2"] }]

[exempt.office]
match = [{ client = ["192.0.2.0/24", "2001:db8:1::/48"] }]

[[limit]]
name = "per-ip"
class = "*"
zone = "per_ip"
burst = 50
nodelay = true

[[limit]]
name = "tools-global"
class = ["wiki-tools", "search", "bots", "history", "diff"]
zone = "tools_global"
key = "global"
burst = 400
nodelay = true

[[limit]]
name = "api-per-key"
class = ["api", "api-write"]
zone = "api_keys"
key = ["header:x-api-key", "method"]

[[limit]]
name = "expensive-inflight"
class = ["wiki-tools", "upload"]
zone = "expensive"
key = ["ip", "cookie:session", "path"]
"#;

/// One zone, one limit on every request.
/// One concurrency limit on one global key, its zone's `max` as given (`"16"` or `"\"auto\""`):
/// the cost of admitting and giving back a permit, fixed or learned.
#[allow(dead_code)]
pub fn concurrency_policy(max: &str) -> String {
    format!(
        "[zones.app]\nsize = \"64k\"\nalgorithm = \"concurrency\"\nmax = {max}\n\
         [[limit]]\nname = \"app\"\nclass = \"*\"\nzone = \"app\"\nkey = \"global\"\n"
    )
}

/// A backend's answer for the concurrency cases: 50 ms, 200.
#[allow(dead_code)]
pub const SAMPLE: weir::policy::engine::Sample = weir::policy::engine::Sample {
    latency_ns: 50_000_000,
    status: 200,
};

pub const MINIMAL_POLICY: &str = r#"
[zones.per_ip]
size = "1m"
algorithm = "gcra"
rate = "10r/s"

[[limit]]
class = "*"
zone = "per_ip"
burst = 20
nodelay = true
"#;

/// [`MINIMAL_POLICY`] at `1r/m`, after `status` (a `[status]` table, or nothing): the reject
/// path's benchmarks.
pub fn reject_policy(status: &str) -> String {
    format!("{status}{MINIMAL_POLICY}").replace("10r/s", "1r/m")
}

/// `policy` (whose only limit is its last table) with `ban = { after = 1, ... }`: the first
/// rejection bans the key for an hour.
pub fn with_ban(policy: &str) -> String {
    format!("{policy}ban = {{ after = 1, within = \"1m\", duration = \"1h\" }}\n")
}

/// 16 clients that have spent their burst in `engine` ([`reject_policy`]) at `now`: with the
/// clock standing still, each of their requests is rejected.
pub fn over_limit_peers(engine: &Engine, now: u64) -> Vec<OwnedRequest> {
    let peers: Vec<_> = (1..=16u8)
        .map(|c| OwnedRequest::new("GET", "/", IpAddr::from([198, 51, 100, c])))
        .collect();
    for r in &peers {
        while engine.evaluate(r, now).unwrap().action != Action::Reject {}
    }
    peers
}

const UA_FIREFOX: &str = "Mozilla/5.0 (X11; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0";

fn peer() -> IpAddr {
    "172.16.0.5".parse().unwrap()
}

/// A wiki tool page through the `index.php?title=` shape: 6 headers incl.
/// cookie, user-agent and the proxy's X-Forwarded-For.
pub fn wiki_tool(client: u8) -> OwnedRequest {
    OwnedRequest::new(
        "GET",
        "/w/index.php?title=Special:WhatLinksHere/Main_Page&limit=500&hidelinks=1",
        peer(),
    )
    .header("host", "en.example.org")
    .header("user-agent", UA_FIREFOX)
    .header(
        "accept",
        "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8",
    )
    .header("accept-language", "en-US,en;q=0.5")
    .header(
        "cookie",
        "GeoIP=US:CA:San_Francisco; session=8f3a2c1de4b5; enwikiUserName=Alice",
    )
    .header(
        "x-forwarded-for",
        &format!("198.51.100.{client}, 172.16.0.9"),
    )
}

/// [`wiki_tool`] from a browser that carries analytics and consent cookies: a 1 KiB
/// `Cookie` header with the session cookie last, as on many real sites.
pub fn wiki_tool_long_cookie(client: u8) -> OwnedRequest {
    let mut r = wiki_tool(client);
    let cookie = r.headers.iter_mut().find(|(n, _)| n == b"cookie").unwrap();
    cookie.1 = LONG_COOKIE.as_bytes().to_vec();
    r
}

const LONG_COOKIE: &str = "_ga=GA1.2.1843274521.1733184000; _gid=GA1.2.987654321.1733184000; \
_fbp=fb.1.1733184000123.1234567890; _gcl_au=1.1.1122334455.1733184000; \
OptanonAlertBoxClosed=2026-11-30T10:11:12.345Z; \
OptanonConsent=isGpcEnabled=0&datestamp=Mon+Nov+30+2026+10%3A11%3A12+GMT%2B0000&version=202409.1.0\
&browserGpcFlag=0&isIABGlobal=false&hosts=&consentId=0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0\
&interactionCount=1&isAnonUser=1&landingPath=NotLandingPage&groups=C0001%3A1%2CC0002%3A1%2CC0003%3A1\
%2CC0004%3A0&AwaitingReconsent=false; \
_hjSessionUser_123456=eyJpZCI6IjEyMzQ1Njc4LTkwYWItY2RlZi0xMjM0LTU2Nzg5MGFiY2RlZiIsImNyZWF0ZWQiOjE3MzMxODQwMDAwMDAsImV4aXN0aW5nIjp0cnVlfQ==; \
_hjSession_123456=eyJpZCI6ImFiY2RlZjEyLTM0NTYtNzg5MC1hYmNkLWVmMTIzNDU2Nzg5MCIsImMiOjE3MzMxODQwMDAwMDAsInMiOjAsInIiOjAsInNiIjowfQ==; \
GeoIP=US:CA:San_Francisco:37.77:-122.42:v4; enwikimwuser-sessionId=7c1f2e3d4b5a6978; \
centralauth_User=Alice; enwikiUserName=Alice; VEE=wikitext; \
session=8f3a2c1de4b5";

/// A static asset: exempt.
pub fn static_asset(client: u8) -> OwnedRequest {
    OwnedRequest::new("GET", "/static/images/project-logos/enwiki.png?v=2", peer())
        .header("host", "en.example.org")
        .header("user-agent", UA_FIREFOX)
        .header("accept", "image/avif,image/webp,*/*")
        .header("referer", "https://en.example.org/wiki/Main_Page")
        .header("x-forwarded-for", &format!("198.51.100.{client}"))
}

/// A REST API call with an API key.
pub fn api_call(client: u8) -> OwnedRequest {
    OwnedRequest::new(
        "GET",
        "/api/rest_v1/page/summary/Albert_Einstein?redirect=true",
        peer(),
    )
    .header("host", "en.example.org")
    .header(
        "user-agent",
        "MyTool/1.2 (https://example.net/mytool; ops@example.net)",
    )
    .header("accept", "application/json")
    .header("x-api-key", &format!("k-{client:03}-7d1e0c9a"))
    .header("x-forwarded-for", &format!("2001:db8:77::{client:x}"))
}

/// A search by a crawler (user-agent regex, global key).
pub fn bot_search(client: u8) -> OwnedRequest {
    OwnedRequest::new("GET", "/search?q=rate+limit&fulltext=1", peer())
        .header("host", "en.example.org")
        .header(
            "user-agent",
            "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)",
        )
        .header("accept", "*/*")
        .header("x-forwarded-for", &format!("66.249.66.{client}"))
}

/// A long (≈1.5 KiB) but valid diff URL with percent-encoded parts.
pub fn long_diff(client: u8) -> OwnedRequest {
    let title = "Very_%22long%22_page_title_".repeat(40);
    let target = format!("/w/index.php?title={title}&diff=1234567&oldid=1234500");
    assert!(target.len() < 2048, "{}", target.len());
    OwnedRequest::new("GET", &target, peer())
        .header("host", "en.example.org")
        .header("user-agent", UA_FIREFOX)
        .header("cookie", "session=ab12cd34")
        .header("x-forwarded-for", &format!("198.51.100.{client}"))
}

/// `policy` (the minimal policy, or a concurrency policy with `max = 16`) with its zone on the
/// cluster at $WEIR_BENCH_REDIS (syncing every 5 s), built and synced once; `None` when the
/// variable is not set.
#[allow(dead_code)]
pub fn cluster_engine(policy: &str) -> Option<Engine> {
    let url = std::env::var("WEIR_BENCH_REDIS").ok()?;
    let zone = format!(
        "scope = \"cluster\"\nredis = \"{url}\"\nsync_interval = \"5s\"\nexpected_nodes = 1\n"
    );
    let src = policy
        .replacen("10r/s\"\n", &format!("10r/s\"\n{zone}"), 1)
        .replacen("max = 16\n", &format!("max = 16\n{zone}"), 1);
    assert_ne!(src, policy, "no zone to put on the cluster");
    let e = Engine::new(weir::policy::CompiledPolicy::parse(&src, None).unwrap()).unwrap();
    let t0 = std::time::Instant::now();
    while !e.cluster(0).unwrap().healthy(weir::clock::monotonic_ns()) {
        assert!(
            t0.elapsed().as_secs() < 10,
            "no sync with $WEIR_BENCH_REDIS"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    Some(e)
}
