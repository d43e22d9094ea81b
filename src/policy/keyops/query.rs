//! The query of a key operation: `limit=NAME&key=TEXT[&action=reset|unban|inspect]`,
//! URL-encoded (`%XX` and `+` decoded; other arguments ignored).

/// What a key operation asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyAction {
    Inspect,
    Reset,
    Unban,
}

impl KeyAction {
    /// `inspect`, `reset` or `unban`: the word the query and the answer use.
    pub fn as_str(self) -> &'static str {
        match self {
            KeyAction::Inspect => "inspect",
            KeyAction::Reset => "reset",
            KeyAction::Unban => "unban",
        }
    }

    pub fn parse(word: &[u8]) -> Option<KeyAction> {
        [KeyAction::Inspect, KeyAction::Reset, KeyAction::Unban]
            .into_iter()
            .find(|a| a.as_str().as_bytes() == word)
    }
}

/// The decoded arguments (the first of each name counts).
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct KeyQuery {
    pub limit: Option<Vec<u8>>,
    pub key: Option<Vec<u8>>,
    pub action: Option<Vec<u8>>,
}

/// Whether `query` (raw, without `?`) has a `key` argument: a key operation, not the status.
pub fn has_key(query: &[u8]) -> bool {
    args(query).any(|(n, _)| decode(n) == b"key")
}

fn args(query: &[u8]) -> impl Iterator<Item = (&[u8], &[u8])> {
    query
        .split(|&b| b == b'&')
        .filter(|a| !a.is_empty())
        .map(|a| match a.iter().position(|&b| b == b'=') {
            Some(i) => (&a[..i], &a[i + 1..]),
            None => (a, &b""[..]),
        })
}

pub(super) fn parse(query: &[u8]) -> KeyQuery {
    let mut q = KeyQuery::default();
    for (name, value) in args(query) {
        let slot = match &decode(name)[..] {
            b"limit" => &mut q.limit,
            b"key" => &mut q.key,
            b"action" => &mut q.action,
            _ => continue,
        };
        if slot.is_none() {
            *slot = Some(decode(value));
        }
    }
    q
}

/// `+` as a space, `%XX` as its byte; a `%` not followed by two hex digits stays as is.
pub(super) fn decode(v: &[u8]) -> Vec<u8> {
    let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(v.len());
    let mut i = 0;
    while i < v.len() {
        match v[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < v.len() => match (hex(v[i + 1]), hex(v[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push(h << 4 | l);
                    i += 3;
                    continue;
                }
                _ => out.push(b'%'),
            },
            b => out.push(b),
        }
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_decoded() {
        let q = parse(b"x=1&limit=api&key=ip%3D203.0.113.0%2F24+path%3D%2Fa&action=reset&key=b");
        assert_eq!(q.limit.as_deref(), Some(&b"api"[..]));
        assert_eq!(q.key.as_deref(), Some(&b"ip=203.0.113.0/24 path=/a"[..]));
        assert_eq!(q.action.as_deref(), Some(&b"reset"[..]));
        assert_eq!(decode(b"a%2"), b"a%2");
        assert_eq!(decode(b"%zz%41"), b"%zzA");
        assert_eq!(decode(b"%e2%80%a6"), "…".as_bytes());
        assert!(has_key(b"limit=a&k%65y=1"));
        assert!(!has_key(b"limit=a&keys=1"));
    }
}
