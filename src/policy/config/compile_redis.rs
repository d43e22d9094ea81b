//! A cluster zone's way to Redis: `redis` (one URL or a list), `redis_mode`,
//! `sentinel_master`, and the TLS files of `rediss://` URLs (docs/CLUSTER.md).

use super::*;
use crate::cluster::{RedisMode, TlsFiles};

/// The settings this module reads, with their spans (errors on a local zone point at them).
pub(super) fn redis_settings(zs: &ZoneSpec) -> [(&'static str, Option<Range<usize>>); 6] {
    let sp = |v: &Option<Spanned<String>>| v.as_ref().map(|v| v.span());
    [
        ("redis", zs.redis.as_ref().map(|v| v.span())),
        ("redis_mode", sp(&zs.redis_mode)),
        ("sentinel_master", sp(&zs.sentinel_master)),
        ("tls_ca_file", sp(&zs.tls_ca_file)),
        ("tls_cert_file", sp(&zs.tls_cert_file)),
        ("tls_key_file", sp(&zs.tls_key_file)),
    ]
}

/// What [`compile_redis`] makes of them.
pub(super) struct RedisTarget {
    pub(super) urls: Vec<String>,
    pub(super) mode: RedisMode,
    pub(super) tls: TlsFiles,
}

/// Checks the URLs, the mode and the TLS files; `None` after reporting errors. `scope` is the
/// span errors about a missing setting point at.
pub(super) fn compile_redis(
    cx: &mut Cx<'_>,
    name: &str,
    zs: &ZoneSpec,
    scope: &Range<usize>,
) -> Option<RedisTarget> {
    let Some(list) = &zs.redis else {
        cx.err(
            scope,
            format!("zone {name:?}: scope = \"cluster\" needs `redis` (e.g. redis = \"redis://127.0.0.1:6379/0\")"),
        );
        return None;
    };
    if !nonempty_list(cx, list, "redis") {
        return None;
    }
    let mut ok = true;
    let mut urls = Vec::new();
    let mut tls_urls = 0;
    let mut unix = false;
    for (url, span) in items(list) {
        use redis::IntoConnectionInfo;
        match url.into_connection_info() {
            Ok(info) => {
                tls_urls += usize::from(matches!(info.addr, redis::ConnectionAddr::TcpTls { .. }));
                unix |= matches!(info.addr, redis::ConnectionAddr::Unix(_));
            }
            Err(e) => {
                cx.err(&span, format!("invalid redis URL {url:?}: {e}"));
                ok = false;
            }
        }
        urls.push(url.to_owned());
    }
    let n = urls.len();
    let mode = match zs
        .redis_mode
        .as_ref()
        .map(|m| (m.get_ref().as_str(), m.span()))
    {
        None | Some(("standalone", _)) if n > 1 => {
            cx.err(
                &list.span(),
                format!("zone {name:?}: {n} redis URLs need redis_mode = \"cluster\" (seed nodes of a Redis Cluster) or \"sentinel\" (Sentinels); a standalone server is one URL"),
            );
            return None;
        }
        None | Some(("standalone", _)) => RedisMode::Standalone,
        Some(("cluster", span)) => {
            if unix {
                cx.err(
                    &span,
                    "redis_mode = \"cluster\" needs redis:// or rediss:// URLs: cluster nodes are reached by TCP",
                );
                ok = false;
            }
            RedisMode::Cluster
        }
        Some(("sentinel", span)) => match &zs.sentinel_master {
            Some(m) if !m.get_ref().is_empty() => RedisMode::Sentinel {
                master: m.get_ref().clone(),
            },
            _ => {
                cx.err(
                    &span,
                    format!("zone {name:?}: redis_mode = \"sentinel\" needs `sentinel_master` (the name in the Sentinels' `sentinel monitor NAME …`)"),
                );
                return None;
            }
        },
        Some((other, span)) => {
            cx.err(
                &span,
                format!("unknown redis_mode {other:?}; expected \"standalone\" (default), \"cluster\" or \"sentinel\""),
            );
            return None;
        }
    };
    if let (Some(m), false) = (
        &zs.sentinel_master,
        matches!(mode, RedisMode::Sentinel { .. }),
    ) {
        cx.err(
            &m.span(),
            "`sentinel_master` applies only with redis_mode = \"sentinel\"",
        );
        ok = false;
    }
    if tls_urls != 0 && tls_urls != n {
        cx.err(
            &list.span(),
            "mix of rediss:// and redis:// URLs; use TLS for all of them or none",
        );
        ok = false;
    }
    let tls = tls_files(cx, zs, tls_urls != 0)?;
    ok.then_some(RedisTarget { urls, mode, tls })
}

/// Reads the PEM files named by `tls_ca_file`, `tls_cert_file` and `tls_key_file` (absolute
/// paths: read when the policy is loaded, so that processes without the right to read them,
/// like nginx workers, still have them): regular files of at most [`files::MAX_PEM_BYTES`].
fn tls_files(cx: &mut Cx<'_>, zs: &ZoneSpec, tls: bool) -> Option<TlsFiles> {
    let mut ok = true;
    let mut read = |cx: &mut Cx<'_>, field: &str, v: &Option<Spanned<String>>| {
        let v = v.as_ref()?;
        let path = v.get_ref();
        if !tls {
            cx.err(
                &v.span(),
                format!("`{field}` needs rediss:// URLs (TLS); the redis URLs are plain redis://"),
            );
            ok = false;
            return None;
        }
        if !Path::new(path).is_absolute() {
            cx.err(
                &v.span(),
                format!("`{field}` must be an absolute path, not {path:?}"),
            );
            ok = false;
            return None;
        }
        match files::read_regular(Path::new(path), files::MAX_PEM_BYTES) {
            Ok(b) if b.windows(11).any(|w| w == b"-----BEGIN ") => Some(b),
            Ok(_) => {
                cx.err(
                    &v.span(),
                    format!("`{field}` {path:?} holds no PEM block (-----BEGIN …)"),
                );
                ok = false;
                None
            }
            Err(e) => {
                cx.err(&v.span(), format!("cannot read `{field}` {path:?}: {e}"));
                ok = false;
                None
            }
        }
    };
    let ca = read(cx, "tls_ca_file", &zs.tls_ca_file);
    let cert = read(cx, "tls_cert_file", &zs.tls_cert_file);
    let key = read(cx, "tls_key_file", &zs.tls_key_file);
    let client = match (cert, key, &zs.tls_cert_file, &zs.tls_key_file) {
        (Some(c), Some(k), _, _) => Some((c, k)),
        (_, _, Some(c), None) => {
            cx.err(
                &c.span(),
                "`tls_cert_file` needs `tls_key_file` (its private key)",
            );
            ok = false;
            None
        }
        (_, _, None, Some(k)) => {
            cx.err(
                &k.span(),
                "`tls_key_file` needs `tls_cert_file` (its certificate)",
            );
            ok = false;
            None
        }
        _ => None,
    };
    ok.then_some(TlsFiles { ca, client })
}
