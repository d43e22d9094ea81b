//! `weir check`: compile policies (errors as `file:line:col: error: …`) and warn about known
//! pitfalls (`file:line:col: warning: …`).
//!
//! The policy format cannot key or match on the raw request target: every path test and the
//! `path` key part use the normalized path (nginx `$uri`, without the query), and query tests
//! decode each argument. So the classic "limit keyed on $request_uri, defeated by `?x=1`"
//! mistake is impossible; what remains possible, and is warned about here:
//!
//! * a path test containing a query string (`path = "/index.php?title=…"`, `path_regex =
//!   "\\?v="`): it never matches a real query;
//! * an `ip` key with `ipv6_prefix = 128`: one IPv6 client owns a /64 and gets a fresh bucket
//!   per address;
//! * a `global` key whose class matches health-check paths that no exemption covers: a busy
//!   bucket rejects the load balancer's probes and the backends get taken out of rotation;
//! * static-asset exemptions that clients can trigger anywhere: on a query argument or header
//!   alone (`?v=1` appended to any URL skips every limit), or on the extension alone
//!   (`*.css` also matches `/index.php/x.css` and page titles ending in `.css`);
//! * `burst = 0` on a gcra limit whose classes are not API-only: browsers send bursts.

use std::collections::HashMap;
use std::ops::Range;

use toml::de::{DeTable, DeValue};
use toml::Spanned;
use weir::policy::config::{Algorithm, CompiledPolicy, Lane, LineIndex};
use weir::policy::key::KeyPart;
use weir::policy::OwnedRequest;

/// One message about a file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diag {
    pub line: usize,
    pub column: usize,
    pub warning: bool,
    pub message: String,
}

impl Diag {
    pub fn render(&self, file: &str) -> String {
        let level = if self.warning { "warning" } else { "error" };
        if self.line == 0 {
            format!("{file}: {level}: {}", self.message)
        } else {
            format!(
                "{file}:{}:{}: {level}: {}",
                self.line, self.column, self.message
            )
        }
    }
}

/// [`check_source`] for a file's bytes: text that is not UTF-8 is an error at its first bad
/// byte.
pub fn check_bytes(src: &[u8], file: &str) -> Vec<Diag> {
    match weir::policy::config::policy_text(src, Some(file)) {
        Ok(text) => check_source(text, file),
        Err(e) => vec![Diag {
            line: e.line,
            column: e.column,
            warning: false,
            message: e.message,
        }],
    }
}

/// Errors (if any) and warnings for one policy source, in file order.
pub fn check_source(src: &str, file: &str) -> Vec<Diag> {
    match weir::policy::config::check_policy(src, Some(file)) {
        Err(errs) => errs
            .into_iter()
            .map(|e| Diag {
                line: e.line,
                column: e.column,
                warning: false,
                message: e.message,
            })
            .collect(),
        Ok(policy) => {
            let mut w = lint(src, &policy);
            w.sort_by_key(|(o, _)| *o);
            let lines = LineIndex::new(src);
            w.into_iter()
                .map(|(o, message)| {
                    let (line, column) = lines.line_col(o);
                    Diag {
                        line,
                        column,
                        warning: true,
                        message,
                    }
                })
                .collect()
        }
    }
}

type V<'a> = Spanned<DeValue<'a>>;

fn get<'a, 'i>(t: &'a DeTable<'i>, key: &str) -> Option<&'a V<'i>> {
    t.iter().find(|(k, _)| k.get_ref() == key).map(|(_, v)| v)
}

/// String values of a string-or-list field with their spans.
fn strings<'a>(v: &'a V<'_>) -> Vec<(&'a str, Range<usize>)> {
    match v.get_ref() {
        DeValue::String(s) => vec![(s.as_ref(), v.span())],
        DeValue::Array(a) => a
            .iter()
            .filter_map(|x| x.get_ref().as_str().map(|s| (s, x.span())))
            .collect(),
        _ => vec![],
    }
}

