//! Who may change a key: the gate a `POST ...&action=reset|unban` passes before anything is
//! changed. Changes are off unless the host enabled them where the request arrived, and a
//! browser cannot be made to send one from another site: a change needs the
//! `Weir-Key-Action` header (a header a page can only send cross-site after a CORS
//! preflight, which no weir host answers), no form content type, and neither `Origin` nor
//! `Sec-Fetch-Site` may say the request came from elsewhere. Inspecting (GET, HEAD) is not
//! gated here: hosts guard reading with their own access rules.

/// The header a change must carry, its value the query's action (`reset` or `unban`).
pub const KEY_ACTION_HEADER: &str = "Weir-Key-Action";

/// What the host knows of where a key operation arrived: whether changes are enabled there,
/// and the request's headers that tell a browser's cross-site request (`None`: absent).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Access<'a> {
    /// Changes (reset, unban) are enabled on this endpoint (nginx `weir_status write=on`,
    /// Caddy's `weir { status_write }`, tower `StatusService::write(true)`). Off: read-only.
    pub write: bool,
    pub origin: Option<&'a [u8]>,
    pub host: Option<&'a [u8]>,
    pub sec_fetch_site: Option<&'a [u8]>,
    pub content_type: Option<&'a [u8]>,
    /// The `Weir-Key-Action` header.
    pub key_action: Option<&'a [u8]>,
}

/// The lowercase names of the headers [`Access`] reads, in its field order.
pub const HEADERS: [&str; 5] = [
    "origin",
    "host",
    "sec-fetch-site",
    "content-type",
    "weir-key-action",
];

impl<'a> Access<'a> {
    /// `write` and the headers `header(lowercase name)` gives (its first value).
    pub fn from_headers(write: bool, header: impl Fn(&str) -> Option<&'a [u8]>) -> Access<'a> {
        Access {
            write,
            origin: header(HEADERS[0]),
            host: header(HEADERS[1]),
            sec_fetch_site: header(HEADERS[2]),
            content_type: header(HEADERS[3]),
            key_action: header(HEADERS[4]),
        }
    }
}

/// The message a POST gets where changes are off.
pub(super) const WRITE_OFF: &str = "key changes (POST reset, unban) are off on this status \
    endpoint; enable them on an endpoint only operators reach: nginx `weir_status write=on;`, \
    Caddy's global option `weir { status_write }`, tower `StatusService::write(true)` \
    (docs/METRICS.md, \"Key operations\")";

/// Why a change with `action` (`reset` or `unban`) is refused, or `None` when it may go on.
/// `write` is checked apart (before the query is read), see [`WRITE_OFF`].
pub(super) fn refuse_change(a: &Access<'_>, action: &str) -> Option<String> {
    if let Some(site) = a.sec_fetch_site {
        let site = trim(site);
        if !site.eq_ignore_ascii_case(b"same-origin") && !site.eq_ignore_ascii_case(b"none") {
            return Some(format!(
                "a cross-site request cannot change keys (Sec-Fetch-Site: {})",
                shown(site)
            ));
        }
    }
    if let Some(origin) = a.origin {
        if !same_origin(trim(origin), a.host.map(trim)) {
            return Some(format!(
                "a request from another origin cannot change keys (Origin: {}, Host: {})",
                shown(trim(origin)),
                a.host.map_or("(absent)".into(), |h| shown(trim(h)))
            ));
        }
    }
    if let Some(ct) = a.content_type {
        let media = trim(ct.split(|&b| b == b';').next().unwrap_or(b""));
        let form = [
            &b"application/x-www-form-urlencoded"[..],
            b"multipart/form-data",
            b"text/plain",
        ];
        if form.iter().any(|f| media.eq_ignore_ascii_case(f)) {
            return Some(format!(
                "a form's content type cannot change keys (Content-Type: {}): send no body",
                shown(media)
            ));
        }
    }
    match a.key_action.map(trim) {
        Some(v) if v.eq_ignore_ascii_case(action.as_bytes()) => None,
        Some(v) => Some(format!(
            "the {KEY_ACTION_HEADER} header says {}, the query's action is {action}",
            shown(v)
        )),
        None => Some(format!(
            "a change needs the header `{KEY_ACTION_HEADER}: {action}` (browsers cannot send \
             it from another site)"
        )),
    }
}

/// Whether `origin` (`scheme://host[:port]`) names the `host` (`host[:port]`) the request
/// was sent to; the scheme's default port may be left out of either.
fn same_origin(origin: &[u8], host: Option<&[u8]>) -> bool {
    let Some(host) = host else {
        return false;
    };
    let (default, authority) = if let Some(a) = strip_prefix_ci(origin, b"http://") {
        (&b":80"[..], a)
    } else if let Some(a) = strip_prefix_ci(origin, b"https://") {
        (&b":443"[..], a)
    } else {
        return false; // "null", another scheme, or not an origin
    };
    if authority.is_empty() || authority.iter().any(|&b| b == b'/' || b == b'@') {
        return false;
    }
    let strip = |s: &'_ [u8]| -> Vec<u8> {
        let s = s.strip_suffix(default).unwrap_or(s);
        s.to_ascii_lowercase()
    };
    strip(authority) == strip(host)
}

fn strip_prefix_ci<'s>(s: &'s [u8], prefix: &[u8]) -> Option<&'s [u8]> {
    (s.len() >= prefix.len() && s[..prefix.len()].eq_ignore_ascii_case(prefix))
        .then(|| &s[prefix.len()..])
}

fn trim(v: &[u8]) -> &[u8] {
    v.trim_ascii()
}

/// A header value for a message: at most 128 bytes, escaped.
fn shown(v: &[u8]) -> String {
    let cut = &v[..v.len().min(128)];
    let mut s = String::from_utf8_lossy(cut).escape_debug().to_string();
    if cut.len() < v.len() {
        s.push('…');
    }
    s
}
