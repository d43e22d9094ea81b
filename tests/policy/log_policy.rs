//! `algorithm = "sliding_log"` in the policy format: validation with positions, the engine's
//! verdicts, shared regions (the log lives in the zone's region) and metrics.

use weir::policy::config::{parse_policy, Algorithm};
use weir::policy::engine::Action;
use weir::policy::{Engine, OwnedRequest};
use weir::table::Table;

const S: u64 = 1_000_000_000;

fn err(src: &str) -> (usize, usize, String) {
    match parse_policy(src, Some("p.toml")) {
        Ok(_) => panic!("expected an error"),
        Err(e) => (e.line, e.column, e.message),
    }
}

const ZONE: &str =
    "[zones.z]\nsize = \"64k\"\nalgorithm = \"sliding_log\"\nevents = 3\nwindow = \"10s\"\n";

#[test]
fn log_is_an_alias_of_sliding_log() {
    let limit = "[[limit]]\nclass = \"*\"\nzone = \"z\"\n";
    let new = parse_policy(&format!("{ZONE}{limit}"), None).unwrap();
    let old = parse_policy(
        &format!("{}{limit}", ZONE.replace("\"sliding_log\"", "\"log\"")),
        None,
    )
    .unwrap();
    assert!(matches!(
        new.zones[0].algorithm,
        Algorithm::SlidingLog { events: 3, .. }
    ));
    assert_eq!(old.zones, new.zones);
    assert_eq!(new.zones[0].algorithm.name(), "sliding_log");
}

#[test]
fn log_zones_parse_and_refuse_bad_parameters_with_positions() {
    let p = parse_policy(
        &format!("{ZONE}[[limit]]\nclass = \"*\"\nzone = \"z\"\n"),
        Some("p.toml"),
    )
    .unwrap();
    assert!(matches!(
        p.zones[0].algorithm,
        Algorithm::SlidingLog { events: 3, .. }
    ));

    let (l, c, m) = err(&format!(
        "{ZONE}[[limit]]\nclass = \"*\"\nzone = \"z\"\ncost = 2\n"
    ));
    assert_eq!((l, c), (9, 8), "{m}");
    assert!(
        m.contains("cost = 2 can never be admitted") && m.contains("log zone"),
        "{m}"
    );

    let (l, c, m) =
        err("[zones.z]\nsize = \"1m\"\nalgorithm = \"log\"\nevents = 5000\nwindow = \"1s\"\n");
    assert_eq!((l, c), (4, 10), "{m}");
    assert!(m.contains("at most 4096 events"), "{m}");

    let (l, _, m) = err("[zones.z]\nsize = \"1m\"\nalgorithm = \"log\"\nevents = 5\n");
    assert_eq!(l, 3, "{m}");
    assert!(m.contains("needs `window`"), "{m}");

    let (_, _, m) = err(
        "[zones.z]\nsize = \"1m\"\nalgorithm = \"log\"\nevents = 5\nwindow = \"1s\"\nmax = 3\n",
    );
    assert!(m.contains("`max` is a concurrency parameter"), "{m}");

    let (_, _, m) = err("[zones.z]\nsize = \"1m\"\nalgorithm = \"log\"\nevents = 5\nwindow = \"1s\"\nscope = \"cluster\"\nredis = \"redis://x\"\n");
    assert!(m.contains("per-key event times are not shared"), "{m}");

    // A region too small for one record is refused when the policy is parsed, at its size.
    let (l, c, m) = err(
        "[zones.z]\nsize = 2000\nalgorithm = \"log\"\nevents = 4096\nwindow = \"1s\"\n[[limit]]\nclass = \"*\"\nzone = \"z\"\n",
    );
    assert_eq!((l, c), (2, 8), "{m}");
    assert!(m.contains("holds no key"), "{m}");
}

fn get(peer: &str) -> OwnedRequest {
    OwnedRequest::new("GET", "/", peer.parse().unwrap())
}

#[test]
fn engine_over_a_shared_region_keeps_the_log_across_attach() {
    let p = parse_policy(
        &format!("{ZONE}[[limit]]\nclass = \"*\"\nzone = \"z\"\nname = \"l\"\n"),
        Some("p.toml"),
    )
    .unwrap();
    let layout = &Engine::layouts(&p)[0];
    let mem = std::alloc::Layout::from_size_align(layout.bytes, 64).unwrap();
    // SAFETY: non-zero size; freed at the end after both engines are dropped.
    let ptr = unsafe { std::alloc::alloc_zeroed(mem) };
    let engine = |p| {
        // SAFETY: exclusive use in this test; outlives the engine.
        let (t, _) =
            unsafe { Table::create_or_attach(ptr, layout.bytes, layout.schema, 0) }.unwrap();
        Engine::with_tables(p, vec![t]).unwrap()
    };
    let a = engine(p.clone());
    let r = get("192.0.2.1");
    for _ in 0..3 {
        assert!(a.evaluate(&r, 1000 * S).unwrap().action == Action::Pass);
    }
    let v = a.evaluate(&r, 1003 * S).unwrap();
    assert_eq!(v.action, Action::Reject);
    assert_eq!(v.retry_after_s(), 7);
    // A second engine attached to the same region (another worker, or a reload) sees the log.
    let b = engine(p);
    assert_eq!(b.evaluate(&r, 1005 * S).unwrap().action, Action::Reject);
    assert_eq!(b.evaluate(&r, 1010 * S).unwrap().action, Action::Pass);
    let mut text = String::new();
    b.render_prometheus(&mut text).unwrap();
    assert!(text.contains("weir_zone_occupancy{zone=\"z\"} 1"), "{text}");
    assert!(
        text.contains("weir_limit_requests_total{limit=\"l\",verdict=\"rejected\"} 1"),
        "{text}"
    );
    drop((a, b));
    // SAFETY: allocated above with this layout; the engines are gone.
    unsafe { std::alloc::dealloc(ptr, mem) };
}
