//! Differential test: `weir::policy::matching::normalize` against the real nginx.
//!
//! Starts the system nginx (`/usr/sbin/nginx`) on 127.0.0.1 with a config that
//! answers every request with `$uri` as the body and `$args` in a header,
//! sends it a large set of deterministic pseudo-random request targets, and
//! checks that nginx answers 200 with body B exactly when `normalize_target`
//! returns Ok(B) (and `split_target`'s query equals `$args`), and 400 exactly
//! when it returns Err.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use weir::policy::matching::normalize::{normalize_target, split_target};

const NGINX: &str = "/usr/sbin/nginx";
const RANDOM_TARGETS: usize = 50_000;
const CLIENT_THREADS: usize = 4;

/// A running nginx, killed (by pid) and cleaned up on drop, also when the
/// test panics.
struct Nginx {
    child: Child,
    dir: PathBuf,
    port: u16,
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // SIGTERM is a fast shutdown for nginx; fall back to SIGKILL.
        let pid = self.child.id() as libc::pid_t;
        unsafe {
            libc::kill(pid, libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(3);
        loop {
            match self.child.try_wait() {
                Ok(Some(_)) => break,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                _ => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    break;
                }
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("cannot bind a local port")
}

fn start_nginx() -> Nginx {
    assert!(
        Path::new(NGINX).exists(),
        "{NGINX} not found: this test needs the real nginx; run `apt-get install -y nginx`"
    );
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let dir = std::env::temp_dir().join(format!("weir-nginx-uri-{}-{nanos}", std::process::id()));
    let mut last_err = String::new();
    for _attempt in 0..3 {
        std::fs::create_dir_all(&dir).expect("create temp dir");
        let port = free_port();
        let d = dir.display();
        // master_process off: one process, so stopping it by pid stops all.
        let conf = format!(
            r#"daemon off;
master_process off;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{ worker_connections 512; }}
http {{
    access_log off;
    client_body_temp_path {d}/client_body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    keepalive_requests 1000000;
    server {{
        listen 127.0.0.1:{port};
        server_name _;
        add_header X-Args "$args" always;
        return 200 "$uri";
    }}
}}
"#
        );
        let conf_path = dir.join("nginx.conf");
        std::fs::write(&conf_path, conf).expect("write nginx.conf");
        let child = Command::new(NGINX)
            .arg("-p")
            .arg(&dir)
            .arg("-e")
            .arg(dir.join("error.log"))
            .arg("-c")
            .arg(&conf_path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {NGINX}: {e} (apt-get install -y nginx)"));
        let mut guard = Nginx {
            child,
            dir: dir.clone(),
            port,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return guard;
            }
            if let Ok(Some(status)) = guard.child.try_wait() {
                let mut stderr = String::new();
                if let Some(mut e) = guard.child.stderr.take() {
                    let _ = e.read_to_string(&mut stderr);
                }
                let log = std::fs::read_to_string(dir.join("error.log")).unwrap_or_default();
                last_err = format!("nginx exited with {status}: {stderr}\n{log}");
                break;
            }
            if Instant::now() > deadline {
                last_err = "nginx did not start listening within 10 s".into();
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // Dropping the guard stops nginx and removes the directory.
        drop(guard);
    }
    let _ = std::fs::remove_dir_all(&dir);
    panic!("could not start nginx: {last_err}");
}

#[derive(Debug, PartialEq, Eq)]
enum Answer {
    /// 200 with `$uri` and `$args`.
    Ok(Vec<u8>, Vec<u8>),
    /// 400 Bad Request.
    Bad,
    /// Anything else (a harness problem, reported as a mismatch).
    Other(String),
}

/// One keep-alive client connection.
struct Client {
    port: u16,
    conn: Option<BufReader<TcpStream>>,
}

impl Client {
    fn connect(&mut self) -> std::io::Result<&mut BufReader<TcpStream>> {
        if self.conn.is_none() {
            let s = TcpStream::connect(("127.0.0.1", self.port))?;
            s.set_read_timeout(Some(Duration::from_secs(10)))?;
            s.set_nodelay(true)?;
            self.conn = Some(BufReader::new(s));
        }
        Ok(self.conn.as_mut().expect("just connected"))
    }

    fn ask(&mut self, target: &[u8]) -> Answer {
        // A reused connection may have been closed by the server; retry
        // once on a fresh one.
        for attempt in 0..2 {
            match self.try_ask(target) {
                Ok(a) => return a,
                Err(e) => {
                    self.conn = None;
                    if attempt == 1 {
                        return Answer::Other(format!("I/O error: {e}"));
                    }
                }
            }
        }
        unreachable!()
    }

    fn try_ask(&mut self, target: &[u8]) -> std::io::Result<Answer> {
        let mut req = Vec::with_capacity(target.len() + 40);
        req.extend_from_slice(b"GET ");
        req.extend_from_slice(target);
        req.extend_from_slice(b" HTTP/1.1\r\nHost: t\r\n\r\n");
        let conn = self.connect()?;
        conn.get_mut().write_all(&req)?;

        let mut line = Vec::new();
        if conn.read_until(b'\n', &mut line)? == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "no status line",
            ));
        }
        let status = line.get(9..12).map(|s| s.to_vec()).unwrap_or_default();
        let mut content_length = 0usize;
        let mut args = Vec::new();
        let mut close = false;
        loop {
            line.clear();
            if conn.read_until(b'\n', &mut line)? == 0 {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "headers cut",
                ));
            }
            if line == b"\r\n" {
                break;
            }
            let lower = line.to_ascii_lowercase();
            let value = || {
                line.splitn(2, |&b| b == b':')
                    .nth(1)
                    .unwrap_or(b"")
                    .trim_ascii()
                    .to_vec()
            };
            if lower.starts_with(b"content-length:") {
                content_length = String::from_utf8_lossy(&value()).parse().unwrap_or(0);
            } else if lower.starts_with(b"x-args:") {
                args = value();
            } else if lower.starts_with(b"connection:") && value().eq_ignore_ascii_case(b"close") {
                close = true;
            }
        }
        let mut body = vec![0u8; content_length];
        conn.read_exact(&mut body)?;
        if close {
            self.conn = None;
        }
        Ok(match &status[..] {
            b"200" => Answer::Ok(body, args),
            b"400" => Answer::Bad,
            other => Answer::Other(format!("HTTP status {}", String::from_utf8_lossy(other))),
        })
    }
}

