//! A [tower](https://docs.rs/tower) layer that applies a weir policy to every request of a Rust
//! HTTP service (axum, hyper 1.x, tonic: anything built on `http` 1.x and `tower` 0.5).
//!
//! The layer asks the policy engine ([`weir::policy::Engine`]) for a verdict and applies it:
//!
//! | verdict | what the layer does |
//! |---|---|
//! | pass (or exempt, or no limit matched) | calls the inner service |
//! | delay | sleeps the outcome's wait (tokio timer), then calls the inner service |
//! | reject | answers the limit's status (default 429) with `Retry-After` (and the `RateLimit` fields when the policy enables them), a short text body, without calling the inner service |
//! | queue | waits for a concurrency slot: asks the engine again as soon as a request served through this layer gives its permits back, and otherwise when the engine says (every 10 ms), until a slot is free — then passes — or the limit's `timeout` has passed — then the engine answers the limit's status; if the request's future is dropped meanwhile (client gone), its place in the queue is given back |
//! | bad target | answers 400 (a target nginx would refuse: `/../x`, `%zz`, …; or more values of one header the policy reads than the engine takes) |
//! | a ban started (a limit's `ban`) | the rejection as above; logs `banning key "K" for Ns by weir limit "NAME"` once per ban (`tracing`, at the limit's `log_level`, with `limit` and `key` fields) |
//! | no verdict (a panic inside weir or the clock, caught) | per the policy's `failure_mode`: `open` logs an error (`tracing`) and calls the inner service; `closed` logs it and answers 503 |
//!
//! When the policy enables them (`headers = true`), `RateLimit-Policy` and `RateLimit` are added
//! to passed responses too.
//!
//! **Concurrency permits** (`algorithm = "concurrency"` limits) are held for the whole life of
//! the response *body*, not just until the handler returns: the response body is wrapped in
//! [`WeirBody`], which releases them when the body ends, fails, or is dropped (client
//! disconnected mid-body, the request future dropped, a handler panic caught by
//! `tower_http::catch_panic`). A streaming download therefore counts as in flight until its last
//! byte. However long that is: permits are leases (a policy zone's `lease`, default 120 s),
//! and the first request the layer serves starts a thread (`weir-renew`, no runtime needed)
//! that renews the held ones every quarter lease until the layer and its services are dropped.
//!
//! **The backend's time.** The permits go back with a latency sample
//! ([`Engine::release_sampled`]): the time the inner service's future took, from the call of
//! the inner service until its response (the head) was ready, and the response status. That
//! is the application's time to answer, not the client's time to read the body (which is
//! why it differs from how long the permits are held). It teaches learned limits
//! (`max = "auto"`: the limit follows the backend's latency) and feeds the latency figures of
//! the JSON status (`limits[].capacity`) and of the `weir_concurrency_*` metrics. A queue
//! wait or a delay served by the layer is not part of it. An inner-service error, or a
//! future dropped before the response, gives the permits back without a sample.
//!
//! **Hand-over.** The engine keeps a freed slot for the requests waiting in the limit's
//! queue (a new arrival queues behind them), and a waiter takes it when it asks again. When a
//! permit goes back through a layer, one request waiting for it in that layer (and its clones)
//! is woken at once — the oldest, or the newest once the queue stands — and asks again, so the
//! slot is taken right away; waiters behind other layers or in other processes sharing the
//! zone find it at their next poll (10 ms at most).
//!
//! **Limits with `charge_on_status`** are charged when the inner service's response is produced,
//! with its status (before the body's permits go back); an inner-service error, or a future
//! dropped before the response, charges nothing.
//!
//! # Wiring it into axum
//!
//! ```no_run
//! use std::{net::SocketAddr, sync::Arc};
//! use axum::{routing::get, Router};
//! use weir::policy::{load_policy, Engine};
//! use weir_tower::WeirLayer;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let policy = load_policy("policy.toml".as_ref())?;
//! let engine = Arc::new(Engine::new(policy)?);
//! let app = Router::new()
//!     .route("/", get(|| async { "hello" }))
//!     .layer(WeirLayer::new(engine));
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
//! // `into_make_service_with_connect_info` puts the peer address in each request
//! // (`ConnectInfo<SocketAddr>`), which is what per-IP keys and client matchers use.
//! axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await?;
//! # Ok(()) }
//! ```
//!
//! # Metrics
//!
//! [`StatusService`] serves the engine's counters on a route the application mounts: Prometheus
//! text, or the JSON status with `?format=json` (docs/METRICS.md), and inspects keys. It is
//! read-only: key changes (reset, unban) need [`StatusService::write`], on a listener only
//! operators reach.
//!
//! # The client address
//!
//! The layer gives the engine the address of the directly connected peer; the engine itself
//! resolves `X-Forwarded-For` / `Forwarded` through the policy's trusted proxies. The peer is
//! taken from the first of these request extensions that is present:
//!
//! 1. [`PeerOverride`] — set by your own middleware (tests, or a host behind a trusted socket
//!    that learns the client address some other way, e.g. the PROXY protocol);
//! 2. `axum::extract::ConnectInfo<SocketAddr>` (feature `axum`, on by default) — present when
//!    the app is served with `into_make_service_with_connect_info::<SocketAddr>()`;
//! 3. a plain `std::net::SocketAddr` (what some hyper-based servers insert).
//!
//! **Without any of them** (a service on a unix-domain socket, or served without `ConnectInfo`),
//! or with a [`LocalPeer`] extension, the peer has no IP address: the request counts for the
//! policy's *local client*, as nginx and Caddy count requests on a unix socket. Its forwarding
//! header is believed when the policy trusts `"unix:"` (`trusted_proxies = ["unix:"]`, for a
//! local proxy in front); otherwise all such requests share one per-IP key and match only
//! `client = ["unix:"]` lists. [`WeirLayer::fallback_peer`] gives them an address instead. Over
//! TCP, serve with `ConnectInfo`.
//!
//! # Time
//!
//! The engine runs on `weir::clock::monotonic_ns()` (also used for releases). Tests can inject
//! another clock with [`WeirLayer::with_clock`]; a [`Clock`] may also replace the delay sleep.
//! Delays and queue waits use tokio's timer, so the service must run inside a tokio runtime with
//! time enabled (axum's and hyper-util's servers do); passes and rejections need no runtime.
//!
//! # The verdict in extensions
//!
//! With [`WeirLayer::expose_verdict`] the layer inserts a [`Verdict`] into the request's
//! extensions (for the handler: log dry-run verdicts, the delay served, …) and into the
//! response's (for outer layers: access logs, metrics). Off by default: it costs an allocation.
//!
//! # Access logs
//!
//! A [`Verdict`] carries what nginx's `$weir_action`, `$weir_limit` and `$weir_key` show
//! (docs/NGINX.md): [`Verdict::log_action`] (`pass`, `exempt`, `delay`, `queue`, `reject`,
//! `dry-run-delay`, `dry-run-reject`), [`Verdict::log_limit`] (the deciding limit, also a
//! dry-run one) and [`Verdict::key`] (its key as the engine renders it, `203.0.113.0/24`;
//! rendered only when a limit decided). An outer layer logs them from the response:
//!
//! ```
//! use weir::policy::Engine;
//! use weir_tower::Verdict;
//!
//! fn log_line<B>(engine: &Engine, resp: &http::Response<B>) {
//!     if let Some(v) = resp.extensions().get::<Verdict>() {
//!         let limit = v.log_limit.map_or("-", |l| engine.limit_name(usize::from(l)));
//!         tracing::info!(
//!             status = resp.status().as_u16(),
//!             weir_action = v.log_action.as_str(),
//!             weir_limit = limit,
//!             weir_key = v.key.as_deref().unwrap_or("-"),
//!             "request"
//!         );
//!     }
//! }
//! ```

