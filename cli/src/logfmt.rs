//! Access-log parsers: any nginx `log_format` string (nginx "combined" is one) and Caddy's JSON
//! access log. A parsed line becomes an [`Entry`], which is also the engine's `RequestView`:
//! method, target and headers are ranges into one byte buffer that is reused from line to line.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::net::IpAddr;

use memchr::memmem;
use weir::policy::engine::LogAction;
use weir::policy::RequestView;

use crate::timefmt;

/// The nginx "combined" format.
pub const COMBINED: &str = "$remote_addr - $remote_user [$time_local] \"$request\" $status \
                            $body_bytes_sent \"$http_referer\" \"$http_user_agent\"";

/// One request from a log, ready to be evaluated. Reused: [`Entry::reset`] keeps the buffers.
#[derive(Debug, Clone)]
pub struct Entry {
    /// Log time, Unix ns.
    pub ts_ns: i64,
    /// The timestamp had whole-second resolution (`$time_local`, `$time_iso8601`).
    pub whole_second: bool,
    /// Index of the input file.
    pub file: u32,
    /// 1-based line number in that file.
    pub line: u64,
    /// Arrival order over all inputs (ties in time keep log order).
    pub seq: u64,
    pub peer: IpAddr,
    /// `$request_time` / Caddy `duration`, when logged: concurrency permits are held this long.
    pub duration_ns: Option<u64>,
    /// `$status` / Caddy `status`, when logged: what `charge_on_status` limits are charged with.
    pub status: Option<u16>,
    /// `$weir_action` / Caddy `weir_action`, when logged ("-" or empty: none).
    pub logged_action: Option<LogAction>,
    /// `$weir_limit` / Caddy `weir_limit`, when the format records it (empty: no limit).
    logged_limit: Option<(u32, u32)>,
    pub buf: Vec<u8>,
    method: (u32, u32),
    target: (u32, u32),
    /// (name start, name end, value start, value end); names lowercase.
    headers: Vec<(u32, u32, u32, u32)>,
    /// Indexes into `headers` sorted by name, each name's lines in log order: `header_nth` is a
    /// binary search, so a line with many repeated headers costs O(n log n), not O(n²).
    by_name: Vec<u32>,
}

impl Default for Entry {
    fn default() -> Self {
        Entry {
            ts_ns: 0,
            whole_second: false,
            file: 0,
            line: 0,
            seq: 0,
            peer: IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
            duration_ns: None,
            status: None,
            logged_action: None,
            logged_limit: None,
            buf: Vec::with_capacity(512),
            method: (0, 0),
            target: (0, 0),
            headers: Vec::with_capacity(8),
            by_name: Vec::with_capacity(8),
        }
    }
}

impl Entry {
    fn reset(&mut self) {
        self.buf.clear();
        self.headers.clear();
        self.by_name.clear();
        self.duration_ns = None;
        self.status = None;
        self.logged_action = None;
        self.logged_limit = None;
        self.whole_second = false;
        self.method = (0, 0);
        self.target = (0, 0);
    }

    /// The limit name the host logged: `Some("")` when it logged none, `None` when the format
    /// does not record it.
    pub fn logged_limit(&self) -> Option<&str> {
        let (s, t) = self.logged_limit?;
        std::str::from_utf8(&self.buf[s as usize..t as usize]).ok()
    }

    fn set_logged_limit(&mut self, r: (u32, u32)) {
        let dash = &self.buf[r.0 as usize..r.1 as usize] == b"-";
        self.logged_limit = Some(if dash { (r.0, r.0) } else { r });
    }

    fn push(&mut self, bytes: &[u8]) -> (u32, u32) {
        let s = self.buf.len() as u32;
        self.buf.extend_from_slice(bytes);
        (s, self.buf.len() as u32)
    }

    fn push_lower(&mut self, bytes: &[u8]) -> (u32, u32) {
        let s = self.buf.len() as u32;
        self.buf.extend(bytes.iter().map(u8::to_ascii_lowercase));
        (s, self.buf.len() as u32)
    }

    fn add_header(&mut self, name: (u32, u32), value: (u32, u32)) {
        self.headers.push((name.0, name.1, value.0, value.1));
    }

    fn slice(&self, r: (u32, u32)) -> &[u8] {
        &self.buf[r.0 as usize..r.1 as usize]
    }

    fn header_name(&self, i: u32) -> &[u8] {
        let h = self.headers[i as usize];
        self.slice((h.0, h.1))
    }

