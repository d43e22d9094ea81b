//! Fuzz target for the policy parser (`weir::policy::config::check_policy`): no input may
//! panic, and every error's position must lie within the input (line 1 ..= lines + 1, column
//! ≥ 1 and at most one past the end of its line).
#![no_main]

use libfuzzer_sys::fuzz_target;
use weir::policy::config::check_policy;

fuzz_target!(|data: &[u8]| {
    let Ok(src) = std::str::from_utf8(data) else {
        return;
    };
    let Err(errors) = check_policy(src, Some("fuzz.toml")) else {
        return;
    };
    assert!(!errors.is_empty(), "Err with no errors");
    // `str::lines` drops a trailing empty line; count '\n' instead: a position at the very end
    // of a file ending in '\n' is on line (newlines + 1).
    let lines: Vec<&str> = src.split('\n').collect();
    for e in &errors {
        assert_eq!(e.file.as_deref(), Some("fuzz.toml"));
        assert!(
            e.line >= 1 && e.line <= lines.len(),
            "line {} outside 1..={} for {e}",
            e.line,
            lines.len()
        );
        let width = lines[e.line - 1].chars().count();
        assert!(
            e.column >= 1 && e.column <= width + 1,
            "column {} outside 1..={} on line {} for {e}",
            e.column,
            width + 1,
            e.line
        );
        assert!(
            !e.message.is_empty(),
            "empty message at {}:{}",
            e.line,
            e.column
        );
        let _ = e.to_string();
    }
});
