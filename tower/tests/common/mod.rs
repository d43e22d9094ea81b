//! Shared by the layer tests: a real axum server on 127.0.0.1, a raw HTTP/1.1 client over TCP
//! (raw so that any vector target — absolute-form, `*`, `%00` — goes out exactly as written,
//! and so the test decides when a connection is dropped), handler bodies the test holds open.
#![allow(dead_code)]

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::Body as AxumBody;
use axum::extract::Request;
use axum::response::Response;
use axum::Router;
use bytes::Bytes;
use http_body::{Body, Frame};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UnixStream};
use tokio::sync::oneshot;

/// Serves `app` on 127.0.0.1:0 with `ConnectInfo<SocketAddr>`; the task ends with the runtime
/// (or when the returned handle is aborted).
pub async fn serve(app: Router) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        .unwrap();
    });
    (addr, task)
}

/// How a held body ends.
#[derive(Debug)]
pub enum End {
    Finish,
    Fail,
}

/// A response body that sends one chunk, then stays open until the test says how it ends
/// (or, with `tick`, keeps sending a small chunk every `tick` until then).
pub struct HeldBody {
    first: Option<Bytes>,
    end: Option<oneshot::Receiver<End>>,
    tick: Option<(Duration, Pin<Box<tokio::time::Sleep>>)>,
    failed: bool,
}

impl HeldBody {
    pub fn new(end: oneshot::Receiver<End>, tick: Option<Duration>) -> HeldBody {
        HeldBody {
            first: Some(Bytes::from_static(b"first\n")),
            end: Some(end),
            tick: tick.map(|d| (d, Box::pin(tokio::time::sleep(d)))),
            failed: false,
        }
    }
}

impl Body for HeldBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        if let Some(b) = self.first.take() {
            return Poll::Ready(Some(Ok(Frame::data(b))));
        }
        if self.failed {
            return Poll::Ready(None);
        }
        if let Some(rx) = self.end.as_mut() {
            match Pin::new(rx).poll(cx) {
                Poll::Ready(Ok(End::Fail)) => {
                    self.end = None;
                    self.failed = true;
                    return Poll::Ready(Some(Err(std::io::Error::other("handler body failed"))));
                }
                Poll::Ready(_) => {
                    self.end = None;
                    return Poll::Ready(None);
                }
                Poll::Pending => {}
            }
        } else {
            return Poll::Ready(None);
        }
        if let Some((d, sleep)) = self.tick.as_mut() {
            if sleep.as_mut().poll(cx).is_ready() {
                let d = *d;
                sleep.as_mut().reset(tokio::time::Instant::now() + d);
                return Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b".")))));
            }
        }
        Poll::Pending
    }
}

use std::future::Future;

/// Bodies the handler handed out, by the id in the request's `x-test-step` header, and the
/// ids whose request future has finished or been dropped (outermost middleware).
#[derive(Default)]
pub struct Held {
    pub enders: Mutex<HashMap<u64, oneshot::Sender<End>>>,
    pub finished: Mutex<HashSet<u64>>,
    pub tick: Mutex<Option<Duration>>,
}

impl Held {
    pub fn end(&self, id: u64, how: End) {
        let tx = self.enders.lock().unwrap().remove(&id);
        tx.unwrap_or_else(|| panic!("request {id} holds no body"))
            .send(how)
            .ok();
    }

