//! The engine's own header walk is linear in the number of header lines: with n repeated
//! `Cookie` or `X-Forwarded-For` lines it asks the host for O(n) occurrences in all, each
//! walk in order from the first (what lets hosts answer each lookup in O(1) by resuming; see
//! `RequestView::header_nth`). Counted, not timed.

use std::cell::Cell;
use std::net::IpAddr;

use weir::policy::{CompiledPolicy, Engine, RequestView};

const POLICY: &str = r#"
trusted_proxies = ["10.0.0.0/8"]
[zones.ip]
size = "1m"
algorithm = "gcra"
rate = "1000000r/s"
[classes.xff]
match = [{ header.x-forwarded-for = { regex = "^10\\." } }]
[exempt.session]
match = [{ cookie.session = { present = true } }]
[[limit]]
class = "xff"
zone = "ip"
key = ["ip", "cookie:sid"]
burst = 1000000
"#;

/// A host that can only be asked by occurrence, counting the lookups and checking their order.
struct Host {
    headers: Vec<(&'static [u8], &'static [u8])>,
    lookups: Cell<usize>,
    /// (name, nth) of the previous line found.
    last: Cell<Option<(&'static [u8], usize)>>,
    out_of_order: Cell<usize>,
}

impl RequestView for Host {
    fn method(&self) -> &[u8] {
        b"GET"
    }
    fn target(&self) -> &[u8] {
        b"/x"
    }
    fn peer(&self) -> Option<IpAddr> {
        Some("10.0.0.1".parse().unwrap())
    }
    fn header_nth(&self, lowercase_name: &[u8], nth: usize) -> Option<&[u8]> {
        self.lookups.set(self.lookups.get() + 1);
        let found = self
            .headers
            .iter()
            .filter(|h| h.0 == lowercase_name)
            .nth(nth)?;
        // The nginx module's and the Caddy plugin's cursor: resumable iff the previous line
        // found was occurrence nth - 1 of this name.
        if nth > 0 && self.last.get() != Some((found.0, nth - 1)) {
            self.out_of_order.set(self.out_of_order.get() + 1);
        }
        self.last.set(Some((found.0, nth)));
        Some(found.1)
    }
}

/// Lookups the engine makes for one request with `n` lines of `name`.
fn lookups(engine: &Engine, name: &'static [u8], value: &'static [u8], n: usize) -> usize {
    let host = Host {
        headers: vec![(name, value); n],
        lookups: Cell::new(0),
        last: Cell::new(None),
        out_of_order: Cell::new(0),
    };
    engine.evaluate(&host, 1_000_000_000_000).unwrap();
    assert_eq!(host.out_of_order.get(), 0, "lookups out of order");
    host.lookups.get()
}

#[test]
fn repeated_lines_are_walked_once_each_in_order() {
    let engine = Engine::new(CompiledPolicy::parse(POLICY, None).unwrap()).unwrap();
    for (name, value) in [
        (&b"cookie"[..], &b"c=1"[..]),
        (b"x-forwarded-for", b"10.0.0.2"),
    ] {
        let (a, b) = (
            lookups(&engine, name, value, 100),
            lookups(&engine, name, value, 800),
        );
        assert!(b <= 8 * a + 8, "{a} lookups for 100 lines, {b} for 800");
        // Every line is read (the cookie is absent; every hop is trusted), none many times.
        assert!((800..=4 * 800).contains(&b), "{b} lookups for 800 lines");
    }
}