/// xorshift64*: small, deterministic, good enough to pick pieces.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<'a>(&mut self, items: &[&'a [u8]]) -> &'a [u8] {
        items[self.below(items.len())]
    }
}

/// Pieces nginx accepts in a path (some only where they appear).
const PIECES: &[&[u8]] = &[
    b"/",
    b"/",
    b"/",
    b"/",
    b"//",
    b".",
    b".",
    b"..",
    b"..",
    b"...",
    b"a",
    b"b",
    b"seg",
    b"x.y",
    b"%2F",
    b"%2f",
    b"%2E",
    b"%2e",
    b"%2e%2E",
    b"%25",
    b"%23",
    b"%3F",
    b"%3f",
    b"%41",
    b"%7e",
    b"%20",
    b"%0A",
    b"%0d",
    b"%7F",
    b"%C3%A9",
    b"%e2%82%ac",
    b"%ff",
    b"\xc3\xa9",
    b"\xe2\x82\xac",
    b"\xf0\x9f\x98\x80",
    b"\xff",
    b"\x80",
    b"?",
    b"?",
    b"#",
    b";",
    b";a=b",
    b"\\",
    b"\\..\\",
    b"+",
    b"&",
    b"=",
    b"~",
    b"!",
    b"$",
    b":",
    b"@",
    b"'",
    b"\"",
    b"<",
    b">",
    b"{",
    b"|",
    b"^",
    b"`",
    b"[",
    b"]",
    b"*",
    b"/./",
    b"/../",
    b"/.%2e/",
    b"%2F..",
    b"%2F.",
    b".%2F",
];

/// Pieces nginx rejects (at least in the path): bad escapes, encoded NUL,
/// control bytes, DEL, space (never at either end, see below).
const BAD_PIECES: &[&[u8]] = &[
    b"%00", b"%zz", b"%4", b"%", b"%g1", b"%2", b"%%", b"% 1", b" z", b"\t", b"\x01", b"\x00",
    b"\x7f", b"\x1b", b"\r",
];

const SCHEMES: &[&[u8]] = &[
    b"http", b"http", b"HTTP", b"https", b"HtTpS", b"ftp", b"x+y.z-1", b"h_t", b"1http",
];
const SEPARATORS: &[&[u8]] = &[b"://", b"://", b"://", b":/", b"//", b":"];
const HOSTS: &[&[u8]] = &[
    b"example.com",
    b"example.com",
    b"EXAMPLE.org",
    b"127.0.0.1",
    b"a.",
    b".a",
    b"a..b",
    b".",
    b"",
    b"[::1]",
    b"[::1",
    b"[1..2]",
    b"[v1.x]",
    b"h_x",
    b"h%41",
    b"xn--bcher-kva.de",
];
const PORTS: &[&[u8]] = &[b"", b"", b":80", b":", b":8a", b":65536"];

fn random_target(rng: &mut Rng) -> Vec<u8> {
    let mut t = Vec::new();
    match rng.below(10) {
        0 | 1 => {
            t.extend_from_slice(rng.pick(SCHEMES));
            t.extend_from_slice(rng.pick(SEPARATORS));
            t.extend_from_slice(rng.pick(HOSTS));
            t.extend_from_slice(rng.pick(PORTS));
            match rng.below(4) {
                0 => {}
                1 => t.push(b'?'),
                _ => t.push(b'/'),
            }
        }
        2 => {} // starts with whatever piece comes first
        _ => t.push(b'/'),
    }
    for _ in 0..1 + rng.below(12) {
        let bad = rng.below(30) == 0;
        t.extend_from_slice(rng.pick(if bad { BAD_PIECES } else { PIECES }));
    }
    // The target is the word between the spaces of the request line, so a
    // leading or trailing space would only change the framing: keep spaces
    // inside, and no LF at all (it ends the request line: HTTP/0.9).
    if t.first() == Some(&b' ') {
        t.insert(0, b'/');
    }
    if t.last() == Some(&b' ') {
        t.push(b'z');
    }
    t
}

