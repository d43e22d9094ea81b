//! `path_iglob` and `iglob`: parsed, positioned in errors, and matched ignoring ASCII case.

use std::net::IpAddr;

use weir::policy::config::check_policy;
use weir::policy::{Action, Engine, OwnedRequest};

const HEAD: &str = "[zones.z]\nsize = \"64k\"\nalgorithm = \"gcra\"\nrate = \"1r/m\"\n";

fn first_error(src: &str) -> (usize, usize, String) {
    let errs = check_policy(src, Some("p.toml")).expect_err("an error");
    (errs[0].line, errs[0].column, errs[0].message.clone())
}

#[test]
fn errors_point_at_the_pattern() {
    let c = |m: &str| format!("{HEAD}[classes.c]\nmatch = [{m}]\n");
    let (line, col, msg) = first_error(&c("{ path_iglob = \"/a[\" }"));
    assert_eq!((line, col), (6, 25), "{msg}");
    assert!(msg.contains("unclosed `[`"), "{msg}");
    let (line, col, msg) = first_error(&c("{ query.t = { iglob = \"[z-a]\" } }"));
    assert_eq!((line, col), (6, 32), "{msg}");
    assert!(msg.contains("reversed"), "{msg}");
    let (_, _, msg) = first_error(&c("{ query.t = { glob = \"a\", iglob = \"a\" } }"));
    assert!(msg.contains("`iglob = \"…\"`"), "{msg}");
}

#[test]
fn case_is_ignored_in_path_and_value_tests() {
    let src = format!(
        "{HEAD}[classes.c]\nmatch = [\n  {{ path_iglob = \"/w/Special:*\" }},\n  \
         {{ path = \"/index.php\", query.title = {{ iglob = \"special:*\" }} }},\n]\n\
         [[limit]]\nname = \"l\"\nclass = \"c\"\nzone = \"z\"\nkey = \"global\"\n"
    );
    let e = Engine::new(weir::policy::parse_policy(&src, None).unwrap()).unwrap();
    let peer: IpAddr = "192.0.2.1".parse().unwrap();
    let now = 1_000_000_000_000;
    let eval = |t: &str| e.evaluate(&OwnedRequest::new("GET", t, peer), now).unwrap();
    assert_eq!(eval("/w/Special:X").action, Action::Pass);
    for t in [
        "/w/SPECIAL:X",
        "/w/special:x",
        "/index.php?title=SPECIAL%3AX",
        "/index.php?title=Special:X",
    ] {
        assert_eq!(eval(t).action, Action::Reject, "{t}");
    }
    assert_eq!(eval("/W/sPECIAL:x").action, Action::Reject);
    // `path` stays exact: /Index.php is not /index.php.
    for t in ["/index.php?title=Main", "/Index.php?title=special:x"] {
        assert_eq!(eval(t).action, Action::Pass, "{t}");
    }
}
