//! Secrets in key text (`[key_text] hide`, docs/METRICS.md "Key text"): a limit keyed on a
//! session cookie or an `Authorization` header never shows the value, in the JSON status
//! under every `[status] clients`, in the ban its error-log line names, in the access-log key,
//! or in a key operation's answer and audit line, unless the policy opts in; and each text
//! shown still resets or unbans its key.

use serde_json::Value;
use weir::policy::keyops::{key_request, Access};
use weir::policy::metrics::{Format, Snapshot};
use weir::policy::{parse_policy, Action, Engine, OwnedRequest};

const S: u64 = 1_000_000_000;
const T0: u64 = 1000 * S;
const SECRET: &str = "SECRET-5d2c";

fn engine(key: &str, clients: &str, hide: Option<&str>) -> Engine {
    let hide = hide.map_or(String::new(), |h| format!("[key_text]\nhide = {h}\n"));
    let src = format!(
        "{hide}[status]\nclients = \"{clients}\"\n[zones.z]\nsize = \"64k\"\nalgorithm = \"gcra\"\n\
         rate = \"1r/m\"\n[[limit]]\nname = \"l\"\nclass = \"*\"\nzone = \"z\"\nkey = {key}\n\
         log_level = \"warn\"\nban = {{ after = 2, within = \"1m\", duration = \"10m\" }}\n"
    );
    Engine::new(parse_policy(&src, None).unwrap()).unwrap()
}

fn enc(s: &str) -> String {
    s.bytes().map(|b| format!("%{b:02X}")).collect()
}

fn op(e: &Engine, method: &str, key: &str, action: &str, now: u64) -> (u16, Value, String) {
    let q = format!("limit=l&key={}&action={action}", enc(key));
    let access = Access {
        write: true,
        key_action: Some(action.as_bytes()),
        ..Access::default()
    };
    let a = key_request(&[e], method.as_bytes(), q.as_bytes(), &access, now);
    let audit = a.audit.map(|a| a.line).unwrap_or_default();
    (a.status, serde_json::from_str(&a.body).unwrap(), audit)
}

/// Requests carrying the secret in a cookie and in `Authorization`.
fn request(peer: &str, secret: &str) -> OwnedRequest {
    OwnedRequest::new("GET", "/w/index.php", peer.parse().unwrap())
        .header("Cookie", &format!("a=b; session={secret}"))
        .header("Authorization", &format!("Bearer TOKEN-{secret}"))
}

/// Bans the secret's key; the texts shown: the status's top key and ban, the ban the error
/// log names, the access log's key.
fn ban(e: &Engine) -> Vec<String> {
    let r = request("192.0.2.7", SECRET);
    let mut entry = None;
    for _ in 0..5 {
        let out = e.evaluate(&r, T0).unwrap();
        if let Some(b) = out.ban_started {
            entry = b.entry;
            break;
        }
    }
    let entry = entry.expect("the key is banned and listed");
    let (_, listed) = e.listed_ban(usize::from(entry), T0).unwrap();
    let status = Snapshot::take(&[e], &[], T0).render(Format::Json);
    let j: Value = serde_json::from_str(&status).unwrap();
    let l = &j["limits"][0];
    let mut logged = String::new();
    e.render_key(0, &r, &mut logged);
    vec![
        status,
        l["last_1m"]["keys"][0]["key"].as_str().unwrap().to_owned(),
        l["bans"][0]["key"].as_str().unwrap().to_owned(),
        listed.key,
        logged,
    ]
}

#[test]
fn cookie_and_header_values_are_hidden_everywhere_by_default() {
    let keys = [
        "\"cookie:session\"",
        "\"header:authorization\"",
        "[\"ip\", \"header:authorization\"]",
    ];
    for key in keys {
        for clients in ["full", "hashed", "masked"] {
            let e = engine(key, clients, None);
            let shown = ban(&e);
            for text in &shown {
                assert!(!text.contains(SECRET), "{key} {clients}: {text}");
            }
            let (status_key, listed, logged) = (&shown[1], &shown[3], &shown[4]);
            assert!(logged.contains('~') && logged.contains(" #"), "{logged}");
            // The same value hashes alike within the engine; another value differently.
            let mut again = String::new();
            e.render_key(0, &request("192.0.2.7", SECRET), &mut again);
            assert_eq!(&again, logged);
            let mut other = String::new();
            e.render_key(0, &request("192.0.2.7", "other"), &mut other);
            assert_ne!(&other, logged);
            // Every text shown acts on the key: the ban is lifted through the listed one,
            // the state reset through the status's and the log's.
            let (st, j, audit) = op(&e, "POST", listed, "unban", T0);
            assert_eq!(
                (st, j["changed"].as_bool()),
                (200, Some(true)),
                "{listed}: {j}"
            );
            assert!(
                !audit.contains(SECRET) && !j.to_string().contains(SECRET),
                "{audit}"
            );
            for text in [status_key, logged] {
                let (st, j, audit) = op(&e, "POST", text, "reset", T0);
                assert_eq!(st, 200, "{key} {clients} {text}: {j}");
                assert!(
                    !audit.contains(SECRET) && !audit.contains("\\\\"),
                    "{audit}"
                );
                assert!(audit.contains(&format!("\"{}\"", j["key"].as_str().unwrap())));
            }
            let r = request("192.0.2.7", SECRET);
            assert_eq!(
                e.evaluate(&r, T0).unwrap().action,
                Action::Pass,
                "{key} {clients}"
            );
            let banned = Snapshot::take(&[&e], &[], T0).render(Format::Json);
            let j: Value = serde_json::from_str(&banned).unwrap();
            assert_eq!(j["limits"][0]["bans"], serde_json::json!([]), "unlisted");
        }
    }
}

#[test]
fn the_policy_can_show_them_or_hide_any_part() {
    let e = engine("\"header:authorization\"", "full", Some("[]"));
    let shown = ban(&e);
    let want = format!("Bearer%20TOKEN-{SECRET}");
    assert_eq!(shown[4], want, "the log shows the value, escaped");
    assert_eq!(shown[1], want, "so does the status");
    let e = engine("[\"ip\", \"path\"]", "full", Some("[\"ip\", \"path\"]"));
    let shown = ban(&e);
    for text in &shown[1..] {
        assert!(
            !text.contains("192.0.2") && !text.contains("index.php"),
            "{text}"
        );
        assert!(
            text.starts_with("ip=h:") && text.contains(" path=~"),
            "{text}"
        );
    }
    let (st, j, _) = op(&e, "POST", &shown[3], "unban", T0);
    assert_eq!((st, j["changed"].as_bool()), (200, Some(true)), "{j}");
}