const FIXED: &[&[u8]] = &[
    b"/",
    b"//",
    b"/a/./b/../c",
    b"/..",
    b"/a/..",
    b"/a/../..",
    b"/%2e%2e",
    b"/a%2F..%2F",
    b"/a/%2F%2F/b",
    b"/%00",
    b"/%",
    b"/%4",
    b"/%zz",
    b"/%25%23%3F",
    b"/.%25",
    b"/a;b\\c",
    b"/a#b?c",
    b"/a?b#c",
    b"/a/b/..?x",
    b"/a/.#x",
    b"/?%zz",
    b"/%3f?q=1",
    b"http://h",
    b"http://h?x#y",
    b"HTTP://H:8080/x",
    b"ftp://h/x",
    b"http://[::1]:80/x",
    b"http:///x",
    b"http://a..b/",
    b"http://a./x",
    b"*",
    b"",
    b"/a\x00b",
    b"/a\rb",
    b"/a b",
    b"/caf\xc3\xa9/%C3%A9",
    b"http://h:/x",
    b"http://h:99999/x",
    b"http://[1..2]/",
    b"http://[::1].x/",
    b"/?a=1#b",
    b"/%0A%0d%7F",
    b"/a/..%2F..",
    b"/a/.%2",
    b"/a/%2e%2",
    b"/..%2",
    // The behaviours listed in docs/URI-NORMALIZATION.md.
    b"x+y.z-1://h/x",
    b"/%2F",
    b"/a/b/..%2Fc",
    b"/a/%2e%2E/b",
    b"/.%25",
    b"/%1B%20",
    b"/?%zz",
    b"/..?x",
    b"/admin;x=1",
    b"/.../..b/.b",
    b"/a/.",
    b"/a/b/..",
    b"http://h?x",
    b"http://h:/x",
    b"http://h_/x",
    b"http://[1..2]/",
];

fn show(bytes: &[u8]) -> String {
    bytes.escape_ascii().to_string()
}

#[test]
fn normalize_target_matches_nginx() {
    let nginx = start_nginx();

    let mut rng = Rng(0x5eed_cafe_f00d_beef);
    let mut targets: Vec<Vec<u8>> = FIXED.iter().map(|t| t.to_vec()).collect();
    targets.extend((0..RANDOM_TARGETS).map(|_| random_target(&mut rng)));

    let started = Instant::now();
    let chunk = targets.len().div_ceil(CLIENT_THREADS);
    let answers: Vec<Answer> = std::thread::scope(|s| {
        let handles: Vec<_> = targets
            .chunks(chunk)
            .map(|part| {
                let port = nginx.port;
                s.spawn(move || {
                    let mut c = Client { port, conn: None };
                    part.iter().map(|t| c.ask(t)).collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("client thread panicked"))
            .collect()
    });
    let elapsed = started.elapsed();

    let mut mismatches = Vec::new();
    let (mut oks, mut bads) = (0, 0);
    let mut out = vec![0u8; 4096];
    for (target, nginx_answer) in targets.iter().zip(&answers) {
        let ours = match normalize_target(target, &mut out) {
            Ok(n) => {
                let query = split_target(target)
                    .expect("normalize_target succeeded")
                    .query
                    .unwrap_or(b"")
                    .to_vec();
                Answer::Ok(out[..n].to_vec(), query)
            }
            Err(_) => Answer::Bad,
        };
        match nginx_answer {
            Answer::Ok(..) => oks += 1,
            Answer::Bad => bads += 1,
            Answer::Other(_) => {}
        }
        if &ours != nginx_answer {
            mismatches.push((target, nginx_answer, ours));
        }
    }
    eprintln!(
        "sent {} targets to nginx in {:.2?}: {oks} answered 200, {bads} answered 400, {} mismatches",
        targets.len(),
        elapsed,
        mismatches.len()
    );
    let fmt = |a: &Answer| match a {
        Answer::Ok(uri, args) => format!("200 uri=\"{}\" args=\"{}\"", show(uri), show(args)),
        Answer::Bad => "400".to_string(),
        Answer::Other(s) => s.clone(),
    };
    for (target, theirs, ours) in mismatches.iter().take(20) {
        let err = normalize_target(target, &mut out).err();
        eprintln!(
            "MISMATCH target=\"{}\"\n    nginx: {}\n    weir:  {}{}",
            show(target),
            fmt(theirs),
            fmt(ours),
            err.map(|e| format!(" ({e})")).unwrap_or_default()
        );
    }
    assert!(
        oks > 1000 && bads > 1000,
        "generator too lopsided: {oks} ok, {bads} bad"
    );
    assert!(
        mismatches.is_empty(),
        "{} mismatches with nginx",
        mismatches.len()
    );
}
