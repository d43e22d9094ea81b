//! The Prometheus text: one set of `weir_zone_*` families for policy zones and zones outside
//! the policy, each family once with its samples grouped (the hosts' tests also run it through
//! Go's expfmt parser, `target/caddy/promcheck`).

use std::collections::HashSet;

use weir::policy::metrics::render_prometheus;
use weir::policy::{parse_policy, Engine};
use weir::table::Table;

const POLICY: &str = "[zones.pz]\nsize = \"64k\"\nalgorithm = \"gcra\"\nrate = \"1r/s\"\n\
                      [[limit]]\nclass = \"*\"\nzone = \"pz\"\n";

/// Families in order of their `# TYPE` lines; panics unless each family has one HELP and one
/// TYPE line and all its samples right under them.
fn families(text: &str) -> Vec<String> {
    let mut seen = HashSet::new();
    let mut order = Vec::new();
    let mut current = String::new();
    let mut helped = String::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            helped = rest.split(' ').next().unwrap().to_string();
            assert!(
                seen.insert(helped.clone()),
                "second family {helped}:\n{text}"
            );
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            current = rest.split(' ').next().unwrap().to_string();
            assert_eq!(current, helped, "TYPE without its HELP:\n{text}");
            order.push(current.clone());
        } else {
            let name = line.split(['{', ' ']).next().unwrap();
            assert_eq!(name, current, "sample outside its family:\n{text}");
        }
    }
    order
}

#[test]
fn policy_and_outside_zones_share_one_set_of_families() {
    let engine = Engine::new(parse_policy(POLICY, None).unwrap()).unwrap();
    let outside = Table::new(64 << 10, 1, 0).unwrap();
    let mut alone = String::new();
    engine.render_prometheus(&mut alone).unwrap();
    let mut both = String::new();
    render_prometheus(&[&engine], &[("rz", outside.stats())], &mut both).unwrap();
    let mut zones_only = String::new();
    render_prometheus(&[], &[("rz", outside.stats())], &mut zones_only).unwrap();

    let zone_families: Vec<String> = families(&zones_only);
    assert_eq!(zone_families.len(), 9, "{zones_only}");
    assert!(zone_families.iter().all(|f| f.starts_with("weir_zone_")));
    assert_eq!(families(&alone), families(&both));
    for f in &zone_families {
        assert!(both.contains(&format!("{f}{{zone=\"pz\"}} ")), "{both}");
        assert!(both.contains(&format!("{f}{{zone=\"rz\"}} ")), "{both}");
        assert!(alone.contains(&format!("{f}{{zone=\"pz\"}} ")), "{alone}");
    }
    assert!(!both.contains("evicted_"), "{both}");

    let mut nothing = String::new();
    render_prometheus(&[], &[], &mut nothing).unwrap();
    assert_eq!(nothing, "");
}

#[test]
fn several_engines_share_one_set_of_families() {
    // nginx's weir_status: the policy's engine and the directives' engine in one text.
    let policy = Engine::new(parse_policy(POLICY, None).unwrap()).unwrap();
    let other = POLICY.replace("pz", "rz");
    let directives = Engine::new(parse_policy(&other, None).unwrap()).unwrap();
    let req = weir::policy::OwnedRequest::new("GET", "/", "192.0.2.1".parse().unwrap());
    policy.evaluate(&req, 1).unwrap();
    directives.evaluate(&req, 1).unwrap();
    directives.evaluate(&req, 2).unwrap();
    let mut both = String::new();
    render_prometheus(&[&policy, &directives], &[], &mut both).unwrap();
    let mut alone = String::new();
    policy.render_prometheus(&mut alone).unwrap();
    assert_eq!(families(&both), families(&alone));
    assert!(both.contains("weir_requests_total 3\n"), "{both}");
    for zone in ["pz", "rz"] {
        assert!(
            both.contains(&format!("weir_zone_capacity{{zone=\"{zone}\"}} ")),
            "{both}"
        );
        let limit = format!("weir_limit_requests_total{{limit=\"*/{zone}\",verdict=\"passed\"}} 1");
        assert!(both.contains(&limit), "{both}");
    }
}
