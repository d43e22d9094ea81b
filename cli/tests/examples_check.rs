//! Every policy the project shows operators passes `weir check` without a warning: the example
//! files and each complete policy (one with a `[[limit]]`) in the docs. An example that draws
//! a warning teaches the pitfall the warning is about.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn files_in(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == ext))
        .collect();
    v.sort();
    v
}

/// The complete policies among the ```toml blocks of a Markdown file.
fn doc_policies(md: &str) -> Vec<String> {
    md.split("```toml\n")
        .skip(1)
        .filter_map(|b| b.split_once("```").map(|(block, _)| block.to_string()))
        .filter(|b| b.contains("[[limit]]"))
        .collect()
}

/// `weir check` on `file`: success, and "0 warnings" with no warning line.
fn assert_clean(file: &Path, what: &str) {
    let out = Command::new(env!("CARGO_BIN_EXE_weir"))
        .arg("check")
        .arg(file)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{what}:\n{text}");
    assert!(
        text.contains("ok (0 warnings)") && !text.contains("warning:"),
        "{what}:\n{text}"
    );
}

#[test]
fn examples_and_documented_policies_draw_no_warning() {
    let root = repo();
    let mut files = files_in(&root.join("examples"), "toml");
    files.push(root.join("examples/incident/policy.toml"));
    files.extend(files_in(&root.join("tower/examples"), "toml"));
    assert!(files.len() >= 5, "{files:?}");
    for f in &files {
        assert_clean(f, &f.display().to_string());
    }

    let dir = tempfile::tempdir().unwrap();
    let mut docs = files_in(&root.join("docs"), "md");
    docs.push(root.join("README.md"));
    let mut n = 0;
    for md in docs {
        let src = std::fs::read_to_string(&md).unwrap();
        for (i, policy) in doc_policies(&src).into_iter().enumerate() {
            let name = md.file_stem().unwrap().to_string_lossy();
            let f = dir.path().join(format!("{name}-{i}.toml"));
            std::fs::write(&f, policy).unwrap();
            assert_clean(&f, &format!("{} block {i}", md.display()));
            n += 1;
        }
    }
    // At least docs/POLICY.md's complete example.
    assert!(n >= 1);
}