mod body;
mod renew;
mod response;
mod status;
mod verdict;
mod view;
mod wake;

use std::future::Future;
use std::net::IpAddr;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use http::{Request, Response};
use pin_project_lite::pin_project;
use tower_layer::Layer;
use tower_service::Service;
use weir::policy::config::FailureMode;
pub use weir::policy::engine::LogAction;
use weir::policy::{Action, Engine, Outcome};

pub use body::WeirBody;
use body::{PermitGuard, TicketGuard};
use response::{bad_request, fields, finish, reject_response, unavailable, wants_fields, Extra};
pub use status::{status_response, StatusService};
use verdict::log_ban;
pub use verdict::Verdict;
use view::View;

/// The peer address to give the engine for this request, overriding the connection's.
///
/// Insert it as a request extension from a middleware placed outside [`WeirLayer`]. Meant for
/// tests (the shared vectors use peers like `192.0.2.1`) and for hosts that learn the real peer
/// from a trusted source the layer cannot see (PROXY protocol, a Unix socket from a local
/// proxy). Never derive it from a client-supplied header unless a trusted proxy set that header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerOverride(pub IpAddr);

/// Marks the request as coming over a connection without an IP address (a unix-domain
/// socket), whatever other address extensions say: it counts for the local client (see the
/// [crate docs](crate)). A request extension, like [`PeerOverride`] (which wins over it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LocalPeer;

