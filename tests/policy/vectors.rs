//! Runs the shared, host-neutral test vectors in `tests/vectors/*.json` (format: see
//! `tests/vectors/README.md`) against the Rust engine. Every mismatch is printed with the
//! vector's name, the step index and the field; the test fails if there is any.

use crate::vector;

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::Path;

use vector::{Expect, Kind, Step, Vector};
use weir::policy::engine::{Charges, Outcome, Permits, QueueTicket};
use weir::policy::{Action, CompiledPolicy, Engine, EvalError, OwnedRequest};

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

fn build_request(engine: &Engine, step: &Step, ctx: &str) -> OwnedRequest {
    let (method, target) = (step.method(), step.target());
    let mut req = match step.peer() {
        "unix:" => OwnedRequest::local(method, target),
        peer => {
            let peer: IpAddr = peer
                .parse()
                .unwrap_or_else(|e| panic!("{ctx}: bad peer: {e}"));
            OwnedRequest::new(method, target, peer)
        }
    };
    for (n, v) in &step.headers {
        req = req.header(n, v);
    }
    for (name, value) in step.vars.iter().flatten() {
        // A variable the policy does not read is never asked for.
        if let Some(i) = engine.var_names().position(|n| n == name.as_bytes()) {
            req = req.var(i, value.as_bytes());
        }
    }
    req
}

/// The indexes of a step's `select` list, or `None` for a step without one.
fn selection(engine: &Engine, step: &Step, ctx: &str) -> Option<Vec<u16>> {
    let count = engine.policy().limits.len();
    let index = |n: &String| {
        let i = (0..count).find(|&i| engine.limit_name(i) == n);
        i.unwrap_or_else(|| panic!("{ctx}: no limit {n:?}")) as u16
    };
    Some(step.select.as_ref()?.iter().map(index).collect())
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

/// Compares one step's expectation; pushes a line per mismatch.
fn compare(got: &Got, expect: &Expect, ctx: &str, errs: &mut Vec<String>) {
    let mut bad = |field: &str, want: &dyn std::fmt::Debug, have: &dyn std::fmt::Debug| {
        errs.push(format!("{ctx}: {field}: expected {want:?}, got {have:?}"))
    };
    if expect.action != got.action {
        bad("action", &expect.action, &got.action);
    }
    if let Some(s) = expect.status.filter(|&s| s != got.status) {
        bad("status", &s, &got.status);
    }
    if let Some(l) = expect.limit.as_ref().filter(|&l| *l != got.limit) {
        bad("limit", l, &got.limit);
    }
    if let Some(w) = expect.wait_ms.filter(|&w| w != got.wait_ms) {
        bad("wait_ms", &w, &got.wait_ms);
    }
    if let Some(x) = expect.exemption.as_ref().filter(|&x| *x != got.exemption) {
        bad("exemption", x, &got.exemption);
    }
    if let Some(d) = expect
        .dry_run
        .as_ref()
        .filter(|&d| d.as_deref() != got.dry_run)
    {
        bad("dry_run", d, &got.dry_run);
    }
    for (name, want) in expect.headers.iter().flatten() {
        let have = (got.headers.iter())
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone());
        if *want != have {
            bad(&format!("headers.{name}"), want, &have);
        }
    }
}

/// Runs one vector; returns its mismatches.
fn run_vector(v: &Vector) -> Vec<String> {
    let name = &v.name;
    let mut errs = Vec::new();
    let policy = CompiledPolicy::parse(&v.policy, Some(name))
        .unwrap_or_else(|e| panic!("{name}: policy does not load: {e}"));
    let engine = Engine::new(policy).unwrap_or_else(|e| panic!("{name}: engine: {e}"));
    let mut permits: HashMap<usize, Permits> = HashMap::new();
    let mut charges: HashMap<usize, Charges> = HashMap::new();
    // Per step: the status its request's response will have (a retry's is its origin's).
    let mut statuses: HashMap<usize, u16> = HashMap::new();
    let mut tickets: HashMap<usize, QueueTicket> = HashMap::new();
    let mut requests: HashMap<usize, (OwnedRequest, Option<Vec<u16>>)> = HashMap::new();
    for (i, step) in v.steps.iter().enumerate() {
        let ctx = format!("{name} step {i}");
        let now = step.now_ns();
        let (req, res, expect) = match step.kind() {
            Kind::Release(j) => {
                let (p, c) = (permits.remove(&j), charges.remove(&j));
                assert!(p.is_some() || c.is_some(), "{ctx}: {j} holds nothing");
                if let Some(c) = c {
                    engine.charge_response(c, statuses[&j], now);
                }
                if let Some(p) = p {
                    engine.release(p, now);
                }
                continue;
            }
            Kind::Abandon(j) => {
                let t = tickets.remove(&j);
                engine.abandon(
                    t.unwrap_or_else(|| panic!("{ctx}: {j} holds no ticket")),
                    now,
                );
                continue;
            }
            Kind::Retry(j, expect) => {
                let t = tickets.remove(&j);
                let t = t.unwrap_or_else(|| panic!("{ctx}: {j} holds no ticket"));
                let (req, sel) = requests[&j].clone();
                let res = match &sel {
                    Some(limits) => engine.evaluate_selected_queued(&req, limits, now, t),
                    None => engine.evaluate_queued(&req, now, t),
                };
                ((req, sel), res, expect)
            }
            Kind::Request(expect) => {
                let req = build_request(&engine, step, &ctx);
                let sel = selection(&engine, step, &ctx);
                let res = match &sel {
                    Some(limits) => engine.evaluate_selected(&req, limits, now),
                    None => engine.evaluate(&req, now),
                };
                ((req, sel), res, expect)
            }
        };
        compare(&got_from(&engine, &res), expect, &ctx, &mut errs);
        if let Ok(mut out) = res {
            if let Some(t) = out.ticket.take() {
                tickets.insert(i, t);
            }
            let p = std::mem::take(&mut out.permits);
            if !p.is_empty() {
                permits.insert(i, p);
            }
            let c = std::mem::take(&mut out.charges);
            if !c.is_empty() {
                charges.insert(i, c);
            }
        }
        let status = match step.kind() {
            Kind::Retry(j, _) => statuses[&j],
            _ => step.response_status.unwrap_or(200),
        };
        statuses.insert(i, status);
        requests.insert(i, req);
    }
    errs
}

#[test]
fn shared_vectors() {
    let vectors = vector::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vectors"));
    let errs: Vec<String> = vectors.iter().flat_map(run_vector).collect();
    for e in &errs {
        eprintln!("MISMATCH {e}");
    }
    assert!(errs.is_empty(), "{} mismatches (listed above)", errs.len());
}
