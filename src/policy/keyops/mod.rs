//! Key operations on the JSON status endpoint: one key's state in one limit, read, reset or
//! its ban lifted, at run time (docs/METRICS.md, "Key operations"). Every host passes the
//! request's method, raw query and [`Access`] (whether changes are enabled there, and the
//! headers that tell a cross-site request) to [`key_request`] and writes back what it
//! answers; the engine does the rest (query, method rules, the access gate, lookup, the JSON
//! answer, the audit line).
//!
//! `GET`/`HEAD ?limit=NAME&key=TEXT` inspects; `POST ...&action=reset|unban` changes and
//! answers the state after the change, with one audit line to log at the limit's
//! `log_level`. Errors: 400 (bad query, key text or action), 403 (a POST where changes are
//! off, or one a browser may have been made to send: see [`access`]), 404 (no such limit), 405
//! (a method other than GET, HEAD and POST, or a GET asking for a change), all with
//! `{"error": "..."}`. With several engines (nginx: the policy's and its directives'), the
//! first one with a limit named NAME is the one acted on.

pub mod access;
mod query;
mod text;

use serde_json::{json, Value};

pub use access::{Access, KEY_ACTION_HEADER};
pub use query::{has_key, KeyAction};

use super::config::LogLevel;
use super::engine::{Engine, KeyState};
use super::key_text::TEXT_MAX;
use super::request::PreparedRequest;

/// Largest answer body [`key_request`] writes (its key text is at most
/// [`TEXT_MAX`] bytes).
pub const MAX_ANSWER: usize = 16 * 1024;
/// Version of the answer's schema.
pub const VERSION: u64 = 1;

/// A key operation's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyAnswer {
    /// HTTP status: 200, 400, 403, 404 or 405.
    pub status: u16,
    /// JSON (`application/json`), at most [`MAX_ANSWER`] bytes.
    pub body: String,
    /// The line to log when a change was carried out (every successful POST).
    pub audit: Option<Audit>,
}

/// One audit line: `resetting key "K" of weir limit "NAME"` or
/// `lifting ban of key "K" of weir limit "NAME"`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Audit {
    /// The limit's `log_level`.
    pub level: LogLevel,
    pub line: String,
    /// The limit's name and the key, as the line names them (for structured logs).
    pub limit: String,
    pub key: String,
}

impl KeyAnswer {
    fn error(status: u16, msg: impl Into<String>) -> KeyAnswer {
        let mut msg: String = msg.into();
        if msg.len() > 1024 {
            let mut cut = 1024;
            while !msg.is_char_boundary(cut) {
                cut -= 1;
            }
            msg.truncate(cut);
            msg.push('…');
        }
        KeyAnswer {
            status,
            body: json!({ "error": msg }).to_string(),
            audit: None,
        }
    }
}