    /// Builds `by_name` once the headers are in.
    fn index_headers(&mut self) {
        let mut by_name = std::mem::take(&mut self.by_name);
        by_name.extend(0..self.headers.len() as u32);
        // Stable: lines of one name keep their order.
        by_name.sort_by(|&a, &b| self.header_name(a).cmp(self.header_name(b)));
        self.by_name = by_name;
    }

    /// Memory the entry holds, its own size included.
    pub fn mem_bytes(&self) -> usize {
        std::mem::size_of::<Entry>()
            + self.buf.capacity()
            + self.headers.capacity() * std::mem::size_of::<(u32, u32, u32, u32)>()
            + self.by_name.capacity() * std::mem::size_of::<u32>()
    }

    /// Empties the entry and lets each of its buffers keep at most about `bytes`.
    pub fn shrink(&mut self, bytes: usize) {
        self.reset();
        self.buf.shrink_to(bytes);
        self.headers
            .shrink_to(bytes / std::mem::size_of::<(u32, u32, u32, u32)>());
        self.by_name.shrink_to(bytes / std::mem::size_of::<u32>());
    }

    pub fn method_str(&self) -> &[u8] {
        self.slice(self.method)
    }

    pub fn target_str(&self) -> &[u8] {
        self.slice(self.target)
    }
}

impl RequestView for Entry {
    fn method(&self) -> &[u8] {
        self.slice(self.method)
    }
    fn target(&self) -> &[u8] {
        self.slice(self.target)
    }
    fn peer(&self) -> Option<IpAddr> {
        Some(self.peer)
    }
    fn header_nth(&self, lowercase_name: &[u8], nth: usize) -> Option<&[u8]> {
        let first = self
            .by_name
            .partition_point(|&i| self.header_name(i) < lowercase_name);
        let i = *self.by_name.get(first.checked_add(nth)?)?;
        let h = self.headers[i as usize];
        (self.slice((h.0, h.1)) == lowercase_name).then(|| self.slice((h.2, h.3)))
    }
    fn for_each_header<'s>(&'s self, f: &mut dyn FnMut(&'s [u8], &'s [u8])) -> bool {
        for h in &self.headers {
            f(self.slice((h.0, h.1)), self.slice((h.2, h.3)));
        }
        true
    }
}

/// Why a line was not a request.
pub type Malformed = &'static str;

/// A log format.
pub enum LogFormat {
    Nginx(NginxFormat),
    Caddy(CaddyFormat),
}

impl LogFormat {
    /// `combined`, `caddy-json` (or `caddy`/`json`), or an nginx `log_format` string.
    pub fn from_spec(spec: &str) -> Result<LogFormat, String> {
        match spec {
            "combined" => Ok(LogFormat::Nginx(NginxFormat::compile(COMBINED)?)),
            "caddy-json" | "caddy" | "json" => Ok(LogFormat::Caddy(CaddyFormat::default())),
            s if s.contains('$') => Ok(LogFormat::Nginx(NginxFormat::compile(s)?)),
            s => Err(format!(
                "unknown format {s:?}: use combined, caddy-json or an nginx log_format string \
                 (with $variables)"
            )),
        }
    }

