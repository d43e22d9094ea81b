//! examples/wiki.toml holds what it promises: with the tool budget used up, every URL form
//! MediaWiki answers with a tool page is limited, while ordinary pages and static assets pass;
//! a made-up session cookie skips no limit. The shared vectors `wiki-*` play the same forms
//! against the example's class in every host; they must carry the example's class verbatim.

use std::net::IpAddr;

use weir::policy::engine::Outcome;
use weir::policy::{Action, CompiledPolicy, Engine, OwnedRequest};

const BASE_NS: u64 = 1_000_000_000_000;

fn example() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/wiki.toml");
    std::fs::read_to_string(path).unwrap()
}

fn engine() -> Engine {
    let policy = CompiledPolicy::parse(&example(), Some("wiki.toml")).unwrap();
    Engine::new(policy).unwrap()
}

/// Requests come from fresh networks (198.18.0.0/15 and 100.64.0.0/10) so that the per-IP and
/// per-network limits stay out of the way.
fn eval(e: &Engine, target: &str, n: u32) -> Outcome {
    let peer: IpAddr = format!("100.{}.{}.1", 64 + n / 256, n % 256)
        .parse()
        .unwrap();
    e.evaluate(&OwnedRequest::new("GET", target, peer), BASE_NS)
        .unwrap()
}

fn limit(e: &Engine, o: &Outcome) -> Option<String> {
    o.limit.map(|i| e.limit_name(i as usize).to_string())
}

/// Use up the anonymous tool budget (burst 30: 31 back to back).
fn drain(e: &Engine) {
    for i in 0..31 {
        let o = eval(e, "/w/Special:WhatLinksHere/Drain", 1000 + i);
        assert_eq!(o.action, Action::Pass, "drain {i}");
    }
    let o = eval(e, "/w/Special:WhatLinksHere/Drain", 1100);
    assert_eq!(limit(e, &o).as_deref(), Some("tools-global"));
}

/// Every way to ask MediaWiki for a tool page (WhatLinksHere, RecentChangesLinked, history,
/// diffs), as a client sends it.
pub const TOOL_FORMS: &[&str] = &[
    // URL forms: article path, PATH_INFO on either script, title= on either script.
    "/w/Special:WhatLinksHere/Page_1",
    "/w/Special:WhatLinksHere?target=Page_1",
    "/index.php/Special:WhatLinksHere/Page_1",
    "/w/index.php/Special:WhatLinksHere/Page_1",
    "/index.php?title=Special:WhatLinksHere/Page_1",
    "/w/index.php?title=Special:WhatLinksHere/Page_1",
    "/index.php?title=Special:WhatLinksHere&target=Page_1",
    "/w/index.php?title=Special%3AWhatLinksHere&target=Page_1",
    "/w/Page_1?title=Special:WhatLinksHere/Page_1",
    "/index.php?title=Main_Page&title=Special:WhatLinksHere/Page_1",
    // Percent-encoding.
    "/w/Special%3AWhatLinksHere%2FPage_1",
    "/w/%53pecial:%57hatLinksHere/Page_1",
    "/index.php?title=Special%3AWhatLinksHere%2FPage_1",
    "/index.php?%74itle=Special:WhatLinksHere/Page_1",
    // Case of the namespace and the page name.
    "/w/special:whatlinkshere/Page_1",
    "/w/SPECIAL:WHATLINKSHERE/Page_1",
    "/w/Special:Whatlinkshere/Page_1",
    "/index.php/sPeCiAl:wHaTlInKsHeRe/Page_1",
    "/index.php?title=special:whatlinkshere&target=Page_1",
    // Blanks: underscores and spaces trimmed and around the colon, a leading colon.
    "/w/_Special_:_WhatLinksHere/Page_1",
    "/w/Special%20:%20WhatLinksHere/Page_1",
    "/w/__Special:WhatLinksHere/Page_1",
    "/w/:Special:WhatLinksHere/Page_1",
    "/w/%C2%A0Special%E3%80%80:WhatLinksHere/Page_1",
    "/index.php?title=+Special+:+WhatLinksHere/Page_1",
    "/index.php?title=_:_special_:_whatlinkshere_",
    // Aliases and the other tools.
    "/w/Special:RecentChangesLinked/Page_1",
    "/w/Special:RelatedChanges/Page_1",
    "/index.php?title=special:relatedchanges&target=Page_1",
    "/w/Special:ComparePages?page1=A&page2=B",
    "/w/Page_1?action=history",
    "/index.php?title=Page_1&action=history",
    "/w/index.php?title=Page_1&action=HISTORY",
    "/w/Page_1?diff=123&oldid=122",
    "/index.php?title=Page_1&diff=prev&oldid=5",
    // Characters MediaWiki drops (bidi marks) or folds into ASCII (ı, ſ, Kelvin sign).
    "/w/Spe%E2%80%8Ecial:WhatLinksHere/Page_1",
    "/index.php?title=Special:What%E2%80%AELinksHere/Page_1",
    "/w/Special:WhatL%C4%B1nksHere/Page_1",
    "/w/Special:WhatLink%C5%BFHere/Page_1",
    "/index.php?title=Special:WhatLin%E2%84%AAsHere/Page_1",
    // Argument names as PHP reads them: leading blanks dropped, cut at a NUL.
    "/index.php?+title=Special:WhatLinksHere/Page_1",
    "/w/index.php?%20%20title=Special:WhatLinksHere/Page_1",
    "/index.php?title%00x=Special:WhatLinksHere/Page_1",
    "/w/Page_1?+action=history",
    "/w/Page_1?diff%00=1",
    // Look like static assets, are tool pages.
    "/index.php/Special:WhatLinksHere/x.css",
    "/w/Special:WhatLinksHere/Page.js",
    "/index.php?title=Special:WhatLinksHere/x.css",
];

