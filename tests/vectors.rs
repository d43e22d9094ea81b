//! Runs the shared, host-neutral test vectors in `tests/vectors/*.json` (format: see
//! `tests/vectors/README.md`) against the Rust engine. Every mismatch is printed with the
//! vector's name, the step index and the field; the test fails if there is any.

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use serde_json::Value;
use weir::policy::engine::{Outcome, Permits, QueueTicket};
use weir::policy::{Action, CompiledPolicy, Engine, EvalError, OwnedRequest};

/// Fixed time base: `now_ns = BASE_NS + t_ms * 1e6`.
const BASE_NS: u64 = 1_000_000_000_000;
/// Guard against a missing or emptied directory passing silently.
const MIN_VECTORS: usize = 70;

fn vector_files() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vectors");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    files
}

fn action_name(out: &Outcome) -> &'static str {
    if out.exempt.is_some() {
        return "exempt";
    }
    match out.action {
        Action::Pass => "pass",
        Action::Delay => "delay",
        Action::Reject => "reject",
        Action::Queue => "queue",
    }
}

fn str_field<'a>(v: &'a Value, name: &str, ctx: &str) -> &'a str {
    v.get(name)
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("{ctx}: `{name}` must be a string"))
}

fn build_request(engine: &Engine, step: &Value, ctx: &str) -> OwnedRequest {
    let (method, target) = (
        str_field(step, "method", ctx),
        str_field(step, "target", ctx),
    );
    let mut req = match str_field(step, "peer", ctx) {
        "unix:" => OwnedRequest::local(method, target),
        peer => {
            let peer: IpAddr = peer
                .parse()
                .unwrap_or_else(|e| panic!("{ctx}: bad peer: {e}"));
            OwnedRequest::new(method, target, peer)
        }
    };
    if let Some(hs) = step.get("headers") {
        for h in hs
            .as_array()
            .unwrap_or_else(|| panic!("{ctx}: headers must be a list"))
        {
            let pair = h.as_array().filter(|p| p.len() == 2);
            let pair = pair.unwrap_or_else(|| panic!("{ctx}: header must be [name, value]"));
            let (n, v) = (pair[0].as_str(), pair[1].as_str());
            req = req.header(n.expect("header name"), v.expect("header value"));
        }
    }
    if let Some(vars) = step.get("vars") {
        let vars = vars
            .as_object()
            .unwrap_or_else(|| panic!("{ctx}: vars must be an object"));
        for (name, value) in vars {
            let value = value
                .as_str()
                .unwrap_or_else(|| panic!("{ctx}: var {name} must be a string"));
            // A variable the policy does not read is never asked for.
            if let Some(i) = engine.var_names().position(|n| n == name.as_bytes()) {
                req = req.var(i, value.as_bytes());
            }
        }
    }
    req
}

/// The indexes of a step's `select` list, or `None` for a step without one.
fn selection(engine: &Engine, step: &Value, ctx: &str) -> Option<Vec<u16>> {
    let names = step.get("select")?.as_array();
    let names = names.unwrap_or_else(|| panic!("{ctx}: select must be a list"));
    let count = engine.policy().limits.len();
    Some(
        names
            .iter()
            .map(|n| {
                let n = n
                    .as_str()
                    .unwrap_or_else(|| panic!("{ctx}: select names limits"));
                let i = (0..count).find(|&i| engine.limit_name(i) == n);
                i.unwrap_or_else(|| panic!("{ctx}: no limit {n:?}")) as u16
            })
            .collect(),
    )
}

/// What one evaluation produced, in vector terms.
struct Got {
    action: &'static str,
    status: u16,
    limit: Option<String>,
    wait_ms: u64,
    exemption: Option<String>,
    dry_run: Option<&'static str>,
    headers: Vec<(String, String)>,
}

fn got_from(engine: &Engine, res: &Result<Outcome, EvalError>) -> Got {
    match res {
        Err(EvalError::BadSelection) => panic!("a vector selects limits that do not exist"),
        Err(EvalError::BadTarget(_) | EvalError::TooManyHeaderValues) => Got {
            action: "bad_request",
            status: 400,
            limit: None,
            wait_ms: 0,
            exemption: None,
            dry_run: None,
            headers: Vec::new(),
        },
        Ok(out) => {
            let mut headers = Vec::new();
            engine.headers(out, |n, v| headers.push((n.to_string(), v.to_string())));
            Got {
                action: action_name(out),
                status: out.status,
                limit: out.limit.map(|i| engine.limit_name(i as usize).to_string()),
                wait_ms: out.wait_ns / 1_000_000,
                exemption: out
                    .exempt
                    .map(|i| engine.policy().exemptions[i as usize].name.clone()),
                dry_run: out.dry_run.map(|(_, a)| match a {
                    Action::Delay => "delay",
                    Action::Reject => "reject",
                    Action::Pass => "pass",
                    Action::Queue => "queue",
                }),
                headers,
            }
        }
    }
}

fn opt_str(v: &Value) -> Option<String> {
    v.as_str().map(str::to_string)
}

