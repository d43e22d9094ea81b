//! The layer's own responses (refusals, 400, 503) and the fields, verdict and permits it adds
//! to the inner service's response.

use http::header::{HeaderName, HeaderValue, CONTENT_TYPE};
use http::{Response, StatusCode};
use weir::policy::{Engine, Outcome};

use crate::body::PermitGuard;
use crate::{Config, Verdict, WeirBody};

/// `RateLimit` / `Retry-After` fields of an outcome.
pub(crate) type Fields = Vec<(HeaderName, HeaderValue)>;

pub(crate) fn fields(engine: &Engine, out: &Outcome) -> Fields {
    let mut v = Fields::new();
    engine.headers(out, |name, value| {
        if let (Ok(n), Ok(val)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) {
            v.push((n, val));
        }
    });
    v
}

pub(crate) fn wants_fields(engine: &Engine, out: &Outcome) -> bool {
    engine.policy().emit_headers && out.quota.is_some()
}

pub(crate) fn reject_response<B>(
    cfg: &Config,
    out: &Outcome,
    verdict: impl FnOnce() -> Verdict,
) -> Response<WeirBody<B>> {
    let status = StatusCode::from_u16(out.status).unwrap_or(StatusCode::TOO_MANY_REQUESTS);
    let mut resp = Response::new(WeirBody::full(
        status.canonical_reason().unwrap_or("Limited"),
    ));
    *resp.status_mut() = status;
    let h = resp.headers_mut();
    h.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    for (n, v) in fields(&cfg.engine, out) {
        h.insert(n, v);
    }
    if cfg.expose_verdict {
        resp.extensions_mut().insert(verdict());
    }
    resp
}

/// A short text answer of the layer's own: the status and its reason phrase.
pub(crate) fn plain<B>(status: StatusCode) -> Response<WeirBody<B>> {
    let mut resp = Response::new(WeirBody::full(status.canonical_reason().unwrap_or("")));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}

/// The answer when weir could not decide and the policy fails closed.
pub(crate) fn unavailable<B>() -> Response<WeirBody<B>> {
    plain(StatusCode::SERVICE_UNAVAILABLE)
}

pub(crate) fn bad_request<B>(cfg: &Config) -> Response<WeirBody<B>> {
    let mut resp = plain(StatusCode::BAD_REQUEST);
    if cfg.expose_verdict {
        resp.extensions_mut().insert(Verdict::bad_target());
    }
    resp
}

/// What a pass carries to its response besides the permits: the `RateLimit` fields and the
/// verdict. Boxed, and absent (no allocation) when there are neither.
pub(crate) struct Extra {
    pub(crate) fields: Option<Fields>,
    pub(crate) verdict: Option<Verdict>,
}

impl Extra {
    pub(crate) fn boxed(fields: Option<Fields>, verdict: Option<Verdict>) -> Option<Box<Extra>> {
        (fields.is_some() || verdict.is_some()).then(|| Box::new(Extra { fields, verdict }))
    }
}

/// Wraps the inner response: its status charges the deferred charges, permits ride on the
/// body, fields and verdict are added.
pub(crate) fn finish<B>(
    resp: Response<B>,
    guard: Option<Box<PermitGuard>>,
    extra: Option<Box<Extra>>,
) -> Response<WeirBody<B>> {
    let guard = guard.and_then(|g| g.answered(resp.status().as_u16()));
    let mut resp = resp.map(|b| WeirBody::inner(b, guard));
    if let Some(extra) = extra {
        let Extra { fields, verdict } = *extra;
        if let Some(fields) = fields {
            let h = resp.headers_mut();
            for (n, v) in fields {
                h.insert(n, v);
            }
        }
        if let Some(v) = verdict {
            resp.extensions_mut().insert(v);
        }
    }
    resp
}