/// Values for the policy's `var:NAME` key parts (docs/POLICY.md), as a request extension
/// inserted by a middleware placed outside [`WeirLayer`] (a tenant id, an authenticated user).
/// A name without a value, or with an empty one, leaves the limits keyed by it out of the
/// request's evaluation.
///
/// ```
/// let mut vars = weir_tower::Vars::default();
/// vars.set("tenant", "acme");
/// assert_eq!(vars.get(b"tenant"), Some(&b"acme"[..]));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Vars {
    values: Vec<(Vec<u8>, Vec<u8>)>,
}

impl Vars {
    /// Sets `name` to `value` (replacing an earlier value).
    pub fn set(&mut self, name: impl AsRef<[u8]>, value: impl AsRef<[u8]>) {
        let (name, value) = (name.as_ref(), value.as_ref());
        match self.values.iter_mut().find(|(n, _)| **n == *name) {
            Some((_, v)) => *v = value.to_vec(),
            None => self.values.push((name.to_vec(), value.to_vec())),
        }
    }

    /// The value of `name`.
    pub fn get(&self, name: &[u8]) -> Option<&[u8]> {
        self.values
            .iter()
            .find(|(n, _)| **n == *name)
            .map(|(_, v)| &v[..])
    }
}

/// The layer's time source: `now` for the engine (and for releases), and the sleep used for
/// delays. Any `Fn() -> u64 + Send + Sync` is a clock (with tokio's sleep).
pub trait Clock: Send + Sync + 'static {
    /// Nanoseconds on the engine tables' time base.
    fn now_ns(&self) -> u64;

    /// Waits `d` before a delayed request is served. Default: `tokio::time::sleep`.
    fn sleep(&self, d: Duration) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        Box::pin(tokio::time::sleep(d))
    }
}

/// `weir::clock::monotonic_ns()` and tokio's sleep: the default.
#[derive(Clone, Copy, Debug, Default)]
pub struct MonotonicClock;

impl Clock for MonotonicClock {
    fn now_ns(&self) -> u64 {
        weir::clock::monotonic_ns()
    }
}

impl<F: Fn() -> u64 + Send + Sync + 'static> Clock for F {
    fn now_ns(&self) -> u64 {
        self()
    }
}

