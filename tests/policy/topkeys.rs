//! Live top keys in the JSON status: a crawler-shaped stream (many clients rejected a little,
//! one rejected a lot) names the hot key and client first; the per-second history counts the
//! rejections and passes; `[status] clients` masks or hashes addresses, keys included; the
//! summaries live in the shared counters block, so every engine attached to it sees them.

use serde_json::Value;
use weir::clock::monotonic_ns;
use weir::policy::metrics::{Format, Snapshot};
use weir::policy::topkeys::SECONDS;
use weir::policy::{parse_policy, Engine, OwnedRequest};

fn policy(status: &str) -> String {
    format!(
        "{status}[zones.ip]\nsize = \"1m\"\nalgorithm = \"gcra\"\nrate = \"1r/m\"\n\
         [zones.path]\nsize = \"1m\"\nalgorithm = \"gcra\"\nrate = \"1r/m\"\n\
         [[limit]]\nname = \"per-ip\"\nclass = \"*\"\nzone = \"ip\"\n\
         [[limit]]\nname = \"per-path\"\nclass = \"*\"\nzone = \"path\"\nkey = [\"method\", \"path\"]\n\
         burst = 100000\nnodelay = true\n"
    )
}

/// 300 crawler addresses twice each (one pass, one rejection) and 200 requests from
/// 198.51.100.7 (one pass, 199 rejections), all at `now`; the JSON status then.
fn crawl(engine: &Engine, now: u64) -> Value {
    for i in 0..300u32 {
        let ip = format!("10.{}.{}.{}", i / 65536, i / 256 % 256, i % 256);
        for _ in 0..2 {
            let req = OwnedRequest::new("GET", &format!("/page/{i}"), ip.parse().unwrap());
            engine.evaluate(&req, now).unwrap();
        }
        if i % 3 == 0 {
            let req = OwnedRequest::new("GET", "/hot", "198.51.100.7".parse().unwrap());
            for _ in 0..2 {
                engine.evaluate(&req, now).unwrap();
            }
        }
    }
    serde_json::from_str(&Snapshot::take(&[engine], &[], now).render(Format::Json)).unwrap()
}

#[test]
fn a_crawler_stream_names_the_hot_key_and_client_first() {
    let engine = Engine::new(parse_policy(&policy(""), None).unwrap()).unwrap();
    let now = monotonic_ns();
    let json = crawl(&engine, now);
    assert_eq!(json["version"], 2);
    let l = &json["limits"][0];
    assert_eq!(
        (l["passed"].as_u64(), l["rejected"].as_u64()),
        (Some(301), Some(499))
    );
    for w in ["last_1m", "last_15m"] {
        let win = &l[w];
        assert_eq!(win["keys"][0]["key"], "198.51.100.7", "{w}: {win:#}");
        assert_eq!(win["keys"][0]["rejected"], 199, "{w}");
        assert_eq!(win["clients"][0]["client"], "198.51.100.7");
        assert!(win["clients"][0]["rejected"].as_u64().unwrap() >= 199);
        assert_eq!(win["rejected"], 499, "{w}");
        assert!(win["keys"].as_array().unwrap().len() <= 10);
    }
    let p = &l["per_second"];
    assert_eq!(p["end"], now / 1_000_000_000);
    let rejected = p["rejected"].as_array().unwrap();
    assert_eq!(rejected.len(), SECONDS);
    assert_eq!(rejected[SECONDS - 1], 499);
    assert!(rejected[..SECONDS - 1].iter().all(|r| r == 0));
    // Sampled at the first rejection (one pass before it), read live at the end.
    assert_eq!(p["passed"][SECONDS - 1], 300);
    assert_eq!(p["passed"][SECONDS - 2], Value::Null);
    // The second limit never rejected: nothing named.
    assert_eq!(json["limits"][1]["last_1m"]["keys"], Value::Array(vec![]));
    assert_eq!(json["limits"][1]["per_second"]["rejected"][SECONDS - 1], 0);
    // Prometheus stays free of per-key data.
    let text = engine.snapshot().render(Format::Prometheus);
    assert!(
        !text.contains("198.51.100.7") && !text.contains("/hot"),
        "{text}"
    );
}

