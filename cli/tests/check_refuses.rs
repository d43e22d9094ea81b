//! `weir check` refuses what a host would refuse when it creates the zones, at the offending
//! value's file:line:col, and refuses files that are no policy at all.

use std::path::Path;
use std::process::Command;

/// Runs `weir check` on `bytes` written to a temporary `p.toml`; (exit ok, stderr).
fn check(bytes: &[u8]) -> (bool, String) {
    let dir = std::env::temp_dir().join(format!("weir-check-refuses-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join(format!("p{}.toml", bytes.len()));
    std::fs::write(&file, bytes).unwrap();
    let out = check_path(&file);
    std::fs::remove_file(&file).unwrap();
    out
}

fn check_path(file: &Path) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_weir"))
        .arg("check")
        .arg(file)
        .output()
        .expect("run weir");
    let err = String::from_utf8_lossy(&out.stderr).replace(&file.display().to_string(), "p.toml");
    (out.status.success(), err)
}

const LIMIT: &str = "[[limit]]\nclass = \"*\"\nzone = \"z\"\n";

#[test]
fn a_zone_too_small_for_a_table_is_refused_at_its_size() {
    let src = format!("[zones.z]\nsize = \"1k\"\nalgorithm = \"gcra\"\nrate = \"1r/s\"\n{LIMIT}");
    let (ok, err) = check(src.as_bytes());
    assert!(!ok, "{err}");
    assert!(
        err.starts_with("p.toml:2:8: error: zone \"z\": size 1024 is too small"),
        "{err}"
    );
    // The smallest size the table takes is accepted.
    let src = src.replace("\"1k\"", "\"2k\"");
    let (ok, err) = check(src.as_bytes());
    assert!(ok, "{err}");
}

#[test]
fn a_log_zone_too_small_for_one_key_is_refused_at_its_size() {
    let src = format!(
        "[zones.z]\nsize = \"32k\"\nalgorithm = \"log\"\nevents = 4096\nwindow = \"1m\"\n{LIMIT}"
    );
    let (ok, err) = check(src.as_bytes());
    assert!(!ok, "{err}");
    assert!(
        err.starts_with("p.toml:2:8: error: zone \"z\": size 32768 holds no key"),
        "{err}"
    );
    let (ok, err) = check(src.replace("\"32k\"", "\"64k\"").as_bytes());
    assert!(ok, "{err}");
}

#[test]
fn a_file_without_limits_is_an_error() {
    let zone = "[zones.z]\nsize = \"1m\"\nalgorithm = \"gcra\"\nrate = \"1r/s\"\n";
    for (src, at) in [("", "1:1"), ("# nothing yet\n", "2:1"), (zone, "5:1")] {
        let (ok, err) = check(src.as_bytes());
        assert!(!ok, "{src:?} accepted: {err}");
        assert!(
            err.starts_with(&format!("p.toml:{at}: error: the policy has no [[limit]]")),
            "{err}"
        );
    }
    let (ok, err) = check_path(Path::new("/dev/null"));
    assert!(
        !ok && err.contains("error: the policy has no [[limit]]"),
        "{err}"
    );
}

#[test]
fn invalid_utf8_is_an_error_at_its_byte() {
    let (ok, err) = check(b"[zones.z]\nsize = \"1m\xff\"\n");
    assert!(!ok);
    assert!(
        err.starts_with("p.toml:2:11: error: the policy is not valid UTF-8 (byte 0xff)"),
        "{err}"
    );
}

#[test]
fn files_the_policy_names_are_read_up_to_a_cap() {
    let dir = std::env::temp_dir().join(format!("weir-check-files-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // Sparse: 4 GiB that take no disk, and that an unbounded read would hold in memory.
    let huge = dir.join("huge.pem");
    std::fs::File::create(&huge)
        .unwrap()
        .set_len(4 << 30)
        .unwrap();
    let policy = |ca: &Path| {
        format!(
            "[zones.z]\nsize = \"1m\"\nalgorithm = \"sliding\"\nevents = 10\nwindow = \"1s\"\n\
             scope = \"cluster\"\nredis = \"rediss://127.0.0.1:1/0\"\ntls_ca_file = \"{}\"\n\
             expected_nodes = 2\n{LIMIT}",
            ca.display()
        )
    };
    for (ca, what) in [
        (
            Path::new("/dev/zero"),
            "it is a character device, not a regular file",
        ),
        (huge.as_path(), "it is larger than 1 MiB"),
    ] {
        let (ok, err) = check(policy(ca).as_bytes());
        assert!(!ok, "{err}");
        assert!(
            err.starts_with("p.toml:8:15: error: cannot read `tls_ca_file`") && err.contains(what),
            "{err}"
        );
    }
    // The policy file itself: a device is read up to the policy cap, then refused.
    let (ok, err) = check_path(Path::new("/dev/zero"));
    assert!(!ok && err.contains("larger than 64 MiB"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A zone and `n` limits on every request: 4 lines, then 5 a limit.
fn limits(n: usize) -> String {
    let zone = "[zones.z]\nsize = \"1m\"\nalgorithm = \"gcra\"\nrate = \"10r/s\"\n";
    let limit = |i| format!("[[limit]]\nname = \"l{i}\"\nclass = \"*\"\nzone = \"z\"\nburst = 5\n");
    zone.to_owned() + &(0..n).map(limit).collect::<String>()
}

/// The most limits a policy may have pass; one more is refused at the first one too many (the
/// same error nginx -t and caddy validate give: it is the policy compiler's).
#[test]
fn more_limits_than_the_most_are_refused_at_the_first_one_too_many() {
    let most = weir::policy::config::MAX_LIMITS;
    let (ok, err) = check(limits(most).as_bytes());
    assert!(ok, "{err}");
    let (ok, err) = check(limits(most + 1).as_bytes());
    assert!(!ok);
    let at = format!(
        "p.toml:{}:1: error: the policy has more than {most} limits",
        4 + 5 * most + 1
    );
    assert!(err.starts_with(&at), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}

/// Checking is linear in the policy's size and its warnings: 100,000 classes that each get a
/// warning, and the most limits each with one of them and a warning of its own. Reporting each
/// warning used to count the lines before it (300 GB of text here: minutes) and to look up each
/// limit's classes among all shapes; the bound is for that, far above the linear run (seconds).
#[test]
fn checking_many_warnings_is_linear() {
    let (classes, most) = (100_000, weir::policy::config::MAX_LIMITS);
    let mut src =
        String::from("[zones.z]\nsize = \"1m\"\nalgorithm = \"gcra\"\nrate = \"10r/s\"\n");
    for i in 0..classes {
        src += &format!("[classes.c{i}]\nmatch = [{{ path = \"/p{i}?x=1\" }}]\n");
    }
    for i in 0..most {
        src += &format!("[[limit]]\nclass = \"c{i}\"\nzone = \"z\"\nburst = 0\n");
    }
    let dir = std::env::temp_dir().join(format!("weir-check-linear-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("p.toml");
    std::fs::write(&file, &src).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_weir"))
        .arg("check")
        .arg(&file)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run weir");
    // Read stderr in a thread, so that a hang is seen by the loop below, not by a read.
    let mut pipe = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut pipe, &mut s).unwrap();
        s
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(180);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("weir check on {classes} warned classes did not finish");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let err = reader
        .join()
        .unwrap()
        .replace(&file.display().to_string(), "p.toml");
    std::fs::remove_dir_all(&dir).unwrap();
    let count = |what: &str| err.lines().filter(|l| l.contains(what)).count();
    assert_eq!(count("contains a query string"), classes);
    assert_eq!(count("has burst 0"), most);
    assert_eq!(count(": error: "), 0, "{}", &err[..err.len().min(2000)]);
    // The last warning is placed as precisely as the first.
    let line = 4 + 2 * classes + 4 * most;
    let last = format!(
        "p.toml:{line}:9: warning: limit \"c{}/z\" has burst 0",
        most - 1
    );
    assert!(err.lines().any(|l| l.starts_with(&last)), "{last}");
}
