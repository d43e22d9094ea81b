//! The engine reads only the parts of the target its policy tests: a policy without path
//! tests or path keys never parses the path (so a target it could not parse passes), one with
//! them refuses such a target as nginx would.

use weir::policy::{Action, CompiledPolicy, Engine, EvalError, OwnedRequest};

const PER_IP: &str = r#"
[zones.ip]
size = "64k"
algorithm = "gcra"
rate = "10r/s"

[[limit]]
class = "*"
zone = "ip"
"#;

const BAD: &str = "/a\u{1}b";

fn eval(policy: &str, target: &str) -> Result<Action, EvalError> {
    let engine = Engine::new(CompiledPolicy::parse(policy, None).unwrap()).unwrap();
    let req = OwnedRequest::new("GET", target, "192.0.2.1".parse().unwrap());
    engine.evaluate(&req, 1_000_000_000).map(|o| o.action)
}

#[test]
fn a_policy_that_tests_no_path_does_not_parse_it() {
    assert_eq!(eval(PER_IP, BAD).unwrap(), Action::Pass);
}

#[test]
fn a_path_test_or_key_reads_and_checks_the_target() {
    let exempt = format!("{PER_IP}\n[exempt.health]\nmatch = [{{ path = [\"/healthz\"] }}]\n");
    assert!(matches!(eval(&exempt, BAD), Err(EvalError::BadTarget(_))));
    let key = PER_IP.replace("class = \"*\"", "class = \"*\"\nkey = \"path\"");
    assert!(matches!(eval(&key, BAD), Err(EvalError::BadTarget(_))));
}

#[test]
fn a_query_test_reads_the_query_without_the_path() {
    let query =
        format!("{PER_IP}\n[exempt.probe]\nmatch = [{{ query.probe = {{ iglob = \"1\" }} }}]\n");
    let engine = Engine::new(CompiledPolicy::parse(&query, None).unwrap()).unwrap();
    let req = OwnedRequest::new("GET", "/x?probe=1", "192.0.2.1".parse().unwrap());
    assert!(engine.evaluate(&req, 1).unwrap().exempt.is_some());
}
