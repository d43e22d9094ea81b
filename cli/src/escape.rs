//! Text from outside (a status server's answers, log lines) made safe to print on a terminal:
//! control characters — C0 (ESC among them), DEL and C1 (U+0080–U+009F, which some terminals
//! take as CSI, OSC, …) — are written as escapes, so no answer or log line can move the
//! cursor, retitle a window, clear the screen or hide text.

use std::borrow::Cow;
use std::fmt::Write;

/// `s` with every control character escaped (`\x1B`, `\x7F`, `\u{9B}`; a newline as `\n`):
/// one line of text.
pub fn line(s: &str) -> Cow<'_, str> {
    escape(s, false)
}

/// `s` with every control character but the newline escaped: text of several lines (a table).
pub fn text(s: &str) -> Cow<'_, str> {
    escape(s, true)
}

fn escape(s: &str, keep_newlines: bool) -> Cow<'_, str> {
    // `is_control`: C0, DEL and C1 (Unicode's Cc).
    let bad = |c: char| c.is_control() && !(keep_newlines && c == '\n');
    if !s.chars().any(bad) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\n' if !keep_newlines => out.push_str("\\n"),
            c if bad(c) && (c as u32) < 0x80 => {
                let _ = write!(out, "\\x{:02X}", c as u32);
            }
            c if bad(c) => {
                let _ = write!(out, "\\u{{{:X}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Serialized JSON made safe to print: DEL and C1 characters, which JSON allows raw in strings
/// (and which are only ever inside strings in valid JSON), as `\u00XX`; a carriage return
/// (whitespace between tokens) as a space. JSON escapes the other control characters itself.
pub fn json(s: &str) -> Cow<'_, str> {
    let bad = |c: char| c == '\r' || ('\u{7f}'..='\u{9f}').contains(&c);
    if !s.chars().any(bad) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\r' => out.push(' '),
            c if bad(c) => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_are_escaped() {
        let hostile = "a\x1b]2;owned\x07b\x1b[2J\u{9b}2J\x7f\tc\nd";
        assert_eq!(
            line(hostile),
            "a\\x1B]2;owned\\x07b\\x1B[2J\\u{9B}2J\\x7F\\x09c\\nd"
        );
        assert_eq!(
            text(hostile),
            "a\\x1B]2;owned\\x07b\\x1B[2J\\u{9B}2J\\x7F\\x09c\nd"
        );
        assert!(matches!(line("plain é ✓"), Cow::Borrowed(_)));
        // Idempotent: an escaped text has nothing left to escape.
        assert_eq!(line(&line(hostile)), line(hostile));
    }

    #[test]
    fn json_stays_json() {
        let v = serde_json::json!({"k": "a\u{9b}2J\u{7f}\u{85}\u{1b}"});
        let s = serde_json::to_string(&v).unwrap();
        let safe = json(&s);
        assert!(!safe.chars().any(char::is_control), "{safe}");
        let back: serde_json::Value = serde_json::from_str(&safe).unwrap();
        assert_eq!(back, v);
        assert_eq!(json("{\r\n\"a\": 1}"), "{ \n\"a\": 1}");
    }
}
