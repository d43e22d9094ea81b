//! The engine's view of an `http::Request`.

use std::borrow::Cow;
use std::cell::RefCell;
use std::net::{IpAddr, SocketAddr};

use http::header::{HeaderValue, ValueIter};
use http::Request;
use weir::policy::{Engine, RequestView};

use crate::{LocalPeer, PeerOverride, Vars};

/// Header names up to this long are resumed by [`Resume`]; longer ones (no policy names
/// one) are looked up from the first line each time.
const RESUME_NAME: usize = 64;

/// The engine's view of an `http::Request`: no copies except an absolute-form target.
pub(crate) struct View<'a, B> {
    req: &'a Request<B>,
    target: Cow<'a, str>,
    peer: Option<IpAddr>,
    /// The engine, for the names of the variables it asks for by index.
    engine: &'a Engine,
    /// Where the last [`RequestView::header_nth`] stopped.
    resume: RefCell<Option<Resume<'a>>>,
}

/// The engine reads a name's lines in order (`nth` = 0, 1, 2 …): the next line of the
/// same name continues this iterator instead of walking from the first line, so a request
/// with n repeated lines costs O(n), not O(n²).
struct Resume<'a> {
    name: [u8; RESUME_NAME],
    len: usize,
    /// The `nth` that `lines` yields next.
    next: usize,
    lines: ValueIter<'a, HeaderValue>,
}

impl<'a, B> View<'a, B> {
    pub(crate) fn new(
        req: &'a Request<B>,
        fallback: Option<IpAddr>,
        engine: &'a Engine,
    ) -> View<'a, B> {
        let uri = req.uri();
        let target = if uri.scheme().is_some() {
            // Absolute-form: the engine takes the path out of it itself.
            Cow::Owned(uri.to_string())
        } else if let Some(pq) = uri.path_and_query() {
            Cow::Borrowed(pq.as_str())
        } else if let Some(a) = uri.authority() {
            Cow::Borrowed(a.as_str())
        } else {
            Cow::Borrowed(uri.path())
        };
        View {
            req,
            target,
            peer: peer_of(req, fallback),
            engine,
            resume: RefCell::new(None),
        }
    }
}

pub(crate) fn peer_of<B>(req: &Request<B>, fallback: Option<IpAddr>) -> Option<IpAddr> {
    let ext = req.extensions();
    // The usual request carries one extension, the connection's address: when it is the
    // only one, the overrides before it cannot be there (one lookup instead of three).
    #[cfg(feature = "axum")]
    if ext.len() == 1 {
        if let Some(ci) = ext.get::<axum::extract::ConnectInfo<SocketAddr>>() {
            return Some(ci.0.ip());
        }
    }
    if let Some(p) = ext.get::<PeerOverride>() {
        return Some(p.0);
    }
    if ext.get::<LocalPeer>().is_some() {
        return None;
    }
    #[cfg(feature = "axum")]
    if let Some(ci) = ext.get::<axum::extract::ConnectInfo<SocketAddr>>() {
        return Some(ci.0.ip());
    }
    if let Some(sa) = ext.get::<SocketAddr>() {
        return Some(sa.ip());
    }
    fallback
}

impl<B> RequestView for View<'_, B> {
    fn method(&self) -> &[u8] {
        self.req.method().as_str().as_bytes()
    }
    fn target(&self) -> &[u8] {
        self.target.as_bytes()
    }
    fn peer(&self) -> Option<IpAddr> {
        self.peer
    }
    fn var(&self, index: usize) -> Option<&[u8]> {
        let name = self.engine.var_names().nth(index)?;
        self.req.extensions().get::<Vars>()?.get(name)
    }
    fn header_nth(&self, lowercase_name: &[u8], nth: usize) -> Option<&[u8]> {
        let mut resume = self.resume.borrow_mut();
        if let Some(r) = resume.as_mut() {
            if r.next == nth && r.name[..r.len] == *lowercase_name {
                r.next += 1;
                return r.lines.next().map(HeaderValue::as_bytes);
            }
        }
        let name = std::str::from_utf8(lowercase_name).ok()?;
        let mut lines = self.req.headers().get_all(name).iter();
        let line = lines.nth(nth).map(HeaderValue::as_bytes);
        *resume = (lowercase_name.len() <= RESUME_NAME).then(|| {
            let mut r = Resume {
                name: [0; RESUME_NAME],
                len: lowercase_name.len(),
                next: nth + 1,
                lines,
            };
            r.name[..r.len].copy_from_slice(lowercase_name);
            r
        });
        line
    }
}

#[cfg(test)]
mod tests {
    use std::hint::black_box;
    use std::time::{Duration, Instant};