/// `(section, class name, shape table, shape span)` for every shape of every class and
/// exemption.
fn shapes<'a, 'i>(
    root: &'a DeTable<'i>,
) -> Vec<(&'static str, &'a str, &'a DeTable<'i>, Range<usize>)> {
    let mut out = vec![];
    for section in ["classes", "exempt"] {
        let Some(DeValue::Table(t)) = get(root, section).map(|v| v.get_ref()) else {
            continue;
        };
        for (name, body) in t {
            let Some(body) = body.get_ref().as_table() else {
                continue;
            };
            let Some(m) = get(body, "match") else {
                continue;
            };
            if let Some(a) = m.get_ref().as_array() {
                for s in a {
                    if let Some(st) = s.get_ref().as_table() {
                        out.push((section, name.get_ref().as_ref(), st, s.span()));
                    }
                }
            }
        }
    }
    out
}

/// The shape fields that test the path.
const PATH_FIELDS: [&str; 5] = [
    "path",
    "path_prefix",
    "path_glob",
    "path_iglob",
    "path_regex",
];

const STATIC_EXT: &[&str] = &[
    "css", "js", "mjs", "png", "jpg", "jpeg", "gif", "svg", "ico", "webp", "avif", "woff", "woff2",
    "ttf", "eot", "map",
];

fn looks_like_query(s: &str, literal_q: &[&str]) -> bool {
    if literal_q.iter().any(|q| s.contains(q)) {
        return true;
    }
    // `?name=` (a quantifier or one-byte wildcard would rarely be followed by `name=`).
    let b = s.as_bytes();
    b.iter().enumerate().any(|(i, &c)| {
        c == b'?' && i > 0 && !matches!(b[i - 1], b'(' | b'*' | b'+' | b'?' | b'}') && {
            let rest = &b[i + 1..];
            let n = rest
                .iter()
                .take_while(|c| c.is_ascii_alphanumeric() || **c == b'_' || **c == b'-')
                .count();
            n > 0 && rest.get(n) == Some(&b'=')
        }
    })
}