#[derive(Clone)]
struct Config {
    engine: Arc<Engine>,
    clock: Arc<dyn Clock>,
    fallback_peer: Option<IpAddr>,
    expose_verdict: bool,
    /// Starts the permit renewer once, at the first request (renew.rs).
    renewer: Arc<std::sync::Once>,
    /// Requests waiting in a queue, woken when permits go back (wake.rs).
    waiters: Arc<wake::Waiters>,
}

/// Applies a weir policy to every request: see the [crate docs](crate).
#[derive(Clone)]
pub struct WeirLayer {
    cfg: Arc<Config>,
}

impl WeirLayer {
    /// A layer over `engine`, on `weir::clock::monotonic_ns()`.
    pub fn new(engine: Arc<Engine>) -> WeirLayer {
        WeirLayer {
            cfg: Arc::new(Config {
                engine,
                clock: Arc::new(MonotonicClock),
                fallback_peer: None,
                expose_verdict: false,
                renewer: Arc::new(std::sync::Once::new()),
                waiters: Arc::default(),
            }),
        }
    }

    /// Replaces the time source (tests; engines over tables on another time base). A closure
    /// `|| -> u64` is a clock. The same clock times releases and the queue timeout.
    pub fn with_clock(mut self, clock: impl Clock) -> WeirLayer {
        Arc::make_mut(&mut self.cfg).clock = Arc::new(clock);
        self
    }

    /// The peer used when a request carries no address (see the crate docs). Default: none,
    /// the request counts for the local client.
    pub fn fallback_peer(mut self, peer: IpAddr) -> WeirLayer {
        Arc::make_mut(&mut self.cfg).fallback_peer = Some(peer);
        self
    }

    /// Insert a [`Verdict`] into request and response extensions. Default off.
    pub fn expose_verdict(mut self, on: bool) -> WeirLayer {
        Arc::make_mut(&mut self.cfg).expose_verdict = on;
        self
    }

    /// The engine this layer applies.
    pub fn engine(&self) -> &Arc<Engine> {
        &self.cfg.engine
    }
}

impl<S> Layer<S> for WeirLayer {
    type Service = WeirService<S>;
    fn layer(&self, inner: S) -> WeirService<S> {
        WeirService {
            inner,
            cfg: self.cfg.clone(),
        }
    }
}

/// The service [`WeirLayer`] produces.
#[derive(Clone)]
pub struct WeirService<S> {
    inner: S,
    cfg: Arc<Config>,
}

/// Runs one evaluation, catching a panic inside weir (or the clock): `None` when weir could not
/// decide, logged with what `failure_mode` makes of it.
fn guarded<T>(cfg: &Config, eval: impl FnOnce() -> T) -> Option<T> {
    // The engine's state stays consistent across a panic: tables are updated by atomic
    // operations only, and an unfinished evaluation at worst leaves a charge or a permit
    // behind, as a crashed worker would.
    let res = catch_unwind(AssertUnwindSafe(eval)).ok();
    if res.is_none() {
        let what = if fails_closed(cfg) {
            "answering 503 (failure_mode = \"closed\")"
        } else {
            "letting the request through (failure_mode = \"open\")"
        };
        tracing::error!("weir evaluation failed (panic); {what}");
    }
    res
}

fn fails_closed(cfg: &Config) -> bool {
    cfg.engine.policy().failure_mode == FailureMode::Closed
}

/// An evaluation reduced to what the layer acts on, inside the guarded evaluation: a pass
/// moves two words, not the engine's whole [`Outcome`].
enum Plan {
    Pass {
        guard: Option<Box<PermitGuard>>,
        extra: Option<Box<Extra>>,
    },
    /// Reject, delay or queue.
    Other(Box<Outcome>),
}

type SlowFuture<RB, E> = Pin<Box<dyn Future<Output = Result<Response<WeirBody<RB>>, E>> + Send>>;

