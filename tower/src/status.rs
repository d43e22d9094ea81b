//! The engine's counters over HTTP: [`StatusService`] answers the route the application mounts
//! it on with the Prometheus text, or the JSON status (docs/METRICS.md) for `?format=json`.

use std::convert::Infallible;
use std::future::{ready, Ready};
use std::sync::Arc;
use std::task::{Context, Poll};

use http::header::{HeaderName, HeaderValue, ALLOW, CONTENT_SECURITY_POLICY, CONTENT_TYPE};
use http::{Method, Request, Response, StatusCode};
use tower_service::Service;
use weir::policy::config::LogLevel;
use weir::policy::keyops;
use weir::policy::metrics::{page, Format};
use weir::policy::Engine;

/// A tower service that serves an engine's counters, as nginx's `weir_status` does:
///
/// | request | response |
/// |---|---|
/// | `GET` (or `HEAD`), no `format` or `?format=prometheus` | 200, Prometheus text (format 0.0.4) |
/// | `GET ?format=json` | 200, `application/json`: the JSON status (schema version 2: counters, per-second history, top rejected keys and clients) |
/// | `GET ?format=html` | 200, `text/html`: the status page, which reads `?format=json` every second (docs/DASHBOARD.md) |
/// | another `format` | 400 |
/// | another method | 405 with `Allow: GET, HEAD` |
/// | `GET ?limit=NAME&key=TEXT` | a key operation: that key's state in that limit (JSON) |
/// | `POST ?limit=NAME&key=TEXT&action=reset` (or `unban`) | with [`write(true)`](StatusService::write) only (403 otherwise): forgets the key's state (lifts its ban), logs one audit line (`tracing`, at the limit's `log_level`, fields `limit`, `key`, `client`), answers the state after the change |
///
/// The service is read-only unless built with [`write(true)`](StatusService::write). Key
/// changes (docs/METRICS.md, "Key operations") change limits at run time: serve a writing
/// service on a listener only operators reach (loopback, an internal address), never on a
/// route clients or a reverse proxy's clients reach. Even there a change must carry the
/// `Weir-Key-Action` header and must not come from another site (`Origin`,
/// `Sec-Fetch-Site`, a form's content type), so that a browser cannot be made to send one.
/// Other query parameters are ignored.
///
/// ```no_run
/// use std::sync::Arc;
/// use axum::{routing::get, Router};
/// use weir::policy::{load_policy, Engine};
/// use weir_tower::{StatusService, WeirLayer};
///
/// # async fn app() -> Result<(), Box<dyn std::error::Error>> {
/// let engine = Arc::new(Engine::new(load_policy("policy.toml".as_ref())?)?);
/// let app: Router = Router::new()
///     .route("/", get(|| async { "hello" }))
///     .layer(WeirLayer::new(engine.clone()))
///     // Mounted after the layer: scraping is not rate limited. Read-only.
///     .route_service("/metrics", StatusService::new(engine.clone()));
/// // Key changes on loopback only, on a listener of their own.
/// let admin: Router =
///     Router::new().route_service("/status", StatusService::new(engine).write(true));
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:9090").await?;
/// tokio::spawn(async move { axum::serve(listener, admin).await });
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct StatusService {
    engine: Arc<Engine>,
    write: bool,
}

impl StatusService {
    /// A read-only status service: counters, the JSON status, key inspection.
    pub fn new(engine: Arc<Engine>) -> StatusService {
        StatusService {
            engine,
            write: false,
        }
    }

    /// Whether key changes (POST reset, unban) are enabled: only on a listener that only
    /// operators reach (see the type's documentation).
    pub fn write(mut self, write: bool) -> StatusService {
        self.write = write;
        self
    }
}

impl<B> Service<Request<B>> for StatusService {
    type Response = Response<String>;
    type Error = Infallible;
    type Future = Ready<Result<Response<String>, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        ready(Ok(status_response(&self.engine, &req, self.write)))
    }
}

/// The response [`StatusService`] gives `req` (`write`: as [`StatusService::write`]), for
/// applications that route it themselves.
pub fn status_response<B>(engine: &Engine, req: &Request<B>, write: bool) -> Response<String> {
    let query = req.uri().query().unwrap_or("");
    if keyops::has_key(query.as_bytes()) {
        return key_response(engine, req, query, write);
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let mut r = plain(StatusCode::METHOD_NOT_ALLOWED, "GET or HEAD only\n");
        r.headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    let format = match format_arg(req.uri().query().unwrap_or("")) {
        None => Format::Prometheus,
        Some(name) => match Format::from_name(name) {
            Some(f) => f,
            None => {
                return plain(
                    StatusCode::BAD_REQUEST,
                    "format: prometheus, json or html\n",
                )
            }
        },
    };
    if format == Format::Html {
        return html_page();
    }
    let mut r = Response::new(engine.snapshot().render(format));
    r.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static(format.content_type()),
    );
    r
}

/// The status page, with its Content-Security-Policy and the page's other headers.
fn html_page() -> Response<String> {
    let p = page::live();
    let mut r = Response::new(p.html.clone());
    let h = r.headers_mut();
    h.insert(
        CONTENT_TYPE,
        HeaderValue::from_static(Format::Html.content_type()),
    );
    if let Ok(csp) = HeaderValue::from_str(&p.csp) {
        h.insert(CONTENT_SECURITY_POLICY, csp);
    }
    for (name, value) in page::HEADERS {
        if let Ok(name) = HeaderName::from_bytes(name.as_bytes()) {
            h.insert(name, HeaderValue::from_static(value));
        }
    }
    r
}

/// A key operation: the engine's answer, and its audit line logged.
fn key_response<B>(
    engine: &Engine,
    req: &Request<B>,
    query: &str,
    write: bool,
) -> Response<String> {
    let headers = req.headers();
    // HTTP/2 has no Host header: the URI's authority is the host.
    let authority = req.uri().authority().map(|a| a.as_str().as_bytes());
    let access = keyops::Access::from_headers(write, |name| {
        let v = headers.get(name).map(HeaderValue::as_bytes);
        if name == "host" {
            return v.or(authority);
        }
        v
    });
    let a = keyops::key_request(
        &[engine],
        req.method().as_str().as_bytes(),
        query.as_bytes(),
        &access,
        weir::clock::monotonic_ns(),
    );
    if let Some(audit) = &a.audit {
        let client = crate::view::peer_of(req, None).map(|ip| ip.to_string());
        log_audit(audit, client.as_deref().unwrap_or("-"));
    }
    let mut r = Response::new(a.body);
    *r.status_mut() = StatusCode::from_u16(a.status).unwrap_or(StatusCode::BAD_REQUEST);
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if a.status == 405 {
        r.headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET, HEAD, POST"));
    }
    r
}

/// Logs an audit line at its level, with the limit, key and client as fields.
fn log_audit(a: &keyops::Audit, client: &str) {
    let (limit, key, line) = (a.limit.as_str(), a.key.as_str(), a.line.as_str());
    match a.level {
        LogLevel::Info | LogLevel::Notice => tracing::info!(limit, key, client, "{line}"),
        LogLevel::Warn => tracing::warn!(limit, key, client, "{line}"),
        LogLevel::Error => tracing::error!(limit, key, client, "{line}"),
    }
}

/// The first `format=` parameter of a query string.
fn format_arg(query: &str) -> Option<&str> {
    query.split('&').find_map(|p| p.strip_prefix("format="))
}

fn plain(status: StatusCode, body: &str) -> Response<String> {
    let mut r = Response::new(body.to_owned());
    *r.status_mut() = status;
    r.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}