/// Answers a key operation: `method` as sent, `query` the raw query (without `?`), `access`
/// what the host knows of where it arrived, `now` the engines' clock (CLOCK_MONOTONIC ns).
/// See the module documentation.
pub fn key_request(
    engines: &[&Engine],
    method: &[u8],
    query: &[u8],
    access: &Access<'_>,
    now: u64,
) -> KeyAnswer {
    let change = match method {
        b"GET" | b"HEAD" => false,
        b"POST" => true,
        _ => {
            return KeyAnswer::error(
                405,
                "key operations are GET, HEAD (inspect) or POST (reset, unban)",
            )
        }
    };
    if change && !access.write {
        return KeyAnswer::error(403, access::WRITE_OFF);
    }
    let q = query::parse(query);
    let Some(name) = q.limit else {
        return KeyAnswer::error(400, "the limit argument is missing (?limit=NAME&key=TEXT)");
    };
    let Some(key) = q.key else {
        return KeyAnswer::error(400, "the key argument is missing (?limit=NAME&key=TEXT)");
    };
    let action = match (q.action.as_deref().map(KeyAction::parse), change) {
        (None, false) | (Some(Some(KeyAction::Inspect)), false) => KeyAction::Inspect,
        (Some(Some(a @ (KeyAction::Reset | KeyAction::Unban))), true) => a,
        (Some(Some(KeyAction::Reset | KeyAction::Unban)), false) => {
            return KeyAnswer::error(405, "reset and unban need POST")
        }
        (None, true) | (Some(Some(KeyAction::Inspect)), true) => {
            return KeyAnswer::error(400, "POST needs action=reset or action=unban")
        }
        (Some(None), _) => {
            return KeyAnswer::error(400, "unknown action; expected inspect, reset or unban")
        }
    };
    if change {
        if let Some(why) = access::refuse_change(access, action.as_str()) {
            return KeyAnswer::error(403, why);
        }
    }
    let name = String::from_utf8_lossy(&name).into_owned();
    let Some((engine, limit)) = engines
        .iter()
        .find_map(|e| e.limit_index(&name).map(|l| (*e, l)))
    else {
        return KeyAnswer::error(404, format!("no weir limit named {name:?}"));
    };
    let l = &engine.policy().limits[limit];
    let bad = |why: String| KeyAnswer::error(400, format!("not a key of limit {name:?}: {why}"));
    let (hash, rendered) = match text::parse_key(&l.key.parts, &key) {
        Err(why) => return bad(why),
        Ok(text::Named::Reference(r)) => {
            // The text as given: printable ASCII without `"` or `\` (checked by the parser).
            let given = if key.len() <= TEXT_MAX {
                String::from_utf8_lossy(&key).into_owned()
            } else {
                format!("#{r:016x}")
            };
            (engine.key_of_reference(limit, r), given)
        }
        Ok(text::Named::Request(req, r)) => {
            let prepared = PreparedRequest::new(&req.view, &req.path, b"", req.client);
            let Some(hash) = engine.key_hash_of(limit, &prepared) else {
                return KeyAnswer::error(400, format!("limit {name:?} does not apply to this key"));
            };
            if r.is_some_and(|r| engine.key_of_reference(limit, r) != hash) {
                return bad("its reference (#…) names another key than its parts".into());
            }
            let mut rendered = String::new();
            engine.write_key_text(limit, &prepared, true, TEXT_MAX, &mut rendered);
            (hash, rendered)
        }
    };
    let changed = match action {
        KeyAction::Inspect => false,
        KeyAction::Reset => engine.reset_key(limit, hash, now),
        KeyAction::Unban => engine.unban_key(limit, hash, now),
    };
    let state = engine.key_state(limit, hash, now);
    let audit = change.then(|| {
        let what = match action {
            KeyAction::Unban => "lifting ban of key",
            _ => "resetting key",
        };
        Audit {
            level: l.log_level,
            // Key text never holds `"` or `\`: the line quotes it as it is.
            line: format!("{what} \"{rendered}\" of weir limit \"{name}\""),
            limit: name.clone(),
            key: rendered.clone(),
        }
    });
    KeyAnswer {
        status: 200,
        body: answer(&name, &rendered, &state, action, changed),
        audit,
    }
}

/// The answer's JSON (schema version [`VERSION`], docs/METRICS.md).
fn answer(limit: &str, key: &str, st: &KeyState, action: KeyAction, changed: bool) -> String {
    let secs = |ns: u64| ns.div_ceil(crate::limiter::NS_PER_SEC);
    let mut v = json!({
        "version": VERSION,
        "limit": limit,
        "key": key,
        "algorithm": st.algorithm,
        "remaining": st.remaining,
        "retry_after_s": secs(st.retry_after_ns),
        "banned": st.ban_left_ns.is_some(),
        "ban_left_s": secs(st.ban_left_ns.unwrap_or(0)),
        "action": action.as_str(),
        "changed": changed,
    });
    if let (Some(n), Value::Object(m)) = (st.in_flight, &mut v) {
        m.insert("in_flight".into(), n.into());
        m.insert("queued".into(), st.queued.unwrap_or(0).into());
    }
    v.to_string()
}

#[cfg(test)]
mod tests;