    /// Waits (up to 3 s) until request `id`'s future is gone.
    pub async fn wait_finished(&self, id: u64) {
        let t0 = Instant::now();
        while !self.finished.lock().unwrap().contains(&id) {
            assert!(
                t0.elapsed() < Duration::from_secs(3),
                "request {id} never finished"
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}

pub fn step_id(req: &Request) -> Option<u64> {
    req.headers()
        .get("x-test-step")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
}

/// A handler whose body stays open until the test ends it.
pub fn held_response(held: &Held, id: u64) -> Response {
    let (tx, rx) = oneshot::channel();
    held.enders.lock().unwrap().insert(id, tx);
    let tick = *held.tick.lock().unwrap();
    Response::new(AxumBody::new(HeldBody::new(rx, tick)))
}

/// Marks request `id` finished when dropped (its future completed or was dropped).
pub struct Finished(pub Arc<Held>, pub u64);

impl Drop for Finished {
    fn drop(&mut self) {
        self.0.finished.lock().unwrap().insert(self.1);
    }
}

/// A response head as read off the wire.
#[derive(Debug)]
pub struct Head {
    pub status: u16,
    pub headers: Vec<(String, String)>,
}

impl Head {
    pub fn get(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// A client connection: TCP or a unix-domain socket.
pub trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// One HTTP/1.1 exchange over its own connection.
pub struct Conn {
    stream: Box<dyn Io>,
    buf: Vec<u8>,
    pub head: Option<Head>,
}

impl Conn {
    /// Connects over TCP and writes the request (no body). Header lines go out in order, as
    /// given.
    pub async fn send(
        addr: SocketAddr,
        method: &str,
        target: &str,
        headers: &[(&str, &str)],
    ) -> Conn {
        let stream = TcpStream::connect(addr).await.unwrap();
        Conn::write(Box::new(stream), method, target, headers).await
    }

    /// [`Conn::send`] over the unix socket at `path`.
    pub async fn send_unix(
        path: &std::path::Path,
        method: &str,
        target: &str,
        headers: &[(&str, &str)],
    ) -> Conn {
        let stream = UnixStream::connect(path).await.unwrap();
        Conn::write(Box::new(stream), method, target, headers).await
    }

    async fn write(
        mut stream: Box<dyn Io>,
        method: &str,
        target: &str,
        headers: &[(&str, &str)],
    ) -> Conn {
        let mut req = format!("{method} {target} HTTP/1.1\r\n");
        if !headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("host")) {
            req.push_str("host: 127.0.0.1\r\n");
        }
        for (n, v) in headers {
            req.push_str(&format!("{n}: {v}\r\n"));
        }
        req.push_str("\r\n");
        stream.write_all(req.as_bytes()).await.unwrap();
        Conn {
            stream,
            buf: Vec::new(),
            head: None,
        }
    }

    async fn fill(&mut self, deadline: Instant) -> bool {
        let mut chunk = [0u8; 4096];
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, self.stream.read(&mut chunk)).await {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => false,
            Ok(Ok(n)) => {
                self.buf.extend_from_slice(&chunk[..n]);
                true
            }
        }
    }

    /// The response head, if one arrives within `wait`.
    pub async fn head(&mut self, wait: Duration) -> Option<&Head> {
        if self.head.is_none() {
            let deadline = Instant::now() + wait;
            let end = loop {
                if let Some(i) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                    break i;
                }
                if !self.fill(deadline).await {
                    return None;
                }
            };
            let text = String::from_utf8_lossy(&self.buf[..end]).to_string();
            self.buf.drain(..end + 4);
            let mut lines = text.split("\r\n");
            let status = lines
                .next()
                .unwrap()
                .split(' ')
                .nth(1)
                .unwrap()
                .parse()
                .unwrap();
            let headers = lines
                .filter_map(|l| l.split_once(':'))
                .map(|(n, v)| (n.trim().to_string(), v.trim().to_string()))
                .collect();
            self.head = Some(Head { status, headers });
        }
        self.head.as_ref()
    }

    /// Reads the body to its end (content-length or chunked) within `wait`; `None` if the
    /// connection closed or stalled first.
    pub async fn body(&mut self, wait: Duration) -> Option<Vec<u8>> {
        let deadline = Instant::now() + wait;
        let head = self.head(wait).await?;
        if let Some(len) = head.get("content-length") {
            let len: usize = len.parse().unwrap();
            while self.buf.len() < len {
                if !self.fill(deadline).await {
                    return None;
                }
            }
            return Some(self.buf.drain(..len).collect());
        }
        let mut out = Vec::new();
        loop {
            let Some(i) = self.buf.windows(2).position(|w| w == b"\r\n") else {
                if !self.fill(deadline).await {
                    return None;
                }
                continue;
            };
            let size =
                usize::from_str_radix(std::str::from_utf8(&self.buf[..i]).unwrap(), 16).unwrap();
            while self.buf.len() < i + 2 + size + 2 {
                if !self.fill(deadline).await {
                    return None;
                }
            }
            out.extend_from_slice(&self.buf[i + 2..i + 2 + size]);
            self.buf.drain(..i + 2 + size + 2);
            if size == 0 {
                return Some(out);
            }
        }
    }

    /// Reads whatever arrives until `wait` passes or the connection closes.
    pub async fn read_some(&mut self, wait: Duration) -> usize {
        let before = self.buf.len();
        let deadline = Instant::now() + wait;
        while Instant::now() < deadline && self.fill(deadline).await {}
        self.buf.len() - before
    }
}