/// Ordinary pages: no tool, whatever the tool budget.
pub const ORDINARY: &[&str] = &[
    "/w/Main_Page",
    "/w/WhatLinksHere",
    "/index.php?title=Main_Page",
    "/w/Special:Search?search=links",
    "/w/Special:RecentChanges",
    "/w/Help:Special_pages",
    "/w/Page_1?oldid=122",
    "/index.php",
    "/w/Page_1?+actions=history",
];

#[test]
fn every_form_of_a_tool_page_is_limited() {
    let e = engine();
    drain(&e);
    for (i, t) in TOOL_FORMS.iter().enumerate() {
        let o = eval(&e, t, i as u32);
        assert_eq!(
            (o.action, limit(&e, &o).as_deref()),
            (Action::Reject, Some("tools-global")),
            "{t}"
        );
        assert!(o.exempt.is_none(), "{t}");
    }
    // A form's fields are invisible to weir: every POST counts.
    let peer: IpAddr = "100.100.0.1".parse().unwrap();
    let o = e
        .evaluate(&OwnedRequest::new("POST", "/w/Page_1", peer), BASE_NS)
        .unwrap();
    assert_eq!(limit(&e, &o).as_deref(), Some("tools-global"));
    for (i, t) in ORDINARY.iter().enumerate() {
        let o = eval(&e, t, 500 + i as u32);
        assert_eq!((o.action, o.limit), (Action::Pass, None), "{t}");
    }
    for t in ["/app.css?v=3", "/load.js?v=7", "/favicon.ico"] {
        let o = eval(&e, t, 600);
        assert!(o.exempt.is_some(), "{t}");
    }
}

#[test]
fn a_session_cookie_gets_a_budget_not_an_exemption() {
    let e = engine();
    drain(&e);
    let tool = |cookie: &str, n: u32| {
        let peer: IpAddr = format!("198.18.{}.1", n % 256).parse().unwrap();
        let r = OwnedRequest::new("GET", "/w/Special:WhatLinksHere/X", peer)
            .header("Cookie", &format!("wiki_session={cookie}"));
        e.evaluate(&r, BASE_NS).unwrap()
    };
    // An editor's session has a budget of its own while the anonymous one is empty.
    for i in 0..11 {
        let o = tool("editor1", i);
        assert_eq!((o.action, o.exempt), (Action::Pass, None), "editor {i}");
    }
    // Nothing is exempt for a cookie: the per-IP limit counts it like any other request.
    let peer: IpAddr = "198.51.100.9".parse().unwrap();
    let page = OwnedRequest::new("GET", "/w/Main_Page", peer).header("Cookie", "wiki_session=x");
    for _ in 0..21 {
        assert_eq!(e.evaluate(&page, BASE_NS).unwrap().action, Action::Pass);
    }
    let o = e.evaluate(&page, BASE_NS).unwrap();
    assert_eq!(limit(&e, &o).as_deref(), Some("per-ip"));
    // A crawler making up a session per request meets the site-wide ceiling: burst 300, of
    // which the drain and the editor used 31 + 11.
    let mut passed = 0;
    for n in 0..400 {
        let o = tool(&format!("made-up-{n}"), n);
        match o.action {
            Action::Pass => passed += 1,
            _ => assert_eq!(limit(&e, &o).as_deref(), Some("tools-all"), "{n}"),
        }
    }
    assert_eq!(passed, 301 - 31 - 11);
}

#[test]
fn shared_vectors_carry_the_example_class() {
    let class = section(&example(), "[classes.wiki-tools]");
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/vectors");
    let mut n = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !name.starts_with("wiki-") {
            continue;
        }
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let policy = v["policy"].as_str().unwrap();
        assert!(policy.contains(&class), "{name}: not the example's class");
        n += 1;
    }
    assert!(n >= 5, "{n} wiki-* vectors");
}

/// A `[table]` of a TOML file, up to the next table or section comment.
fn section(src: &str, header: &str) -> String {
    let start = src.find(header).unwrap();
    let end = src[start + 1..]
        .find("\n[")
        .map_or(src.len(), |i| start + 1 + i);
    let body = &src[start..end];
    body[..body.find("\n\n").unwrap_or(body.len())].to_string()
}
