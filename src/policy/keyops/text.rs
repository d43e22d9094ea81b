//! Key text (`policy::key_text`) back to a key: the request whose parts make it, so the
//! engine hashes it exactly as it hashes the requests it evaluates, or the key's reference
//! (` #` and 16 hex digits) when the text does not name the key exactly.
//!
//! A one-part key is its value (`NAME=` before a marker: `(absent)`, a hidden `~…`); several
//! parts are `NAME=value` in the limit's order, separated by one space. `%HH` stands for byte
//! HH. An `ip` part (or a masked `var:` value) takes the network as shown (`203.0.113.0/24`)
//! or any address inside it; `local` is the local client. A hidden value (`~…`), a hashed
//! address (`h:…`), a masked address or a cut text (`(cut)`) need the reference. Text that
//! cannot be a key of the limit is refused with the reason: bytes outside printable ASCII, a
//! wrong part name, a prefix other than the limit's, a malformed `%` or reference.

use std::net::IpAddr;

use crate::policy::key::{KeyPart, VarMask};
use crate::policy::key_text::{put_name, ABSENT, BAD_TARGET, CUT, EMPTY};
use crate::policy::request::OwnedRequest;

/// The key's parts as a request: what [`crate::policy::request::PreparedRequest::new`] needs.
pub(super) struct KeyRequest {
    pub view: OwnedRequest,
    pub path: Vec<u8>,
    pub client: Option<IpAddr>,
}

/// What key text names.
pub(super) enum Named {
    /// The key of this request; the reference the text ended with, if any.
    Request(KeyRequest, Option<u64>),
    /// Only the key's reference (the text hides, masks or cuts a part).
    Reference(u64),
}

/// The key `text` names for `parts`, or why `text` is no such key.
pub(super) fn parse_key(parts: &[KeyPart], text: &[u8]) -> Result<Named, String> {
    if let Some(&b) = text.iter().find(|&&b| !(0x20..0x7f).contains(&b)) {
        return Err(format!(
            "key text is printable ASCII (a byte {b:#04X} is written %{b:02X}); copy it as logs and the status show it"
        ));
    }
    if let Some(b) = text.iter().find(|&&b| b == b'"' || b == b'\\') {
        return Err(format!(
            "{:?} in key text: keys write it %{b:02X}",
            char::from(*b)
        ));
    }
    let (head, reference) = match text.iter().rposition(|&b| b == b' ' || b == b'#') {
        Some(i) if text[i] == b'#' && (i == 0 || text[i - 1] == b' ') => {
            let r = reference(&text[i + 1..])?;
            (&text[..i.saturating_sub(1)], Some(r))
        }
        _ => (text, None),
    };
    let need = |what: &str| {
        reference.map(Named::Reference).ok_or_else(|| {
            format!("{what}: give the key text with its reference (` #` and 16 hex digits), as logs and the status show it")
        })
    };
    if head.is_empty() {
        return need("no key");
    }
    if head.ends_with(CUT.as_bytes()) {
        return need("the key text is cut (cut)");
    }
    let values = split(parts, head)?;
    let mut req = KeyRequest {
        view: OwnedRequest::local("GET", "/"),
        path: b"/".to_vec(),
        client: None,
    };
    let mut lossy = None;
    for (part, value) in parts.iter().zip(values) {
        match value {
            Some(v) if v.first() == Some(&b'~') => {
                hex16(&v[1..]).ok_or_else(|| {
                    format!("{}: a hidden value is ~ and 16 hex digits", label(part))
                })?;
                lossy = lossy.or(Some(format!("{} is hidden (~…)", label(part))));
            }
            Some(v) if v.starts_with(b"h:") && matches!(part, KeyPart::Ip { .. }) => {
                lossy = lossy.or(Some(format!("{} is a hashed address (h:…)", label(part))));
            }
            Some(v) if v == BAD_TARGET.as_bytes() => {
                return Err(format!("{}: {BAD_TARGET} names no key", label(part)))
            }
            Some(v) if v.contains(&b'(') || v.contains(&b')') || v.contains(&b'#') => {
                return Err(format!(
                    "{}: ( ) # in a value are written %28 %29 %23",
                    label(part)
                ))
            }
            _ => {
                if let Err(e) = set(&mut req, part, value) {
                    // A masked address names its network, not the limit's key: the
                    // reference does.
                    lossy = lossy.or(Some(e));
                }
            }
        }
    }
    match lossy {
        Some(why) => need(&why),
        None => Ok(Named::Request(req, reference)),
    }
}

