//! `Engine::attach` over host regions (nginx's zones): a second engine over the same regions
//! (a reload, another worker) keeps every key's state and the counters; regions that do not
//! fit the policy are refused with the error kind the C ABI maps to its codes.

use crate::common;

use common::SharedRegion;
use weir::policy::engine::{AttachError, AttachOptions, HostRegions};
use weir::policy::{parse_policy, Action, Engine, OwnedRequest};
use weir::region::{Fresh, Region};

const POLICY: &str = "[zones.z]\nsize = \"64k\"\nalgorithm = \"sliding\"\nevents = 2\n\
                      window = \"1m\"\n[[limit]]\nname = \"l\"\nclass = \"*\"\nzone = \"z\"\n";

const OPTS: AttachOptions = AttachOptions {
    clock_base: 0,
    start_syncers: true,
    fresh: Fresh::Zeroed,
};

fn region(r: &SharedRegion, len: usize) -> Region {
    // SAFETY: the mapping lives until the end of the test, after every engine over it; each
    // engine formats it (or not) before the next one is made.
    unsafe { Region::new(r.ptr, len, 64) }.unwrap()
}

/// The regions of a one-zone policy in shared mappings, as nginx gives them: engines attached
/// one after the other over them are a reload.
pub(crate) struct PolicyRegions {
    zones: [Region; 1],
    counters: Region,
    _maps: (SharedRegion, SharedRegion),
}

impl PolicyRegions {
    pub(crate) fn new(policy: &weir::policy::CompiledPolicy) -> PolicyRegions {
        let bytes = Engine::layouts(policy)[0].bytes;
        let (counter_bytes, _) = Engine::counters_layout(policy);
        let (zone, counters) = (SharedRegion::new(bytes), SharedRegion::new(counter_bytes));
        PolicyRegions {
            zones: [region(&zone, bytes)],
            counters: region(&counters, counter_bytes),
            _maps: (zone, counters),
        }
    }

    pub(crate) fn host(&self) -> HostRegions<'_> {
        HostRegions {
            zones: &self.zones,
            cluster: None,
            counters: Some(self.counters),
        }
    }
}

#[test]
fn a_second_engine_over_the_same_regions_keeps_states_and_counts() {
    let policy = parse_policy(POLICY, None).unwrap();
    let shared = PolicyRegions::new(&policy);
    let regions = shared.host();
    let req = OwnedRequest::new("GET", "/", "192.0.2.7".parse().unwrap());
    let now = weir::clock::monotonic_ns();
    let first = Engine::attach(policy.clone(), regions, OPTS).unwrap();
    for _ in 0..2 {
        assert_eq!(first.evaluate(&req, now).unwrap().action, Action::Pass);
    }
    drop(first);
    let second = Engine::attach(policy, regions, OPTS).unwrap();
    assert_eq!(second.evaluate(&req, now).unwrap().action, Action::Reject);
    assert_eq!(
        second.counters(0).passed,
        2,
        "the counter block kept its counts"
    );
    assert_eq!(second.counters(0).rejected, 1);
}

#[test]
fn regions_that_do_not_fit_the_policy_are_refused() {
    let policy = parse_policy(POLICY, None).unwrap();
    let bytes = Engine::layouts(&policy)[0].bytes;
    let zone = SharedRegion::new(bytes);
    let none = HostRegions {
        zones: &[],
        cluster: None,
        counters: None,
    };
    assert_eq!(
        Engine::attach(policy.clone(), none, OPTS).err(),
        Some(AttachError::Invalid("0 regions for 1 zones".into()))
    );
    let short = [region(&zone, bytes - 64)];
    let e = Engine::attach(
        policy.clone(),
        HostRegions {
            zones: &short,
            ..none
        },
        OPTS,
    );
    assert_eq!(
        e.err(),
        Some(AttachError::Zone(format!(
            "zone z: region of {} bytes, needs {bytes}",
            bytes - 64
        )))
    );
    let zones = [region(&zone, bytes)];
    let cluster = [Some(region(&zone, bytes))];
    let local = HostRegions {
        zones: &zones,
        cluster: Some(&cluster),
        counters: None,
    };
    assert_eq!(
        Engine::attach(policy.clone(), local, OPTS).err(),
        Some(AttachError::Invalid(
            "zone z: a cluster region is needed for cluster zones only".into()
        ))
    );
    // A zone created for another schema is refused, saying what changed.
    let other = parse_policy(&POLICY.replace("\"1m\"", "\"2m\""), None).unwrap();
    let fresh = SharedRegion::new(bytes);
    let zones = [region(&fresh, bytes)];
    let ok = HostRegions {
        zones: &zones,
        ..none
    };
    Engine::attach(other, ok, OPTS).unwrap();
    match Engine::attach(policy, ok, OPTS).err() {
        Some(AttachError::Zone(m)) => assert!(
            m.starts_with("zone z: region was created for schema")
                && m.contains("use a new zone name"),
            "{m}"
        ),
        e => panic!("{e:?}"),
    }
}
