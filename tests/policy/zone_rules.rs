//! A policy that parses can be built into an engine: every rule the tables and limiters apply
//! when a host creates them is applied when the policy is parsed (so `weir check`, `nginx -t`
//! and `caddy validate` refuse it, at its line and column).

use weir::policy::zone_size::min_zone_bytes;
use weir::policy::{parse_policy, Engine};

fn policy(zone: &str) -> String {
    format!("[zones.z]\n{zone}\n[[limit]]\nclass = \"*\"\nzone = \"z\"\n")
}

#[test]
fn parse_accepts_exactly_what_the_engine_builds() {
    let zones = [
        "algorithm = \"gcra\"\nrate = \"10r/s\"",
        "algorithm = \"sliding\"\nevents = 100\nwindow = \"1m\"",
        "algorithm = \"concurrency\"\nmax = 5",
        "algorithm = \"log\"\nevents = 1\nwindow = \"1s\"",
        "algorithm = \"log\"\nevents = 4096\nwindow = \"1m\"",
        "algorithm = \"sliding\"\nevents = 2000000\nwindow = \"1m\"",
        "algorithm = \"concurrency\"\nmax = 2000000",
    ];
    for zone in zones {
        let at_min = parse_policy(&policy(&format!("size = 1000000\n{zone}")), None)
            .ok()
            .and_then(|p| min_zone_bytes(&p.zones[0].algorithm));
        let sizes = match at_min {
            Some(min) => vec![1, 1024, min - 1, min, min + 1, 1 << 20],
            None => vec![1 << 20],
        };
        for size in sizes {
            let src = policy(&format!("size = {size}\n{zone}"));
            let parsed = parse_policy(&src, Some("p.toml"));
            let built = parsed.clone().map(Engine::new);
            match (&parsed, &built) {
                (Ok(_), Ok(Err(e))) => panic!("parsed but not built: {e}\n{src}"),
                // Refused at a value: the size (line 2) unless it is large enough.
                (Err(e), _) => assert!(e.line == 2 || size == 1 << 20 && e.line > 2, "{e}"),
                _ => {}
            }
        }
    }
}

#[test]
fn limit_parameters_the_limiters_refuse_are_refused_when_parsed() {
    let cases = [
        (
            "algorithm = \"gcra\"\nrate = \"1r/d\"",
            "burst = 9000000000000000000",
        ),
        ("algorithm = \"gcra\"\nrate = \"1r/d\"", "burst = 100000000"),
        (
            "algorithm = \"gcra\"\nrate = \"10r/s\"",
            "burst = 2\ndelay = 5",
        ),
        (
            "algorithm = \"sliding\"\nevents = 100\nwindow = \"1m\"",
            "cost = 200",
        ),
        ("algorithm = \"concurrency\"\nmax = 2", "cost = 3"),
        (
            "algorithm = \"log\"\nevents = 10\nwindow = \"1m\"",
            "cost = 2",
        ),
        ("algorithm = \"concurrency\"\nmax = 2", "queue = 2000000"),
        (
            "algorithm = \"sliding\"\nevents = 10\nwindow = \"1m\"\nscope = \"cluster\"\n\
             redis = \"redis://127.0.0.1:1\"\nexpected_nodes = 5",
            "cost = 3",
        ),
    ];
    for (zone, limit) in cases {
        let src = format!(
            "[zones.z]\nsize = \"1m\"\n{zone}\n[[limit]]\nclass = \"*\"\nzone = \"z\"\n{limit}\n"
        );
        if let Ok(p) = parse_policy(&src, None) {
            if let Err(e) = Engine::new(p) {
                panic!("parsed but not built: {e}\n{src}");
            }
        }
    }
}