/// Sixteen hex digits.
fn hex16(v: &[u8]) -> Option<u64> {
    if v.len() != 16 {
        return None;
    }
    u64::from_str_radix(std::str::from_utf8(v).ok()?, 16).ok()
}

fn reference(v: &[u8]) -> Result<u64, String> {
    hex16(v).ok_or_else(|| "a key reference is # and 16 hex digits".to_string())
}

fn name(part: &KeyPart) -> Vec<u8> {
    let mut s = String::new();
    put_name(&mut s, part);
    s.into_bytes()
}

fn label(part: &KeyPart) -> String {
    String::from_utf8_lossy(&name(part)).into_owned()
}

fn names(parts: &[KeyPart]) -> String {
    let n: Vec<String> = parts.iter().map(label).collect();
    n.join(" ")
}

/// Whether a value is a marker (never a literal value: its bytes are escaped).
fn marker(v: &[u8]) -> bool {
    [ABSENT, EMPTY, BAD_TARGET]
        .iter()
        .any(|m| v == m.as_bytes())
        || v.first() == Some(&b'~')
}

/// Each part's value text (`None`: absent).
fn split<'t>(parts: &[KeyPart], text: &'t [u8]) -> Result<Vec<Option<&'t [u8]>>, String> {
    let absent = |v: &'t [u8]| match v {
        _ if v == ABSENT.as_bytes() => None,
        _ if v == EMPTY.as_bytes() => Some(&b""[..]),
        _ => Some(v),
    };
    let tokens: Vec<&[u8]> = text.split(|&b| b == b' ').collect();
    if tokens.iter().any(|t| t.is_empty()) {
        return Err("key text separates its parts by one space".into());
    }
    if let [one] = parts {
        let &[t] = tokens.as_slice() else {
            return Err(format!(
                "a key of this limit is one value ({}), without spaces (%20)",
                names(parts)
            ));
        };
        let mut head = name(one);
        head.push(b'=');
        return Ok(vec![match t.strip_prefix(&head[..]) {
            Some(v) if marker(v) => absent(v),
            _ => absent(t),
        }]);
    }
    let mut out = Vec::with_capacity(parts.len());
    for (i, part) in parts.iter().enumerate() {
        let mut head = name(part);
        head.push(b'=');
        let Some(v) = tokens.get(i).and_then(|t| t.strip_prefix(&head[..])) else {
            return Err(format!(
                "expected part {:?} (this limit's key parts are: {})",
                String::from_utf8_lossy(&head),
                names(parts)
            ));
        };
        out.push(absent(v));
    }
    if tokens.len() > parts.len() {
        return Err(format!(
            "{} parts given; this limit's key parts are: {}",
            tokens.len(),
            names(parts)
        ));
    }
    Ok(out)
}

/// `%HH` as byte HH, other bytes as they are.
fn unescape(v: &[u8]) -> Result<Vec<u8>, String> {
    let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(v.len());
    let mut i = 0;
    while i < v.len() {
        if v[i] == b'%' {
            match (
                v.get(i + 1).and_then(|&b| hex(b)),
                v.get(i + 2).and_then(|&b| hex(b)),
            ) {
                (Some(h), Some(l)) => {
                    out.push(h << 4 | l);
                    i += 3;
                    continue;
                }
                _ => return Err("a % in key text must start %HH (a byte in hex)".into()),
            }
        }
        out.push(v[i]);
        i += 1;
    }
    Ok(out)
}