    use weir::policy::{parse_policy, Engine};

    use super::*;

    /// A cookie key and a trusted proxy's chain: the engine walks every `Cookie` and
    /// `X-Forwarded-For` line.
    const POLICY: &str = r#"
trusted_proxies = ["10.0.0.0/8"]
[zones.z]
size = "1m"
algorithm = "gcra"
rate = "100000r/s"
[[limit]]
name = "per-sid"
class = "*"
zone = "z"
key = ["ip", "cookie:sid"]
burst = 100000
"#;

    fn request(name: &str, value: &str, n: usize) -> Request<()> {
        let mut b = Request::get("/x").extension(SocketAddr::from(([10, 0, 0, 1], 80)));
        for _ in 0..n {
            b = b.header(name, value);
        }
        b.body(()).unwrap()
    }

    /// Best time to evaluate `req`, per header line (`n` of them), over rounds of a few ms.
    fn cost_per_line(engine: &Engine, req: &Request<()>, n: usize) -> f64 {
        let mut now = 1_000_000_000_000u64;
        let mut once = || {
            now += 1_000;
            let out = engine.evaluate(&View::new(req, None, engine), now).unwrap();
            engine.release(black_box(out).permits, now);
        };
        let t = Instant::now();
        let mut warm = 0u32;
        while warm < 10 || t.elapsed() < Duration::from_millis(20) {
            once();
            warm += 1;
        }
        let reps =
            (warm as u128 * Duration::from_millis(2).as_nanos() / t.elapsed().as_nanos()).max(1);
        (0..9)
            .map(|_| {
                let t = Instant::now();
                for _ in 0..reps {
                    once();
                }
                t.elapsed().as_secs_f64() / (reps as f64 * n as f64)
            })
            .fold(f64::INFINITY, f64::min)
    }

    #[test]
    fn repeated_header_lines_cost_linear_time() {
        let engine = Engine::new(parse_policy(POLICY, None).unwrap()).unwrap();
        for (name, value) in [("cookie", "c=1"), ("x-forwarded-for", "10.0.0.2")] {
            let (small, large) = (1_000, 8_000);
            let a = cost_per_line(&engine, &request(name, value, small), small);
            let b = cost_per_line(&engine, &request(name, value, large), large);
            // Linear: about 1x. A walk from the first line for each line is about 8x.
            assert!(
                b < 4.0 * a,
                "{name}: {:.0} ns per line with {large} lines, {:.0} ns with {small}",
                b * 1e9,
                a * 1e9
            );
        }
    }

    #[test]
    fn vars_come_from_the_extension_by_the_engine_s_names() {
        let policy = "[zones.z]\nsize = \"64k\"\nalgorithm = \"gcra\"\nrate = \"1r/s\"\n\
                      [[limit]]\nclass = \"*\"\nzone = \"z\"\nkey = [\"var:a\", \"var:b\"]\n";
        let engine = Engine::new(parse_policy(policy, None).unwrap()).unwrap();
        let mut req = request("x", "y", 0);
        let view = View::new(&req, None, &engine);
        assert_eq!(view.var(0), None);
        let mut vars = Vars::default();
        vars.set("b", "2");
        vars.set("a", "1");
        vars.set("a", "11");
        req.extensions_mut().insert(vars);
        let view = View::new(&req, None, &engine);
        assert_eq!(
            (view.var(0), view.var(1)),
            (Some(&b"11"[..]), Some(&b"2"[..]))
        );
        assert_eq!(view.var(2), None);
    }

    #[test]
    fn lines_resume_in_order_and_restart_anywhere() {
        let mut req = request("cookie", "a", 0);
        for v in ["a=1", "b=2", "c=3"] {
            req.headers_mut()
                .append("cookie", HeaderValue::from_static(v));
        }
        req.headers_mut()
            .append("x-k", HeaderValue::from_static("k"));
        let engine = Engine::new(parse_policy(POLICY, None).unwrap()).unwrap();
        let view = View::new(&req, None, &engine);
        let got: Vec<_> = (0..4).map(|i| view.header_nth(b"cookie", i)).collect();
        assert_eq!(got, [Some(&b"a=1"[..]), Some(b"b=2"), Some(b"c=3"), None]);
        // Another name, then a jump back: each starts its own walk.
        assert_eq!(view.header_nth(b"x-k", 0), Some(&b"k"[..]));
        assert_eq!(view.header_nth(b"cookie", 1), Some(&b"b=2"[..]));
        assert_eq!(view.header_nth(b"cookie", 0), Some(&b"a=1"[..]));
        assert_eq!(view.header_nth(b"cookie", 2), Some(&b"c=3"[..]));
    }
}
