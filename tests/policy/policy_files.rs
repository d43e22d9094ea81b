//! The files a policy names, and the policy file itself, are read with a size cap: a device,
//! a FIFO or a file over the cap is refused at the setting's line and column, without reading
//! it whole (`tls_ca_file = "/dev/zero"` once grew `weir check` and `nginx -t` until killed).

use std::fs::File;
use std::path::PathBuf;

use weir::policy::config::files::{MAX_PEM_BYTES, MAX_POLICY_BYTES};
use weir::policy::{load_policy, parse_policy};

/// A fresh directory under the system's temporary directory.
fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("weir-files-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A cluster zone whose `field` names `path` (line 8, column 15 for `tls_ca_file`).
fn policy(field: &str, path: &str) -> String {
    format!(
        "[zones.c]\nsize = \"1m\"\nalgorithm = \"sliding\"\nevents = 10\nwindow = \"1s\"\n\
         scope = \"cluster\"\nredis = \"rediss://127.0.0.1:1/0\"\n{field} = \"{path}\"\n\
         expected_nodes = 2\n\
         [[limit]]\nclass = \"*\"\nzone = \"c\"\n"
    )
}

/// The error the policy gets: `line:col: message`.
fn error(src: &str) -> String {
    match parse_policy(src, Some("p.toml")) {
        Ok(_) => panic!("accepted:\n{src}"),
        Err(e) => format!("{}:{}: {}", e.line, e.column, e.message),
    }
}

#[test]
fn pem_files_are_regular_files_under_the_cap() {
    let d = scratch("pem");
    // A sparse file one byte over the cap: no disk used, and never read.
    let big = d.join("big.pem");
    File::create(&big)
        .unwrap()
        .set_len(MAX_PEM_BYTES + 1)
        .unwrap();
    let fifo = d.join("fifo.pem");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let cases = [
        (
            "tls_ca_file",
            "/dev/zero",
            "8:15: ",
            "a character device, not a regular file",
        ),
        (
            "tls_ca_file",
            big.to_str().unwrap(),
            "8:15: ",
            "larger than 1 MiB",
        ),
        (
            "tls_ca_file",
            fifo.to_str().unwrap(),
            "8:15: ",
            "a FIFO, not a regular file",
        ),
        (
            "tls_ca_file",
            "/",
            "8:15: ",
            "a directory, not a regular file",
        ),
        ("tls_cert_file", "/dev/zero", "8:17: ", "a character device"),
        (
            "tls_key_file",
            big.to_str().unwrap(),
            "8:16: ",
            "larger than 1 MiB",
        ),
    ];
    for (field, path, at, what) in cases {
        let e = error(&policy(field, path));
        assert!(
            e.starts_with(at) && e.contains(&format!("cannot read `{field}`")) && e.contains(what),
            "{field} = {path:?}: {e}"
        );
    }
    // At the cap exactly, a PEM block is read.
    let at_cap = d.join("ca.pem");
    let mut pem = b"-----BEGIN CERTIFICATE-----\n".to_vec();
    pem.resize(MAX_PEM_BYTES as usize, b'A');
    std::fs::write(&at_cap, &pem).unwrap();
    if let Err(e) = parse_policy(&policy("tls_ca_file", at_cap.to_str().unwrap()), None) {
        assert!(!e.message.contains("cannot read"), "{e}");
    }
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_policy_file_over_the_cap_is_refused() {
    let d = scratch("policy");
    let big = d.join("big.toml");
    File::create(&big)
        .unwrap()
        .set_len(MAX_POLICY_BYTES + 1)
        .unwrap();
    let Err(e) = load_policy(&big) else {
        panic!("accepted")
    };
    assert!(e.message.contains("larger than 64 MiB"), "{e}");
    let Err(e) = load_policy(std::path::Path::new("/dev/zero")) else {
        panic!("accepted")
    };
    assert!(e.message.contains("larger than 64 MiB"), "{e}");
    std::fs::remove_dir_all(&d).unwrap();
}
