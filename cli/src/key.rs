//! `weir key URL LIMIT KEY [--reset | --unban] [--json]`: one key's state in one limit, from a
//! host's status endpoint (docs/METRICS.md, "Key operations"), reset or its ban lifted. See
//! docs/CLI.md.

use std::time::Duration;

use serde_json::Value;

use crate::escape;
use crate::top::fetch::{agent, http_url};

/// Longest answer read (a key's answer is a few hundred bytes).
pub const MAX_ANSWER_BYTES: u64 = 1 << 20;

/// What `weir key` was asked (its command-line arguments).
#[derive(clap::Args)]
pub struct Options {
    /// The status endpoint: nginx's weir_status location, Caddy's admin /weir/status, a
    /// StatusService route (http:// only).
    pub url: String,
    /// The limit's name.
    pub limit: String,
    /// The key as access logs (`$weir_key`), `weir replay` and the status's top keys show it:
    /// `203.0.113.0/24`, `ip=192.0.2.7 path=/api`.
    pub key: String,
    /// Forget the key's state in the limit (as if never seen); a ban stays.
    #[arg(long, conflicts_with = "unban")]
    pub reset: bool,
    /// Lift the key's ban in the limit.
    #[arg(long)]
    pub unban: bool,
    /// Print the server's JSON answer as it is.
    #[arg(long)]
    pub json: bool,
}

/// An error: its message for stderr and whether the server refused (4xx/5xx: exit 1) or could
/// not be asked (exit 2).
#[derive(Debug)]
pub struct Failed {
    pub message: String,
    pub refused: bool,
}

/// `%XX` for every byte but unreserved ones.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The request's URL: the status URL with `limit`, `key` and `action` added to its query.
pub fn key_url(o: &Options) -> Result<String, String> {
    let base = http_url(&o.url)?;
    let sep = match base.split_once('?') {
        None => "?",
        Some((_, q)) if q.is_empty() || q.ends_with('&') => "",
        Some(_) => "&",
    };
    let mut url = format!(
        "{base}{sep}limit={}&key={}",
        encode(&o.limit),
        encode(&o.key)
    );
    if let Some(a) = action(o) {
        url += "&action=";
        url += a;
    }
    Ok(url)
}

fn action(o: &Options) -> Option<&'static str> {
    match (o.reset, o.unban) {
        (true, _) => Some("reset"),
        (_, true) => Some("unban"),
        _ => None,
    }
}

/// Runs `weir key`: what to print on success.
pub fn run(o: &Options) -> Result<String, Failed> {
    let fail = |message: String, refused| Failed { message, refused };
    let url = key_url(o).map_err(|e| fail(e, false))?;
    let agent = agent(Duration::from_secs(10));
    // A change names its action in the header the hosts require of changes (no body, so no
    // form content type): docs/METRICS.md, "Key operations".
    let resp = match action(o) {
        Some(a) => agent
            .post(&url)
            .header(weir::policy::keyops::KEY_ACTION_HEADER, a)
            .send_empty(),
        None => agent.get(&url).call(),
    };
    let mut resp = resp.map_err(|e| fail(format!("{url}: cannot fetch: {e}"), false))?;
    let code = resp.status().as_u16();
    let body = resp
        .body_mut()
        .with_config()
        .limit(MAX_ANSWER_BYTES)
        .read_to_string()
        .map_err(|e| fail(format!("{url}: cannot read the response: {e}"), false))?;
    let json: Result<Value, _> = serde_json::from_str(&body);
    if code != 200 {
        let why = match &json {
            Ok(v) => v["error"].as_str().map(str::to_owned),
            Err(_) => None,
        };
        let why = why.unwrap_or_else(|| body.trim().chars().take(200).collect());
        return Err(fail(format!("HTTP {code}: {}", escape::line(&why)), true));
    }
    let v = json.map_err(|e| fail(format!("{url}: not a key answer: {e}"), false))?;
    if o.json {
        return Ok(format!("{}\n", escape::json(&body)));
    }
    Ok(text(&v))
}

/// The answer in a few lines (the server's words with their control characters escaped).
pub fn text(v: &Value) -> String {
    let n = |k: &str| v[k].as_u64().unwrap_or(0);
    let s = |k: &str| escape::line(v[k].as_str().unwrap_or("?")).into_owned();
    let mut out = format!(
        "limit {}  key {}  ({})\n",
        s("limit"),
        s("key"),
        s("algorithm")
    );
    match v["action"].as_str() {
        Some("reset") | Some("unban") => {
            let what = if v["action"] == "reset" {
                "reset"
            } else {
                "unbanned"
            };
            let done = if v["changed"] == true {
                what.to_owned()
            } else {
                format!("nothing to change ({what})")
            };
            out += &format!("{done}\n");
        }
        _ => {}
    }
    if let Some(f) = v["in_flight"].as_u64() {
        out += &format!("in flight    {f} (queued {})\n", n("queued"));
    }
    out += &format!("remaining    {}\n", n("remaining"));
    let retry = n("retry_after_s");
    out += &if retry == 0 {
        "retry after  0 (a request passes now)\n".to_owned()
    } else {
        format!("retry after  {retry}s\n")
    };
    out += &if v["banned"] == true {
        format!("banned       yes, {}s left\n", n("ban_left_s"))
    } else {
        "banned       no\n".to_owned()
    };
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_carry_the_encoded_key() {
        let o = |url: &str, reset| Options {
            url: url.into(),
            limit: "per ip".into(),
            key: "ip=203.0.113.0/24 path=/a&b".into(),
            reset,
            unban: false,
            json: false,
        };
        assert_eq!(
            key_url(&o("127.0.0.1:8080/weir", false)).unwrap(),
            "http://127.0.0.1:8080/weir?limit=per%20ip&key=ip%3D203.0.113.0%2F24%20path%3D%2Fa%26b"
        );
        assert!(key_url(&o("h/s?x=1#f", true)).unwrap().ends_with(
            "/s?x=1&limit=per%20ip&key=ip%3D203.0.113.0%2F24%20path%3D%2Fa%26b&action=reset"
        ));
        assert!(key_url(&o("https://h/s", false)).is_err());
    }
}
