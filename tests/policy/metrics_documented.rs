//! Every metric family weir renders is documented: a `Family | Type` table of docs/METRICS.md
//! names it with its type. Those tables are the list `make contrib-check` checks the alerting
//! rules and the Grafana dashboard in contrib/ against, so a family the engine renders cannot
//! be missing from it, nor listed with another type.

use std::collections::BTreeMap;

use weir::policy::metrics::render_prometheus;
use weir::policy::{parse_policy, Engine};
use weir::table::Table;

/// Every kind of zone and limit: rate, concurrency (with a queue), a cluster zone whose Redis
/// is away, and a zone outside the policy.
const EVERY_GROUP: &str = "\
[zones.rate]\nsize = \"64k\"\nalgorithm = \"gcra\"\nrate = \"1r/s\"\n\
[zones.slots]\nsize = \"64k\"\nalgorithm = \"concurrency\"\nmax = 4\n\
[zones.cl]\nsize = \"64k\"\nalgorithm = \"sliding\"\nevents = 2\nwindow = \"1m\"\n\
scope = \"cluster\"\nredis = \"redis://127.0.0.1:1/0\"\nexpected_nodes = 1\n\
[[limit]]\nname = \"per-ip\"\nclass = \"*\"\nzone = \"rate\"\n\
[[limit]]\nname = \"backend\"\nclass = \"*\"\nzone = \"slots\"\nkey = \"global\"\nqueue = 2\n\
[[limit]]\nname = \"shared\"\nclass = \"*\"\nzone = \"cl\"\n";

/// The families docs/METRICS.md's `Family | Type` tables list, with their types.
fn documented() -> BTreeMap<String, String> {
    let doc = include_str!("../../docs/METRICS.md");
    let mut out = BTreeMap::new();
    let mut type_col = None;
    for line in doc.lines() {
        let Some(row) = line.trim().strip_prefix('|') else {
            type_col = None;
            continue;
        };
        let cells: Vec<&str> = row
            .trim_end_matches('|')
            .split('|')
            .map(str::trim)
            .collect();
        match type_col {
            None if cells[0] == "Family" => type_col = cells.iter().position(|c| *c == "Type"),
            Some(col) if cells[0].starts_with("`weir_") => {
                let name = cells[0].trim_matches('`').to_string();
                out.insert(name, cells[col].to_string());
            }
            _ => {}
        }
    }
    out
}

#[test]
fn every_rendered_family_is_in_the_metrics_reference_with_its_type() {
    let docs = documented();
    assert!(docs.len() > 20, "{docs:?}");
    let engine = Engine::new(parse_policy(EVERY_GROUP, None).unwrap()).unwrap();
    let outside = Table::new(64 << 10, 1, 0).unwrap();
    let mut text = String::new();
    render_prometheus(&[&engine], &[("outside", outside.stats())], &mut text).unwrap();
    let mut rendered = 0;
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("# TYPE ") else {
            continue;
        };
        let (name, kind) = rest.split_once(' ').unwrap();
        rendered += 1;
        assert_eq!(
            docs.get(name).map(String::as_str),
            Some(kind),
            "{name} ({kind}) is not in a Family | Type table of docs/METRICS.md as a {kind}"
        );
    }
    // engine (4), limits (1), concurrency limits (7), zones (9), cluster zones (8)
    assert!(rendered >= 29, "{text}");
}
