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