pin_project! {
    /// The future of [`WeirService`]: the inner call (pass), a ready answer (reject, 400), or
    /// a boxed wait (delay, queue).
    pub struct ResponseFuture<F, RB, E> {
        #[pin]
        state: State<F, RB, E>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F, RB, E> {
        Inner {
            #[pin]
            fut: F,
            guard: Option<Box<PermitGuard>>,
            extra: Option<Box<Extra>>,
        },
        // Boxed: a response inline would make every pass's future (moved by whoever polls
        // it) as large as a response.
        Ready { resp: Option<Box<Response<WeirBody<RB>>>> },
        Slow { fut: SlowFuture<RB, E> },
    }
}

impl<F, RB, E> Future for ResponseFuture<F, RB, E>
where
    F: Future<Output = Result<Response<RB>, E>>,
{
    type Output = Result<Response<WeirBody<RB>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            StateProj::Inner { fut, guard, extra } => {
                // An error drops the guard with this future: the permits come back, the
                // deferred charges charge nothing.
                let resp = ready!(fut.poll(cx))?;
                Poll::Ready(Ok(finish(resp, guard.take(), extra.take())))
            }
            StateProj::Ready { resp } => Poll::Ready(Ok(*resp
                .take()
                .expect("ResponseFuture polled after completion"))),
            StateProj::Slow { fut } => fut.as_mut().poll(cx),
        }
    }
}

impl<S, B, RB> Service<Request<B>> for WeirService<S>
where
    S: Service<Request<B>, Response = Response<RB>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    B: Send + 'static,
    RB: Send + 'static,
{
    type Response = Response<WeirBody<RB>>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, RB, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<B>) -> Self::Future {
        let cfg = &self.cfg;
        renew::ensure(cfg);
        let engine = &cfg.engine;
        let res = guarded(cfg, || {
            let view = View::new(&req, cfg.fallback_peer, engine);
            // Read in place: moving the outcome out of the result copies all of it.
            let mut res = engine.evaluate(&view, cfg.clock.now_ns());
            let out = match &mut res {
                Ok(out) if out.action == Action::Pass => out,
                _ => {
                    return res.map(|out| {
                        if out.ban_started.is_some() {
                            log_ban(engine, &out);
                        }
                        Plan::Other(Box::new(out))
                    })
                }
            };
            if out.ban_started.is_some() {
                log_ban(engine, out);
            }
            let wants = wants_fields(engine, out);
            let extra = (wants || cfg.expose_verdict).then(|| {
                Box::new(Extra {
                    fields: wants.then(|| fields(engine, out)),
                    verdict: cfg
                        .expose_verdict
                        .then(|| Verdict::of(cfg, &req, out, None)),
                })
            });
            Ok(Plan::Pass {
                guard: PermitGuard::new(cfg, out),
                extra,
            })
        });
        let plan = match res {
            Some(Ok(plan)) => plan,
            None if fails_closed(cfg) => {
                return ResponseFuture {
                    state: State::Ready {
                        resp: Some(Box::new(unavailable())),
                    },
                }
            }
            None => Plan::Pass {
                guard: None,
                extra: None,
            },
            // A target nginx refuses, or too many values of one header the policy reads.
            Some(Err(_)) => {
                return ResponseFuture {
                    state: State::Ready {
                        resp: Some(Box::new(bad_request(cfg))),
                    },
                }
            }
        };
        let state = match plan {
            Plan::Pass { mut guard, extra } => {
                if let Some(v) = extra.as_ref().and_then(|e| e.verdict.as_ref()) {
                    req.extensions_mut().insert(v.clone());
                }
                if let Some(g) = &mut guard {
                    g.calling();
                }
                State::Inner {
                    fut: self.inner.call(req),
                    guard,
                    extra,
                }
            }
            Plan::Other(out) if out.action == Action::Reject => State::Ready {
                resp: Some(Box::new(reject_response(cfg, &out, || {
                    Verdict::of(cfg, &req, &out, None)
                }))),
            },
            Plan::Other(out) => State::Slow {
                fut: Box::pin(slow(cfg.clone(), self.inner.clone(), req, *out)),
            },
        };
        ResponseFuture { state }
    }
}

