//! Which key parts key text hides (`[key_text] hide`, docs/POLICY.md): a hidden part's value is
//! shown as its keyed hash everywhere a key is written (access logs, error log, JSON status,
//! key operations, `weir top`). By default header and cookie values are hidden: they carry
//! sessions and credentials.

use crate::policy::key::KeyPart;

const IP: u8 = 1;
const PATH: u8 = 2;
const METHOD: u8 = 4;
const HEADER: u8 = 8;
const COOKIE: u8 = 16;
const VAR: u8 = 32;

/// The parts whose values are hidden: whole kinds, and single named parts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hide {
    kinds: u8,
    /// (kind, name) of `header:NAME`, `cookie:NAME`, `var:NAME` entries.
    parts: Vec<(u8, Box<[u8]>)>,
}

impl Default for Hide {
    /// Header and cookie values.
    fn default() -> Hide {
        Hide {
            kinds: HEADER | COOKIE,
            parts: Vec::new(),
        }
    }
}

fn kind_of(p: &KeyPart) -> (u8, &[u8]) {
    match p {
        KeyPart::Ip { .. } => (IP, b""),
        KeyPart::Global => (0, b""),
        KeyPart::Path => (PATH, b""),
        KeyPart::Method => (METHOD, b""),
        KeyPart::Header(n) => (HEADER, n),
        KeyPart::Cookie(n) => (COOKIE, n),
        KeyPart::Var { name, .. } => (VAR, name),
    }
}

impl Hide {
    /// Nothing hidden (`hide = []`).
    pub fn nothing() -> Hide {
        Hide {
            kinds: 0,
            parts: Vec::new(),
        }
    }

    /// Adds one entry of the list: `ip`, `path`, `method`, `header`, `cookie`, `var`, or one
    /// part, `header:NAME`, `cookie:NAME`, `var:NAME`.
    pub fn add(&mut self, entry: &str) -> Result<(), String> {
        let kind = |k: &str| match k {
            "ip" => Some(IP),
            "path" => Some(PATH),
            "method" => Some(METHOD),
            "header" => Some(HEADER),
            "cookie" => Some(COOKIE),
            "var" => Some(VAR),
            _ => None,
        };
        if entry == "global" {
            return Err("\"global\" has no value to hide".into());
        }
        if let Some(k) = kind(entry) {
            self.kinds |= k;
            return Ok(());
        }
        let named = entry.split_once(':').and_then(|(k, n)| {
            let k = kind(k).filter(|k| *k & (HEADER | COOKIE | VAR) != 0)?;
            Some((k, n))
        });
        match named {
            Some((k, n)) if !n.is_empty() => {
                let n = if k == HEADER {
                    n.to_ascii_lowercase()
                } else {
                    n.to_owned()
                };
                self.parts.push((k, n.into_bytes().into()));
                Ok(())
            }
            _ => Err(format!(
                "unknown key part {entry:?} in `hide`; expected \"ip\", \"path\", \"method\", \"header\", \"cookie\", \"var\", or one part: \"header:NAME\", \"cookie:NAME\", \"var:NAME\""
            )),
        }
    }

    /// Whether `part`'s value is hidden.
    pub fn hides(&self, part: &KeyPart) -> bool {
        let (kind, name) = kind_of(part);
        self.kinds & kind != 0 || self.parts.iter().any(|(k, n)| *k == kind && **n == *name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_and_single_parts() {
        let d = Hide::default();
        assert!(d.hides(&KeyPart::Header(b"authorization"[..].into())));
        assert!(d.hides(&KeyPart::Cookie(b"s"[..].into())));
        assert!(!d.hides(&KeyPart::IP) && !d.hides(&KeyPart::Path));
        let mut h = Hide::nothing();
        h.add("header:X-Api-Key").unwrap();
        h.add("path").unwrap();
        assert!(h.hides(&KeyPart::Header(b"x-api-key"[..].into())));
        assert!(!h.hides(&KeyPart::Header(b"x-other"[..].into())));
        assert!(h.hides(&KeyPart::Path) && !h.hides(&KeyPart::Method));
        assert!(h.add("global").is_err() && h.add("path:x").is_err());
        assert!(h.add("header:").is_err() && h.add("nope").is_err());
    }
}