    /// Parses `line` into `e` (whose buffers are reused).
    pub fn parse(&self, line: &[u8], e: &mut Entry) -> Result<(), Malformed> {
        e.reset();
        match self {
            LogFormat::Nginx(f) => f.parse(line, e)?,
            LogFormat::Caddy(f) => f.parse(line, e)?,
        }
        e.index_headers();
        Ok(())
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Var {
    RemoteAddr,
    TimeLocal,
    TimeIso8601,
    Msec,
    Request,
    RequestMethod,
    RequestUri,
    Uri,
    Args,
    RequestTime,
    Status,
    /// `$weir_action`, `$weir_limit`: the decision the host logged.
    WeirAction,
    WeirLimit,
    /// `$http_NAME`: header name, lowercase, `_` → `-`.
    Http(Box<[u8]>),
    /// `$cookie_NAME`: cookie name as written.
    Cookie(Box<[u8]>),
    /// Anything else ($body_bytes_sent, $remote_user, $upstream_*, …): skipped.
    Other,
}

/// A compiled nginx `log_format`: literals between variables.
pub struct NginxFormat {
    /// `literals[0]` precedes the first variable; `literals[i + 1]` follows variable `i`.
    literals: Vec<Vec<u8>>,
    finders: Vec<memmem::Finder<'static>>,
    vars: Vec<Var>,
}

impl NginxFormat {
    pub fn compile(fmt: &str) -> Result<NginxFormat, String> {
        let b = fmt.as_bytes();
        let mut literals = vec![Vec::new()];
        let mut vars = Vec::new();
        let mut i = 0;
        while i < b.len() {
            if b[i] != b'$' {
                literals.last_mut().unwrap().push(b[i]);
                i += 1;
                continue;
            }
            let (name, next) = if b.get(i + 1) == Some(&b'{') {
                let end = b[i + 2..]
                    .iter()
                    .position(|&c| c == b'}')
                    .ok_or("unterminated ${ in log format")?;
                (&fmt[i + 2..i + 2 + end], i + 3 + end)
            } else {
                let n = b[i + 1..]
                    .iter()
                    .take_while(|c| c.is_ascii_alphanumeric() || **c == b'_')
                    .count();
                (&fmt[i + 1..i + 1 + n], i + 1 + n)
            };
            if name.is_empty() {
                return Err(format!("`$` without a variable name at byte {i}"));
            }
            if !vars.is_empty() && literals.last().unwrap().is_empty() {
                return Err(format!(
                    "variables must be separated by some text; ${name} directly follows another"
                ));
            }
            vars.push(Var::from_name(name));
            literals.push(Vec::new());
            i = next;
        }
        if vars.is_empty() {
            return Err("log format has no $variables".into());
        }
        let has = |v: &Var| vars.contains(v);
        if !(has(&Var::TimeLocal) || has(&Var::TimeIso8601) || has(&Var::Msec)) {
            return Err("log format needs a time: $time_local, $time_iso8601 or $msec".into());
        }
        if !has(&Var::RemoteAddr) {
            return Err("log format needs $remote_addr".into());
        }
        if !(has(&Var::Request) || has(&Var::RequestUri) || has(&Var::Uri)) {
            return Err("log format needs the target: $request, $request_uri or $uri".into());
        }
        let finders = literals
            .iter()
            .map(|l| memmem::Finder::new(l).into_owned())
            .collect();
        Ok(NginxFormat {
            literals,
            finders,
            vars,
        })
    }

    /// Whether lines record request header `lname` (lowercase): `$http_NAME`.
    pub fn logs_header(&self, lname: &[u8]) -> bool {
        self.vars
            .iter()
            .any(|v| matches!(v, Var::Http(h) if &h[..] == lname))
    }

    /// Whether lines record cookie `name`: `$cookie_NAME`, or all of them in `$http_cookie`.
    pub fn logs_cookie(&self, name: &[u8]) -> bool {
        self.logs_header(b"cookie")
            || self
                .vars
                .iter()
                .any(|v| matches!(v, Var::Cookie(c) if &c[..] == name))
    }

    fn parse(&self, line: &[u8], e: &mut Entry) -> Result<(), Malformed> {
        if !line.starts_with(&self.literals[0]) {
            return Err("does not start like the log format");
        }
        e.buf.extend_from_slice(line);
        let mut pos = self.literals[0].len();
        let mut request = None;
        let mut method = None;
        let mut uri = None;
        let mut request_uri = None;
        let mut args = None;
        let mut time: Option<(i64, bool)> = None;
        // $cookie_NAME values: (variable index, value range), joined into one Cookie header.
        let mut cookies = [(0usize, 0u32, 0u32); 16];
        let mut ncookies = 0;
        let mut peer = None;
        let last = self.vars.len() - 1;
        for (i, var) in self.vars.iter().enumerate() {
            let lit = &self.literals[i + 1];
            let end = if lit.is_empty() {
                // Only the last variable can be followed by nothing: the rest of the line.
                line.len()
            } else {
                match self.finders[i + 1].find(&line[pos..]) {
                    Some(k) => pos + k,
                    None if i == last && lit == b"\"" => return Err("unterminated quoted field"),
                    None => return Err("line does not match the log format"),
                }
            };
            let v = &line[pos..end];
            let r = (pos as u32, end as u32);
            pos = end + lit.len();
            match var {
                Var::RemoteAddr => peer = Some(parse_ip(v).ok_or("bad $remote_addr")?),
                Var::TimeLocal => {
                    if time.is_none() {
                        time = Some((timefmt::parse_time_local(v).ok_or("bad $time_local")?, true));
                    }
                }
                Var::TimeIso8601 => {
                    if time.is_none() {
                        time = Some(timefmt::parse_iso8601(v).ok_or("bad $time_iso8601")?);
                    }
                }
                Var::Msec => {
                    time = Some((timefmt::parse_unix_seconds(v).ok_or("bad $msec")?, false))
                }
                Var::Request => request = Some(r),
                Var::RequestMethod => method = Some(r),
                Var::RequestUri => request_uri = Some(r),
                Var::Uri => uri = Some(r),
                Var::Args => args = Some(r),
                Var::RequestTime => {
                    e.duration_ns = timefmt::parse_decimal_seconds(v).map(|n| n as u64)
                }
                Var::Http(name) => {
                    if v != b"-" {
                        let n = e.push(name);
                        e.add_header(n, r);
                    }
                }
                Var::Cookie(_) => {
                    if v != b"-" && ncookies < cookies.len() {
                        cookies[ncookies] = (i, r.0, r.1);
                        ncookies += 1;
                    }
                }
                Var::Status => e.status = std::str::from_utf8(v).ok().and_then(|s| s.parse().ok()),
                Var::WeirAction => e.logged_action = logged_action(v),
                Var::WeirLimit => e.set_logged_limit(r),
                Var::Other => {}
            }
        }
        if ncookies > 0 {
            // One synthesized `Cookie: a=1; b=2` header.
            let start = e.buf.len();
            for (k, &(vi, s, t)) in cookies[..ncookies].iter().enumerate() {
                if k > 0 {
                    e.buf.extend_from_slice(b"; ");
                }
                if let Var::Cookie(name) = &self.vars[vi] {
                    e.buf.extend_from_slice(name);
                }
                e.buf.push(b'=');
                e.buf.extend_from_within(s as usize..t as usize);
            }
            let end = e.buf.len();
            let n = e.push(b"cookie");
            e.add_header(n, (start as u32, end as u32));
        }
        let (ts, whole) = time.ok_or("no time")?;
        e.ts_ns = ts;
        e.whole_second = whole;
        e.peer = peer.ok_or("no $remote_addr")?;
        if let Some(r) = request {
            let v = &line[r.0 as usize..r.1 as usize];
            if v == b"-" || v.is_empty() {
                return Err("no request line (\"-\")");
            }
            let sp = memchr::memchr(b' ', v).ok_or("request line without a target")?;
            let rest = &v[sp + 1..];
            let tlen = memchr::memrchr(b' ', rest).unwrap_or(rest.len());
            if tlen == 0 {
                return Err("request line without a target");
            }
            e.method = (r.0, r.0 + sp as u32);
            let ts = r.0 + sp as u32 + 1;
            e.target = (ts, ts + tlen as u32);
        }
        if let Some(m) = method {
            e.method = m;
        }
        if e.method.0 == e.method.1 {
            // No method in the format: assume GET.
            e.method = e.push(b"GET");
        }
        if let Some(t) = request_uri {
            e.target = t;
        } else if e.target.0 == e.target.1 {
            let u = uri.ok_or("no request target")?;
            // $uri (already decoded by nginx) + ?$args: re-assembled in the buffer.
            let start = e.buf.len() as u32;
            e.buf.extend_from_within(u.0 as usize..u.1 as usize);
            if let Some(a) = args {
                if a.1 > a.0 && &line[a.0 as usize..a.1 as usize] != b"-" {
                    e.buf.push(b'?');
                    e.buf.extend_from_within(a.0 as usize..a.1 as usize);
                }
            }
            e.target = (start, e.buf.len() as u32);
        }
        let t = e.target_str();
        if t.is_empty() || t == b"-" {
            return Err("no request target");
        }
        Ok(())
    }
}

impl Var {
    fn from_name(name: &str) -> Var {
        match name {
            "remote_addr" => Var::RemoteAddr,
            "time_local" => Var::TimeLocal,
            "time_iso8601" => Var::TimeIso8601,
            "msec" => Var::Msec,
            "request" => Var::Request,
            "request_method" => Var::RequestMethod,
            "request_uri" => Var::RequestUri,
            "uri" | "document_uri" => Var::Uri,
            "args" | "query_string" => Var::Args,
            "request_time" => Var::RequestTime,
            "status" => Var::Status,
            "weir_action" => Var::WeirAction,
            "weir_limit" => Var::WeirLimit,
            _ => {
                if let Some(h) = name.strip_prefix("http_") {
                    Var::Http(
                        h.bytes()
                            .map(|c| match c {
                                b'_' => b'-',
                                c => c.to_ascii_lowercase(),
                            })
                            .collect(),
                    )
                } else if let Some(c) = name.strip_prefix("cookie_") {
                    Var::Cookie(c.as_bytes().into())
                } else {
                    Var::Other
                }
            }
        }
    }
}

/// A logged `$weir_action` word; `-`, empty or unknown: none.
fn logged_action(v: &[u8]) -> Option<LogAction> {
    LogAction::parse(std::str::from_utf8(v).ok()?)
}

/// Parses an address; tolerates `[v6]`, and `v4:port`.
pub fn parse_ip(v: &[u8]) -> Option<IpAddr> {
    let s = std::str::from_utf8(v).ok()?;
    if let Ok(ip) = s.parse() {
        return Some(ip);
    }
    if let Some(rest) = s.strip_prefix('[') {
        return rest[..rest.find(']')?].parse().ok();
    }
    let (h, _) = s.rsplit_once(':')?;
    h.parse::<std::net::Ipv4Addr>().ok().map(IpAddr::V4)
}

/// Caddy's JSON access log (`http.log.access` logger): one JSON object per line.
#[derive(Default)]
pub struct CaddyFormat {
    /// Use `request.client_ip` (already resolved by Caddy's trusted_proxies) as the peer instead
    /// of `request.remote_ip`.
    pub use_client_ip: bool,
}

#[derive(serde::Deserialize)]
struct CaddyLine<'a> {
    #[serde(borrow)]
    ts: Option<CaddyTs<'a>>,
    #[serde(borrow)]
    request: Option<CaddyRequest<'a>>,
    duration: Option<f64>,
    status: Option<u16>,
    /// log_append fields of `{http.weir.action}` and `{http.weir.limit}` (docs/CADDY.md).
    #[serde(borrow)]
    weir_action: Option<Cow<'a, str>>,
    #[serde(borrow)]
    weir_limit: Option<Cow<'a, str>>,
}

#[derive(serde::Deserialize)]
#[serde(untagged)]
enum CaddyTs<'a> {
    Num(f64),
    Text(#[serde(borrow)] Cow<'a, str>),
}

#[derive(serde::Deserialize)]
struct CaddyRequest<'a> {
    #[serde(borrow)]
    remote_ip: Option<Cow<'a, str>>,
    #[serde(borrow)]
    client_ip: Option<Cow<'a, str>>,
    #[serde(borrow)]
    remote_addr: Option<Cow<'a, str>>,
    #[serde(borrow)]
    method: Option<Cow<'a, str>>,
    #[serde(borrow)]
    uri: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    headers: BTreeMap<Cow<'a, str>, Vec<Cow<'a, str>>>,
}

