//! Key text (`policy::key_text`) back to a key: the request whose parts make it, so the
//! engine hashes it exactly as it hashes the requests it evaluates.
//!
//! A one-part key is its value (`name=(absent)` for an absent one); several parts are
//! `name=value` in the limit's order, separated by spaces (a value runs up to the next
//! ` name=` of the following part). `\xHH` stands for byte HH. An `ip` part (or a masked `var:`
//! value) takes the network as shown (`203.0.113.0/24`) or any address inside it; `local` is
//! the local client. Text that cannot be a key of the limit is refused with the reason: a cut
//! value (`…`), a hashed address (`h:…`), a wrong part name, a prefix other than the limit's.

use std::net::IpAddr;

use crate::policy::key::{KeyPart, VarMask};
use crate::policy::key_text::put_name;
use crate::policy::request::OwnedRequest;

/// The key's parts as a request: what [`crate::policy::request::PreparedRequest::new`] needs.
pub(super) struct KeyRequest {
    pub view: OwnedRequest,
    pub path: Vec<u8>,
    pub client: Option<IpAddr>,
}

/// The request whose key for `parts` is `text`, or why `text` is no such key.
pub(super) fn parse_key(parts: &[KeyPart], text: &[u8]) -> Result<KeyRequest, String> {
    let mut req = KeyRequest {
        view: OwnedRequest::local("GET", "/"),
        path: b"/".to_vec(),
        client: None,
    };
    if text.ends_with("…".as_bytes()) || contains(text, "…".as_bytes()) {
        return Err(
            "the key text is cut (…): give the whole key (access logs show it in full)".into(),
        );
    }
    let values = split(parts, text)?;
    for (part, value) in parts.iter().zip(values) {
        set(&mut req, part, value)?;
    }
    Ok(req)
}

fn name(part: &KeyPart) -> Vec<u8> {
    let mut s = String::new();
    put_name(&mut s, part);
    s.into_bytes()
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn names(parts: &[KeyPart]) -> String {
    let n: Vec<String> = parts
        .iter()
        .map(|p| String::from_utf8_lossy(&name(p)).into_owned())
        .collect();
    n.join(" ")
}

/// Each part's value text (`None`: absent).
fn split<'t>(parts: &[KeyPart], text: &'t [u8]) -> Result<Vec<Option<&'t [u8]>>, String> {
    let absent = |v: &'t [u8]| (v != b"(absent)").then_some(v);
    if let [one] = parts {
        let mut named = name(one);
        named.extend_from_slice(b"=(absent)");
        return Ok(vec![(text != named).then_some(text)]);
    }
    let mut out = Vec::with_capacity(parts.len());
    let mut rest = text;
    for (i, part) in parts.iter().enumerate() {
        let mut head = name(part);
        head.push(b'=');
        let Some(after) = rest.strip_prefix(&head[..]) else {
            return Err(format!(
                "expected part {:?} (this limit's key parts are: {})",
                String::from_utf8_lossy(&head),
                names(parts)
            ));
        };
        let end = match parts.get(i + 1) {
            None => after.len(),
            Some(next) => {
                let mut sep = b" ".to_vec();
                sep.extend_from_slice(&name(next));
                sep.push(b'=');
                find(after, &sep).ok_or_else(|| {
                    format!(
                        "expected part {:?} after {:?} (this limit's key parts are: {})",
                        String::from_utf8_lossy(&sep[1..]),
                        String::from_utf8_lossy(&head),
                        names(parts)
                    )
                })?
            }
        };
        out.push(absent(&after[..end]));
        rest = after[end..].strip_prefix(b" ").unwrap_or(&after[end..]);
    }
    Ok(out)
}

/// `\xHH` as byte HH, other bytes as they are.
fn unescape(v: &[u8]) -> Result<Vec<u8>, String> {
    let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(v.len());
    let mut i = 0;
    while i < v.len() {
        if v[i] == b'\\' {
            match (
                v.get(i + 1),
                v.get(i + 2).and_then(|&b| hex(b)),
                v.get(i + 3).and_then(|&b| hex(b)),
            ) {
                (Some(b'x'), Some(h), Some(l)) => {
                    out.push(h << 4 | l);
                    i += 4;
                    continue;
                }
                _ => return Err("a \\ in key text must start \\xHH (a byte in hex)".into()),
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
        KeyPart::Path if value == Some(b"(bad target)") => {
            return Err("path: (bad target) names no key".into())
        }
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
                let mut pair = n.to_vec();
                pair.push(b'=');
                pair.extend_from_slice(&unescape(v)?);
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
