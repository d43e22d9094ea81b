//! A real redis-server on 127.0.0.1 for the cluster tests (Debian's; `make setup` installs
//! it): started on a free port with no persistence, stopped by SIGKILL like a crash.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Redis {
    child: Child,
    pub port: u16,
    _dir: PathBuf,
}

pub fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

impl Redis {
    pub fn start(port: u16, pass: Option<&str>) -> Redis {
        let dir = std::env::temp_dir().join(format!("weir-redis-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut cmd = Command::new("redis-server");
        cmd.args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
        ])
        .args(["--appendonly", "no", "--daemonize", "no", "--dir"])
        .arg(&dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        if let Some(p) = pass {
            cmd.args(["--requirepass", p]);
        }
        let child = cmd
            .spawn()
            .expect("redis-server not found: run `make setup` (scripts/setup.sh installs it)");
        let r = Redis {
            child,
            port,
            _dir: dir,
        };
        let t0 = Instant::now();
        loop {
            if let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) {
                let mut buf = [0u8; 64];
                s.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
                if s.write_all(b"PING\r\n").is_ok() && s.read(&mut buf).unwrap_or(0) > 0 {
                    return r;
                }
            }
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "redis-server did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sends `sig` by pid (SIGSTOP: a server that hangs, SIGCONT: it goes on).
    #[allow(dead_code)] // not every test binary that includes this module hangs Redis
    pub fn signal(&self, sig: i32) {
        // SAFETY: signalling our own child by its pid.
        unsafe { libc::kill(self.child.id() as i32, sig) };
    }

    /// SIGKILL by pid (no shutdown: like a crash).
    pub fn kill(self) {
        drop(self);
    }
}

/// A test that fails leaves no server behind.
impl Drop for Redis {
    fn drop(&mut self) {
        // SAFETY: signalling our own child by its pid (not yet waited for).
        unsafe { libc::kill(self.child.id() as i32, libc::SIGKILL) };
        let _ = self.child.wait();
    }
}

/// A TCP relay to a Redis on 127.0.0.1 that can be cut (every connection dropped, new ones
/// closed at once) and mended: one node's view of a partition while the others still reach
/// Redis.
#[allow(dead_code)] // only the tests that partition a node use it
pub struct Relay {
    pub port: u16,
    cut: std::sync::Arc<std::sync::atomic::AtomicBool>,
    open: std::sync::Arc<std::sync::Mutex<Vec<TcpStream>>>,
}

#[allow(dead_code)]
impl Relay {
    pub fn start(to: u16) -> Relay {
        use std::sync::atomic::Ordering::SeqCst;
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let relay = Relay {
            port,
            cut: Default::default(),
            open: Default::default(),
        };
        let (cut, open) = (relay.cut.clone(), relay.open.clone());
        std::thread::spawn(move || {
            for down in l.incoming().flatten() {
                let Ok(up) = TcpStream::connect(("127.0.0.1", to)) else {
                    continue;
                };
                if cut.load(SeqCst) {
                    continue;
                }
                let mut o = open.lock().unwrap();
                for (mut from, mut to) in [
                    (down.try_clone().unwrap(), up.try_clone().unwrap()),
                    (up.try_clone().unwrap(), down.try_clone().unwrap()),
                ] {
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from, &mut to);
                        let _ = to.shutdown(std::net::Shutdown::Both);
                    });
                }
                o.extend([down, up]);
            }
        });
        relay
    }

    /// Drops every relayed connection and refuses new ones until [`Relay::mend`].
    pub fn cut(&self) {
        self.cut.store(true, std::sync::atomic::Ordering::SeqCst);
        for s in self.open.lock().unwrap().drain(..) {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }

    pub fn mend(&self) {
        self.cut.store(false, std::sync::atomic::Ordering::SeqCst);
    }
}