/// Compares one step's expectation; pushes a line per mismatch.
fn compare(got: &Got, expect: &Value, ctx: &str, errs: &mut Vec<String>) {
    let mut bad = |field: &str, want: String, have: String| {
        errs.push(format!("{ctx}: {field}: expected {want}, got {have}"))
    };
    let want_action = str_field(expect, "action", ctx);
    if want_action != got.action {
        bad("action", want_action.into(), got.action.into());
    }
    if let Some(s) = expect.get("status") {
        if s.as_u64() != Some(got.status as u64) {
            bad("status", s.to_string(), got.status.to_string());
        }
    }
    if let Some(l) = expect.get("limit") {
        if opt_str(l) != got.limit {
            bad("limit", l.to_string(), format!("{:?}", got.limit));
        }
    }
    if let Some(w) = expect.get("wait_ms") {
        if w.as_u64() != Some(got.wait_ms) {
            bad("wait_ms", w.to_string(), got.wait_ms.to_string());
        }
    }
    if let Some(x) = expect.get("exemption") {
        if opt_str(x) != got.exemption {
            bad("exemption", x.to_string(), format!("{:?}", got.exemption));
        }
    }
    if let Some(d) = expect.get("dry_run") {
        if opt_str(d).as_deref() != got.dry_run {
            bad("dry_run", d.to_string(), format!("{:?}", got.dry_run));
        }
    }
    if let Some(hs) = expect.get("headers") {
        let hs = hs
            .as_object()
            .unwrap_or_else(|| panic!("{ctx}: expect.headers must be an object"));
        for (name, want) in hs {
            let have = got
                .headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.clone());
            if opt_str(want) != have {
                bad(
                    &format!("headers.{name}"),
                    want.to_string(),
                    format!("{have:?}"),
                );
            }
        }
    }
}

/// Runs one vector; returns its mismatches.
fn run_vector(v: &Value, file: &str) -> Vec<String> {
    let name = v.get("name").and_then(Value::as_str).unwrap_or(file);
    let mut errs = Vec::new();
    let policy = CompiledPolicy::parse(str_field(v, "policy", name), Some(name))
        .unwrap_or_else(|e| panic!("{name}: policy does not load: {e}"));
    let engine = Engine::new(policy).unwrap_or_else(|e| panic!("{name}: engine: {e}"));
    let steps = v
        .get("steps")
        .and_then(Value::as_array)
        .unwrap_or_else(|| panic!("{name}: `steps` must be a list"));
    let mut permits: HashMap<usize, Permits> = HashMap::new();
    let mut tickets: HashMap<usize, QueueTicket> = HashMap::new();
    let mut requests: HashMap<usize, (OwnedRequest, Option<Vec<u16>>)> = HashMap::new();
    let mut last_t = 0;
    for (i, step) in steps.iter().enumerate() {
        let ctx = format!("{name} step {i}");
        let t_ms = step
            .get("t_ms")
            .and_then(Value::as_u64)
            .unwrap_or_else(|| panic!("{ctx}: `t_ms` must be a whole number"));
        assert!(t_ms >= last_t, "{ctx}: time goes backwards");
        last_t = t_ms;
        let now = BASE_NS + t_ms * 1_000_000;
        let index_of = |key: &str| {
            step.get(key).map(|x| {
                let j = x.as_u64().unwrap_or_else(|| panic!("{ctx}: `{key}`")) as usize;
                assert!(j < i, "{ctx}: `{key}` must name an earlier step");
                j
            })
        };
        if let Some(j) = index_of("release") {
            let p = permits
                .remove(&j)
                .unwrap_or_else(|| panic!("{ctx}: step {j} holds no permits"));
            engine.release(p, now);
            continue;
        }
        if let Some(j) = index_of("abandon") {
            let t = tickets
                .remove(&j)
                .unwrap_or_else(|| panic!("{ctx}: step {j} holds no queue ticket"));
            engine.abandon(t, now);
            continue;
        }
        let (req, res) = if let Some(j) = index_of("retry") {
            let t = tickets
                .remove(&j)
                .unwrap_or_else(|| panic!("{ctx}: step {j} holds no queue ticket"));
            let (req, sel) = requests[&j].clone();
            let res = match &sel {
                Some(limits) => engine.evaluate_selected_queued(&req, limits, now, t),
                None => engine.evaluate_queued(&req, now, t),
            };
            ((req, sel), res)
        } else {
            let req = build_request(&engine, step, &ctx);
            let sel = selection(&engine, step, &ctx);
            let res = match &sel {
                Some(limits) => engine.evaluate_selected(&req, limits, now),
                None => engine.evaluate(&req, now),
            };
            ((req, sel), res)
        };
        let expect = step
            .get("expect")
            .unwrap_or_else(|| panic!("{ctx}: request step without `expect`"));
        compare(&got_from(&engine, &res), expect, &ctx, &mut errs);
        if let Ok(mut out) = res {
            if let Some(t) = out.ticket.take() {
                tickets.insert(i, t);
            }
            let p = std::mem::take(&mut out.permits);
            if !p.is_empty() {
                permits.insert(i, p);
            }
        }
        requests.insert(i, req);
    }
    errs
}

#[test]
fn shared_vectors() {
    let files = vector_files();
    let mut names = HashMap::new();
    let mut count = 0;
    let mut errs = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let file = f.file_name().unwrap().to_string_lossy().to_string();
        let v: Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{file}: not JSON: {e}"));
        let name = str_field(&v, "name", &file).to_string();
        assert_eq!(
            format!("{name}.json"),
            file,
            "a vector's file is named after it"
        );
        assert!(
            v.get("description").and_then(Value::as_str).is_some(),
            "{name}: description missing"
        );
        assert!(names.insert(name, ()).is_none());
        errs.extend(run_vector(&v, &file));
        count += 1;
    }
    for e in &errs {
        eprintln!("MISMATCH {e}");
    }
    assert!(errs.is_empty(), "{} mismatches (listed above)", errs.len());
    assert!(
        count >= MIN_VECTORS,
        "only {count} vectors found in tests/vectors (expected at least {MIN_VECTORS})"
    );
}