/// An address with an optional `/prefix`, which must be `prefix` when given; canonical.
fn address(v: &[u8], prefix: impl Fn(IpAddr) -> Option<u8>, what: &str) -> Result<IpAddr, String> {
    let text = std::str::from_utf8(v).map_err(|_| format!("{what}: not an IP address"))?;
    if text.starts_with("h:") {
        return Err(format!(
            "{what}: a hashed address (h:…) names no client; use the address (access logs show it)"
        ));
    }
    let (addr, bits) = match text.split_once('/') {
        Some((a, b)) => (a, Some(b)),
        None => (text, None),
    };
    let ip = addr
        .parse::<IpAddr>()
        .map_err(|_| format!("{what}: {text:?} is not an IP address"))?
        .to_canonical();
    if let Some(bits) = bits {
        let want = prefix(ip);
        if bits.parse::<u8>().ok() != want.or(Some(if ip.is_ipv4() { 32 } else { 128 })) {
            return Err(match want {
                Some(p) => format!("{what}: the limit keys this family by /{p}, not /{bits}"),
                None => format!("{what}: the limit keeps these addresses whole, not /{bits}"),
            });
        }
    }
    Ok(ip)
}

fn set(req: &mut KeyRequest, part: &KeyPart, value: Option<&[u8]>) -> Result<(), String> {
    let label = || String::from_utf8_lossy(&name(part)).into_owned();
    let need = || value.ok_or_else(|| format!("{}: this part is never absent", label()));
    match part {
        KeyPart::Ip {
            v4_prefix,
            v6_prefix,
        } => {
            let v = need()?;
            req.client = match v {
                b"local" => None,
                _ => Some(address(
                    v,
                    |ip| Some(if ip.is_ipv4() { *v4_prefix } else { *v6_prefix }),
                    &label(),
                )?),
            };
            req.view.peer = req.client;
        }
        KeyPart::Global if value == Some(b"global") => {}
        KeyPart::Global => return Err("global: the value is `global`".into()),
        KeyPart::Path => req.path = unescape(need()?)?,
        KeyPart::Method => req.view.method = unescape(need()?)?,
        KeyPart::Header(n) => {
            if let Some(v) = value {
                let v = unescape(v)?;
                req.view.headers.push((n.to_vec(), v));
            }
        }
        KeyPart::Cookie(n) => {
            if let Some(v) = value {
                // Quoted, so the cookie parser gives back the value exactly (a value never
                // holds `;`; its spaces and quotes stay inside the quotes).
                let mut pair = n.to_vec();
                pair.extend_from_slice(b"=\"");
                pair.extend_from_slice(&unescape(v)?);
                pair.push(b'"');
                req.view.headers.push((b"cookie".to_vec(), pair));
            }
        }
        KeyPart::Var { index, mask, .. } => {
            let v = value.ok_or_else(|| {
                format!("{}: the limit does not apply when it is absent", label())
            })?;
            let v = masked_var(v, mask, &label())?;
            if v.is_empty() {
                return Err(format!(
                    "{}: the limit does not apply when it is empty",
                    label()
                ));
            }
            req.view =
                std::mem::replace(&mut req.view, OwnedRequest::local("GET", "/")).var(*index, v);
        }
    }
    Ok(())
}

/// A `var:` value: a masked address's network (`192.0.2.0/24`) as its address, which masks to
/// the same network; anything else unescaped.
fn masked_var(v: &[u8], mask: &VarMask, label: &str) -> Result<Vec<u8>, String> {
    let net = v.split(|&b| b == b'/').next().unwrap_or(v);
    let is_ip = std::str::from_utf8(net).is_ok_and(|n| n.parse::<IpAddr>().is_ok());
    if !mask.is_none() && is_ip && net.len() < v.len() {
        let ip = address(v, |ip| if ip.is_ipv4() { mask.v4 } else { mask.v6 }, label)?;
        return Ok(ip.to_string().into_bytes());
    }
    unescape(v)
}