fn lint(src: &str, policy: &CompiledPolicy) -> Vec<(usize, String)> {
    let mut w: Vec<(usize, String)> = vec![];
    let Ok(root) = DeTable::parse(src) else {
        return w;
    };
    let root = root.get_ref();
    let shapes = shapes(root);

    // 1. Query strings inside path tests.
    for (_, _, shape, _) in &shapes {
        for field in PATH_FIELDS {
            let Some(v) = get(shape, field) else { continue };
            for (s, span) in strings(v) {
                let hit = match field {
                    "path" | "path_prefix" => s.contains('?'),
                    "path_glob" | "path_iglob" => looks_like_query(s, &["\\?"]),
                    _ => looks_like_query(s, &["\\?", "[?]", "\\x3f", "\\x3F"]),
                };
                if hit {
                    w.push((
                        span.start,
                        format!(
                            "{field} {s:?} contains a query string, but paths are matched \
                             normalized (like nginx $uri) and without the query, so this never \
                             matches `?…`; test arguments with query.NAME = {{ … }}"
                        ),
                    ));
                }
            }
        }
    }

    // 4. Static-asset exemptions a client can trigger anywhere.
    for (section, name, shape, span) in &shapes {
        if *section != "exempt" {
            continue;
        }
        let has = |k: &str| get(shape, k).is_some();
        let pathish = PATH_FIELDS.iter().any(|k| has(k));
        if !pathish && !has("client") && !has("cookie") && (has("query") || has("header")) {
            let what = if has("query") {
                "a query argument"
            } else {
                "a request header"
            };
            w.push((
                span.start,
                format!(
                    "exemption {name:?} matches on {what} only, which the client chooses: \
                     appending it (e.g. `?v=1`) to any URL skips every limit; exempt static \
                     assets by path instead (path_glob = \"/static/*\", \"/*.css\" …)"
                ),
            ));
        }
        for field in ["path_glob", "path_iglob", "path_regex"] {
            let Some(v) = get(shape, field) else { continue };
            for (s, span) in strings(v) {
                if extension_only(field, s) {
                    w.push((
                        span.start,
                        format!(
                            "exemption {name:?}: {field} {s:?} exempts any path ending in a \
                             static extension, including dynamic ones a crawler can choose \
                             (`/index.php/x.css` through PATH_INFO, page titles ending in \
                             `.css`); anchor it to the asset locations (e.g. \"/static/*.css\" \
                             or a regex starting with ^/static/)"
                        ),
                    ));
                }
            }
        }
    }

    // Whether each class has shapes, all of them API-only (for 5.).
    let mut api_classes: HashMap<&str, bool> = HashMap::new();
    for (section, name, shape, _) in &shapes {
        if *section == "classes" {
            let api = api_classes.entry(*name).or_insert(true);
            *api = *api && api_shape(shape);
        }
    }

    let limits_t: Vec<&V<'_>> = match get(root, "limit").map(|v| v.get_ref()) {
        Some(DeValue::Array(a)) => a.iter().collect(),
        _ => vec![],
    };
    for (i, limit) in policy.limits.iter().enumerate() {
        let Some(lt) = limits_t.get(i) else { break };
        let table = lt.get_ref().as_table();
        let field_span = |k: &str| {
            table
                .and_then(|t| get(t, k))
                .map_or(lt.span().start, |v| v.span().start)
        };

        // 2. IPv6 without aggregation.
        for part in limit.key.parts.iter() {
            if let KeyPart::Ip { v6_prefix: 128, .. } = part {
                w.push((
                    field_span("ipv6_prefix"),
                    format!(
                        "limit {:?} keys IPv6 clients by full address (ipv6_prefix = 128): one \
                         client usually holds a whole /64 (2^64 addresses) and can use a fresh \
                         one per request; use 64 (the default), 56 or 48",
                        limit.name
                    ),
                ));
            }
        }

        // 3. Global key that health checks fall into.
        if limit.key.parts.contains(&KeyPart::Global) && !limit.dry_run {
            let unexempt: Vec<&str> = HEALTH_PATHS
                .iter()
                .copied()
                .filter(|p| {
                    let req = OwnedRequest::new("GET", p, "10.0.0.2".parse().expect("ip"));
                    let prepared = policy.prepare(&req, p.as_bytes(), b"");
                    let matched = limit.classes.is_empty()
                        || limit
                            .classes
                            .iter()
                            .any(|&c| policy.classes[c].matches(&prepared));
                    // A critical class is counted but never refused (unless the limit puts
                    // every request in a lane of its own).
                    let critical = limit.lane.is_none_or(|l| l == Lane::Critical)
                        && (policy.classes.iter().zip(&policy.class_lanes))
                            .any(|(c, l)| *l == Some(Lane::Critical) && c.matches(&prepared));
                    matched && !critical && policy.exemption(&prepared).is_none()
                })
                .collect();
            // One probe path looked after (exempt or critical) shows the operator has chosen
            // theirs; warn when none is.
            if unexempt.len() == HEALTH_PATHS.len() {
                w.push((
                    field_span("key"),
                    format!(
                        "limit {:?} counts everyone in one global bucket and health checks \
                         ({}) are neither critical nor exempt: when the bucket runs dry the load \
                         balancer's probes are rejected too and it takes the backends out of \
                         rotation; add [classes.health] match = [{{ path = [\"/healthz\"] }}] \
                         with lane = \"critical\" (counted, never refused) or an [exempt.health]",
                        limit.name,
                        unexempt.join(", ")
                    ),
                ));
            }
        }

        // 5. burst 0 on pages browsers load.
        if let Algorithm::Gcra { rate } = policy.zones[limit.zone].algorithm {
            if limit.burst == 0 && !limit.dry_run {
                let api_only = !limit.classes.is_empty()
                    && limit.classes.iter().all(|&c| {
                        let cname = policy.classes[c].name.as_str();
                        api_classes.get(cname).copied().unwrap_or(false)
                    });
                if !api_only {
                    w.push((
                        field_span("burst"),
                        format!(
                            "limit {:?} has burst 0 (one request per {} ms) on classes that are \
                             not API-only: a browser loads a page with its assets, retries and \
                             prefetches in bursts, so real visitors get delayed or rejected; give \
                             it a burst (e.g. burst = 10, nodelay = true) or restrict it to API \
                             classes",
                            limit.name,
                            rate.interval_ns().unwrap_or(0) / 1_000_000
                        ),
                    ));
                }
            }
        }
    }
    w
}