#[test]
fn a_minute_later_the_last_15_minutes_still_name_them_and_16_minutes_later_nothing_does() {
    let engine = Engine::new(parse_policy(&policy(""), None).unwrap()).unwrap();
    let now = monotonic_ns();
    crawl(&engine, now);
    let later = |s: u64| {
        let snap = Snapshot::take(&[&engine], &[], now + s * 1_000_000_000);
        let json: Value = serde_json::from_str(&snap.render(Format::Json)).unwrap();
        json["limits"][0].clone()
    };
    let l = later(150);
    assert_eq!(l["last_1m"]["keys"], Value::Array(vec![]));
    assert_eq!(l["last_1m"]["rejected"], 0);
    assert_eq!(l["last_15m"]["keys"][0]["key"], "198.51.100.7");
    assert_eq!(l["last_15m"]["rejected"], 499);
    let l = later(16 * 60 + 1);
    assert_eq!(l["last_15m"]["keys"], Value::Array(vec![]));
    assert_eq!(l["last_15m"]["rejected"], 0);
}

#[test]
fn clients_are_masked_or_hashed_as_the_policy_says() {
    // Masked, the crawler's first 256 addresses are one /24 and outrank the hot client.
    for (status, shown) in [
        ("[status]\nclients = \"masked\"\n", Some("10.0.0.0/24")),
        ("[status]\nclients = \"hashed\"\n", None),
    ] {
        let engine = Engine::new(parse_policy(&policy(status), None).unwrap()).unwrap();
        let json = crawl(&engine, monotonic_ns());
        let body = json.to_string();
        assert!(!body.contains("198.51.100.7"), "{status}: {body}");
        let win = &json["limits"][0]["last_1m"];
        let (key, client) = (&win["keys"][0]["key"], &win["clients"][0]["client"]);
        // Keys stay apart (each a masked or hashed address with its reference, so key
        // operations act on it); clients are counted as shown.
        let key = key.as_str().unwrap();
        match shown {
            Some(s) => {
                assert!(key.starts_with("198.51.100.0/24 #"), "{key}");
                assert_eq!(
                    (client.as_str(), &win["clients"][0]["rejected"]),
                    (Some(s), &256.into())
                );
                assert_eq!(win["clients"][1]["client"], "198.51.100.0/24");
            }
            None => {
                assert!(client.as_str().unwrap().starts_with("h:"), "{client}");
                assert!(
                    key.starts_with(&format!("{} #", client.as_str().unwrap())),
                    "an ip key is shown as its client, with its reference: {key}"
                );
            }
        }
    }
    let err = parse_policy(&policy("[status]\nclients = \"open\"\n"), None).unwrap_err();
    assert!(err.to_string().contains("full"), "{err}");
}

#[test]
fn other_key_parts_are_named_as_text() {
    let now = monotonic_ns();
    // Without its burst, per-path rejects the second request to a path.
    let src = policy("").replace("burst = 100000\n", "");
    let strict = Engine::new(parse_policy(&src, None).unwrap()).unwrap();
    for i in 0..3u8 {
        let req = OwnedRequest::new(
            "POST",
            "/a/../login",
            format!("192.0.2.{i}").parse().unwrap(),
        );
        strict.evaluate(&req, now).unwrap();
    }
    let json: Value =
        serde_json::from_str(&Snapshot::take(&[&strict], &[], now).render(Format::Json)).unwrap();
    let keys = &json["limits"][1]["last_1m"]["keys"];
    assert_eq!(keys[0]["key"], "method=POST path=/login", "{json:#}");
    assert_eq!(keys[0]["rejected"], 2);
}
