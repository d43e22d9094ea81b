//! The Prometheus text and the JSON status: one set of `weir_zone_*` families for policy zones
//! and zones outside the policy, each family once with its samples grouped (checked by Go's
//! expfmt parser too, `target/caddy/promcheck`, when `WEIR_PROMCHECK` names it); the JSON
//! carries the same numbers under the same names.

use crate::promcheck;

use std::collections::{HashMap, HashSet};

use promcheck::promcheck;
use serde_json::Value;
use weir::clock::monotonic_ns;
use weir::policy::metrics::{render, render_prometheus, Format, Snapshot, JSON_VERSION};
use weir::policy::{parse_policy, Engine, OwnedRequest};
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

/// A policy with every group the snapshot has: limits (one dry run), a local zone, a cluster
/// zone whose Redis is away (its syncer fails; the zone decides on the fallback share).
const EVERYTHING: &str = "\
[zones.pz]\nsize = \"64k\"\nalgorithm = \"gcra\"\nrate = \"1r/m\"\n\
[zones.cl]\nsize = \"64k\"\nalgorithm = \"sliding\"\nevents = 2\nwindow = \"1m\"\n\
scope = \"cluster\"\nredis = \"redis://127.0.0.1:1/0\"\nexpected_nodes = 1\n\
[exempt.health]\nmatch = [{ path = \"/health\" }]\n\
[classes.api]\nmatch = [{ path_prefix = \"/api\" }]\n\
[[limit]]\nname = \"per-ip\"\nclass = \"*\"\nzone = \"pz\"\n\
[[limit]]\nname = \"api-dry\"\nclass = \"api\"\nzone = \"cl\"\nkey = \"global\"\ndry_run = true\n";

/// Prometheus samples as `family{labels}` → value (labels as written).
fn samples(text: &str) -> HashMap<String, u64> {
    let mut out = HashMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let (series, value) = line.rsplit_once(' ').unwrap();
        assert!(
            out.insert(series.to_string(), value.parse().unwrap())
                .is_none(),
            "{series} twice:\n{text}"
        );
    }
    out
}

/// Every number of the JSON status under the Prometheus series it must equal (the mapping
/// docs/METRICS.md gives operators), with the family's kind deciding `_total`.
fn json_series(json: &Value, prom: &str) -> HashMap<String, u64> {
    let counter = |family: &str| prom.contains(&format!("# TYPE {family} counter"));
    let mut out = HashMap::new();
    let mut put = |series: String, v: &Value| {
        assert!(out.insert(series, v.as_u64().unwrap()).is_none());
    };
    for (k, v) in json["engine"].as_object().unwrap() {
        put(format!("weir_{k}_total"), v);
    }
    for l in json["limits"].as_array().unwrap() {
        let name = l["name"].as_str().unwrap();
        // The live view (objects) has no Prometheus series.
        let counts = l.as_object().unwrap().iter().filter(|(_, v)| v.is_u64());
        for (k, v) in counts {
            put(
                format!("weir_limit_requests_total{{limit=\"{name}\",verdict=\"{k}\"}}"),
                v,
            );
        }
    }
    for (group, prefix) in [("zones", "weir_zone_"), ("clusters", "weir_cluster_")] {
        for z in json[group].as_array().unwrap() {
            let name = z["name"].as_str().unwrap();
            for (k, v) in z.as_object().unwrap().iter().filter(|(k, _)| *k != "name") {
                let gauge = format!("{prefix}{k}");
                let family = if counter(&format!("{gauge}_total")) {
                    format!("{gauge}_total")
                } else {
                    gauge
                };
                put(format!("{family}{{zone=\"{name}\"}}"), v);
            }
        }
    }
    out
}

#[test]
fn prometheus_and_json_carry_the_same_numbers_under_the_same_names() {
    let engine = Engine::new(parse_policy(EVERYTHING, None).unwrap()).unwrap();
    let outside = Table::new(64 << 10, 1, 0).unwrap();
    let now = monotonic_ns();
    for (target, ip) in [
        ("/", "192.0.2.1"),
        ("/", "192.0.2.1"),
        ("/api/a", "192.0.2.2"),
        ("/api/b", "192.0.2.3"),
        ("/api/c", "192.0.2.4"),
        ("/health", "192.0.2.5"),
    ] {
        let req = OwnedRequest::new("GET", target, ip.parse().unwrap());
        engine.evaluate(&req, now).unwrap();
    }
    let snap = Snapshot::take(&[&engine], &[("rz", outside.stats())], now);
    let text = snap.render(Format::Prometheus);
    let json: Value = serde_json::from_str(&snap.render(Format::Json)).unwrap();
    promcheck(&text);

    assert_eq!(json["version"], JSON_VERSION);
    assert_eq!(
        json_series(&json, &text),
        samples(&text),
        "{json:#}\n{text}"
    );
    // Known traffic: 6 requests, 1 exempt; per-ip (1r/m) rejects the second request of
    // 192.0.2.1; api-dry (2 per minute, one key) would have rejected the third.
    let e = &json["engine"];
    assert_eq!(
        (e["requests"].as_u64(), e["exempt"].as_u64()),
        (Some(6), Some(1))
    );
    let limit = |name: &str| {
        json["limits"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["name"] == name)
            .unwrap()
            .clone()
    };
    assert_eq!(limit("per-ip")["passed"], 4);
    assert_eq!(limit("per-ip")["rejected"], 1);
    assert_eq!(limit("api-dry")["passed"], 2);
    assert_eq!(limit("api-dry")["dry_run_rejected"], 1);
    let zones: Vec<&str> = json["zones"]
        .as_array()
        .unwrap()
        .iter()
        .map(|z| z["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        zones,
        ["cl", "pz", "rz"],
        "the policy's zones (by name), then the others"
    );
    assert_eq!(json["zones"][1]["occupancy"], 4);
    assert_eq!(json["zones"][2]["occupancy"], 0);
    assert_eq!(json["clusters"][0]["name"], "cl");
    assert_eq!(json["clusters"][0]["fallback_active"], 1);
    assert!(
        text.contains("weir_cluster_fallback_active{zone=\"cl\"} 1\n"),
        "{text}"
    );
}

#[test]
fn json_without_an_engine_has_zones_only() {
    let outside = Table::new(64 << 10, 1, 0).unwrap();
    let json: Value =
        serde_json::from_str(&render(&[], &[("rz", outside.stats())], Format::Json)).unwrap();
    assert_eq!(json["version"], JSON_VERSION);
    assert!(json["engine"].is_null());
    assert_eq!(json["limits"].as_array().unwrap().len(), 0);
    assert_eq!(json["zones"][0]["name"], "rz");
    assert_eq!(json["zones"][0]["capacity"], outside.stats().capacity);
    assert_eq!(Format::from_name("json"), Some(Format::Json));
    assert_eq!(Format::from_name("xml"), None);
}