/// Delay and queue: wait, then serve (or answer the limit's status).
async fn slow<S, B, RB>(
    cfg: Arc<Config>,
    mut svc: S,
    mut req: Request<B>,
    mut out: Outcome,
) -> Result<Response<WeirBody<RB>>, S::Error>
where
    S: Service<Request<B>, Response = Response<RB>>,
{
    let engine = &cfg.engine;
    let mut queued = None;
    if out.action == Action::Queue {
        queued = out.limit;
        let mut place = TicketGuard {
            cfg: cfg.clone(),
            ticket: out.ticket.take(),
        };
        // A release through this layer wakes the request (wake.rs).
        let lifo = |q| engine.queue_lifo(q, cfg.clock.now_ns());
        let (mut waiting, ahead) = match &place.ticket {
            Some(t) => {
                let (w, ahead) = cfg.waiters.enter(t.queue(), &lifo);
                (Some(w), ahead)
            }
            None => (None, 0),
        };
        // Alone in the queue, ask again at once: a release since the first evaluation found
        // no waiter to wake. Behind others, a release wakes them first. Then the engine says
        // when to ask again, and ends the wait at the limit's timeout.
        let mut wait = match ahead {
            0 => Duration::ZERO,
            _ => Duration::from_nanos(out.wait_ns),
        };
        loop {
            if let (false, Some(w)) = (wait.is_zero(), &waiting) {
                // Real time, whatever the clock: an injected clock may stand still meanwhile.
                w.nap(wait).await;
            }
            let now = cfg.clock.now_ns();
            let Some(ticket) = place.ticket.take() else {
                break;
            };
            let res = guarded(&cfg, || {
                engine.evaluate_queued(&View::new(&req, cfg.fallback_peer, engine), now, ticket)
            });
            match res {
                None if fails_closed(&cfg) => return Ok(unavailable()),
                // Failing open: serve without waiting any longer.
                None => {
                    out.action = Action::Pass;
                    break;
                }
                Some(Ok(mut o)) => {
                    place.ticket = o.ticket.take();
                    out = o;
                    if out.action != Action::Queue {
                        break;
                    }
                    if let (Some(w), Some(t)) = (&waiting, &place.ticket) {
                        w.requeued(t.queue());
                    }
                    wait = Duration::from_nanos(out.wait_ns);
                }
                // The request was fine a moment ago; cannot happen, but answer as the engine does.
                Some(Err(_)) => return Ok(bad_request(&cfg)),
            }
        }
        if let (Some(w), Action::Pass | Action::Delay) = (&mut waiting, out.action) {
            w.served();
        }
        drop(waiting);
    }
    if out.ban_started.is_some() {
        log_ban(engine, &out);
    }
    if out.action == Action::Reject {
        return Ok(reject_response(&cfg, &out, || {
            Verdict::of(&cfg, &req, &out, queued)
        }));
    }
    let mut guard = PermitGuard::new(&cfg, &mut out);
    if out.action == Action::Delay && out.wait_ns > 0 {
        cfg.clock.sleep(Duration::from_nanos(out.wait_ns)).await;
    }
    let fields = wants_fields(engine, &out).then(|| fields(engine, &out));
    let verdict = cfg.expose_verdict.then(|| {
        let verdict = Verdict::of(&cfg, &req, &out, queued);
        req.extensions_mut().insert(verdict.clone());
        verdict
    });
    std::future::poll_fn(|cx| svc.poll_ready(cx)).await?;
    if let Some(g) = &mut guard {
        g.calling();
    }
    let resp = svc.call(req).await?;
    Ok(finish(resp, guard, Extra::boxed(fields, verdict)))
}