const HEALTH_PATHS: &[&str] = &[
    "/healthz",
    "/health",
    "/readyz",
    "/livez",
    "/ping",
    "/status",
    "/healthcheck",
    "/health-check",
];

fn extension_only(field: &str, s: &str) -> bool {
    if field != "path_regex" {
        // "*.css", "*.{…}" style: a leading star right before the extension.
        if let Some(rest) = s.strip_prefix("*.") {
            return STATIC_EXT.contains(&rest.to_ascii_lowercase().as_str());
        }
        return false;
    }
    // A regex for an extension that is not anchored to a directory at the start.
    let lower = s.to_ascii_lowercase();
    let mentions_ext = STATIC_EXT
        .iter()
        .any(|e| lower.contains(&format!("\\.{e}")) || lower.contains(&format!("|{e}")));
    mentions_ext && !s.starts_with("^/") && !s.starts_with("(?i)^/")
}

/// A shape only API clients hit: non-GET methods, an API credential header, or API paths.
fn api_shape(t: &DeTable<'_>) -> bool {
    if let Some(m) = get(t, "method") {
        let ms = strings(m);
        if !ms.is_empty() && ms.iter().all(|(m, _)| *m != "GET" && *m != "HEAD") {
            return true;
        }
    }
    if let Some(DeValue::Table(h)) = get(t, "header").map(|v| v.get_ref()) {
        if h.iter().any(|(k, _)| {
            matches!(
                k.get_ref().to_ascii_lowercase().as_str(),
                "authorization" | "x-api-key" | "api-key"
            )
        }) {
            return true;
        }
    }
    let mut paths = vec![];
    for f in PATH_FIELDS {
        if let Some(v) = get(t, f) {
            paths.extend(strings(v).into_iter().map(|(s, _)| s.to_ascii_lowercase()));
        }
    }
    !paths.is_empty()
        && paths.iter().all(|p| {
            p.contains("/api") || p.contains("api.php") || p.contains("graphql") || {
                let b = p.as_bytes();
                b.windows(3)
                    .any(|w| w[0] == b'/' && w[1] == b'v' && w[2].is_ascii_digit())
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn warnings(src: &str) -> Vec<String> {
        check_source(src, "p.toml")
            .into_iter()
            .map(|d| {
                assert!(d.warning, "{}", d.render("p.toml"));
                d.render("p.toml")
            })
            .collect()
    }

    const ZONES: &str = "[zones.z]\nsize = \"1m\"\nalgorithm = \"gcra\"\nrate = \"10r/s\"\n";

    #[test]
    fn clean_policy_has_no_warnings() {
        let src = format!(
            "{ZONES}[classes.api]\nmatch = [{{ path_prefix = \"/api/\" }}]\n\
             [exempt.static]\nmatch = [{{ path_glob = \"/static/*\" }}]\n\
             [[limit]]\nclass = \"*\"\nzone = \"z\"\nburst = 20\n\
             [[limit]]\nclass = \"api\"\nzone = \"z\"\nkey = [\"ip\", \"path\"]\n"
        );
        assert_eq!(warnings(&src), Vec::<String>::new());
    }

    #[test]
    fn each_pitfall_is_warned_with_its_position() {
        let src = format!(
            "{ZONES}[classes.tools]\nmatch = [{{ path_regex = \"^/index\\\\.php\\\\?title=Special:\" }}]\n\
             [exempt.static]\nmatch = [{{ query.v = {{ present = true }} }}, {{ path_glob = \"*.css\" }}]\n\
             [[limit]]\nclass = \"*\"\nzone = \"z\"\nipv6_prefix = 128\nburst = 5\n\
             [[limit]]\nname = \"site\"\nclass = \"*\"\nzone = \"z\"\nkey = \"global\"\nburst = 50\n\
             [[limit]]\nclass = \"tools\"\nzone = \"z\"\nkey = \"global\"\n"
        );
        let w = warnings(&src);
        assert_eq!(w.len(), 6, "{w:#?}");
        assert!(
            w[0].starts_with("p.toml:6:25: warning: path_regex"),
            "{}",
            w[0]
        );
        assert!(
            w[1].starts_with(
                "p.toml:8:10: warning: exemption \"static\" matches on a query argument only"
            ),
            "{}",
            w[1]
        );
        assert!(
            w[2].starts_with("p.toml:8:58: warning: exemption \"static\": path_glob \"*.css\""),
            "{}",
            w[2]
        );
        assert!(
            w[3].starts_with("p.toml:12:15: warning: limit \"*/z\" keys IPv6"),
            "{}",
            w[3]
        );
        // The global limit on "*" catches /healthz; the one on "tools" does not (no warning),
        // but its burst 0 on a non-API class does (no burst field: the [[limit]] header).
        assert!(w[4].starts_with("p.toml:18:7: warning: limit \"site\" counts everyone in one global bucket and health checks (/healthz, /health,"), "{}", w[4]);
        assert!(
            w[5].starts_with("p.toml:20:1: warning: limit \"tools/z\" has burst 0"),
            "{}",
            w[5]
        );
    }

    #[test]
    fn case_insensitive_globs_are_linted_as_globs() {
        let src = format!(
            "{ZONES}[exempt.static]\nmatch = [{{ path_iglob = [\"*.CSS\", \"/static/*.js\"] }}]\n\
             [classes.t]\nmatch = [{{ path_iglob = \"/index.php?title=*\" }}]\n\
             [[limit]]\nclass = \"*\"\nzone = \"z\"\nburst = 20\n"
        );
        let w = warnings(&src);
        assert_eq!(w.len(), 2, "{w:#?}");
        assert!(
            w[0].contains("path_iglob \"*.CSS\" exempts any path"),
            "{}",
            w[0]
        );
        assert!(
            w[1].contains("path_iglob \"/index.php?title=*\" contains a query"),
            "{}",
            w[1]
        );
    }

    #[test]
    fn health_exemption_and_api_classes_silence_warnings() {
        let src = format!(
            "{ZONES}[classes.api]\nmatch = [{{ path_prefix = \"/api/\" }}, {{ method = \"POST\" }}]\n\
             [exempt.health]\nmatch = [{{ path = [\"/healthz\", \"/health\", \"/readyz\", \"/livez\", \"/ping\", \"/status\", \"/healthcheck\", \"/health-check\"] }}]\n\
             [[limit]]\nclass = \"*\"\nzone = \"z\"\nkey = \"global\"\nburst = 100\n\
             [[limit]]\nclass = \"api\"\nzone = \"z\"\n"
        );
        assert_eq!(warnings(&src), Vec::<String>::new());
    }

    #[test]
    fn errors_carry_positions() {
        let d = check_source(
            "[zones.z]\nsize = \"1m\"\nalgorithm = \"gcra\"\nrate = \"1r/w\"\n\
             [[limit]]\nclass = \"*\"\nzone = \"z\"\n",
            "p.toml",
        );
        assert_eq!(d.len(), 1);
        assert!(!d[0].warning);
        assert!(d[0].render("p.toml").starts_with("p.toml:4:"), "{:?}", d[0]);
    }
}
