//! Fuzz target for key operations (`weir::policy::keyops::key_request`), the status
//! endpoint's parser of untrusted queries and key text: no input may panic; every answer
//! has a known status, fits its bound and is a JSON object; only a successful POST logs an
//! audit line, and only where changes are enabled and the request carries the action's
//! `Weir-Key-Action` header. The first input byte picks the method (bits 0-1) and whether
//! changes are enabled (bit 2); the rest is the raw query, then up to five header values
//! (origin, host, sec-fetch-site, content-type, weir-key-action), each after a 0xff byte.
#![no_main]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use weir::policy::keyops::{key_request, Access, MAX_ANSWER};
use weir::policy::{CompiledPolicy, Engine};

const POLICY: &str = r#"
[zones.r]
size = "64k"
algorithm = "gcra"
rate = "1r/m"
[zones.s]
size = "64k"
algorithm = "sliding"
events = 2
window = "1m"
[zones.c]
size = "64k"
algorithm = "concurrency"
max = 1
[[limit]]
name = "net"
class = "*"
zone = "r"
ipv4_prefix = 24
ban = { after = 2, within = "1m", duration = "10m" }
[[limit]]
name = "parts"
class = "*"
zone = "s"
key = ["ip", "method", "path", "header:x-k", "cookie:sid", "var:t"]
[[limit]]
name = "one"
class = "*"
zone = "c"
key = "global"
"#;

fn engine() -> &'static Engine {
    static E: OnceLock<Engine> = OnceLock::new();
    E.get_or_init(|| {
        let policy = CompiledPolicy::parse(POLICY, Some("fuzz.toml")).expect("fuzz policy");
        Engine::new(policy).expect("fuzz engine")
    })
}

fuzz_target!(|data: &[u8]| {
    static NOW: AtomicU64 = AtomicU64::new(1 << 40);
    let Some((&m, rest)) = data.split_first() else {
        return;
    };
    let mut fields = rest.split(|&b| b == 0xff);
    let query = fields.next().unwrap_or(b"");
    let headers: Vec<&[u8]> = fields.take(5).collect();
    let access = Access::from_headers(m & 4 != 0, |name| {
        let i = weir::policy::keyops::access::HEADERS.iter().position(|h| *h == name)?;
        headers.get(i).copied()
    });
    let method: &[u8] = match m % 4 {
        0 => b"GET",
        1 => b"HEAD",
        2 => b"POST",
        _ => b"DELETE",
    };
    let now = NOW.fetch_add(1_000_000, Ordering::Relaxed);
    let a = key_request(&[engine()], method, query, &access, now);
    assert!(matches!(a.status, 200 | 400 | 403 | 404 | 405), "status {}", a.status);
    assert!(a.body.len() <= MAX_ANSWER, "answer of {} bytes", a.body.len());
    assert!(a.body.starts_with('{') && a.body.ends_with('}'), "{}", a.body);
    if a.audit.is_some() {
        assert!(a.status == 200 && method == b"POST", "audit on {} {}", a.status, a.body);
        assert!(access.write && access.key_action.is_some(), "audit without access");
    }
});