impl CaddyFormat {
    fn parse(&self, line: &[u8], e: &mut Entry) -> Result<(), Malformed> {
        let l: CaddyLine = serde_json::from_slice(line).map_err(|_| "not a JSON object")?;
        let r = l
            .request
            .ok_or("no \"request\" (not an access log entry)")?;
        let ts = match l.ts.ok_or("no \"ts\"")? {
            CaddyTs::Num(f) => timefmt::unix_seconds_f64(f),
            CaddyTs::Text(t) => timefmt::parse_iso8601(t.as_bytes())
                .map(|x| x.0)
                .or_else(|| timefmt::parse_unix_seconds(t.as_bytes())),
        }
        .ok_or("bad \"ts\"")?;
        e.ts_ns = ts;
        let ip = if self.use_client_ip {
            r.client_ip.as_deref().or(r.remote_ip.as_deref())
        } else {
            r.remote_ip.as_deref().or(r.client_ip.as_deref())
        };
        e.peer = match ip {
            Some(ip) => parse_ip(ip.as_bytes()),
            None => r
                .remote_addr
                .as_deref()
                .and_then(|a| parse_ip(a.as_bytes())),
        }
        .ok_or("no usable request.remote_ip / client_ip")?;
        e.method = e.push(r.method.as_deref().unwrap_or("GET").as_bytes());
        e.target = e.push(r.uri.as_deref().ok_or("no request.uri")?.as_bytes());
        for (name, values) in &r.headers {
            for v in values {
                let n = e.push_lower(name.as_bytes());
                let v = e.push(v.as_bytes());
                e.add_header(n, v);
            }
        }
        e.logged_action = l.weir_action.and_then(|a| logged_action(a.as_bytes()));
        if let Some(lim) = l.weir_limit {
            let r = e.push(lim.as_bytes());
            e.set_logged_limit(r);
        }
        e.status = l.status;
        e.duration_ns = l
            .duration
            .filter(|d| d.is_finite() && *d >= 0.0)
            .map(|d| (d * 1e9) as u64);
        Ok(())
    }
}

#[cfg(test)]
mod tests;
