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
    render_prometheus(Some(&engine), &[("rz", outside.stats())], &mut both).unwrap();
    let mut zones_only = String::new();
    render_prometheus(None, &[("rz", outside.stats())], &mut zones_only).unwrap();

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
    render_prometheus(None, &[], &mut nothing).unwrap();
    assert_eq!(nothing, "");
}
