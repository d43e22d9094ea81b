//! How a syncer reaches the server holding a zone's counters: one server, a Redis Cluster
//! (seed nodes; commands go to the node owning each key's slot) or the master a set of
//! Sentinels names (asked again at every reconnect, so a failover is followed); over TCP, a
//! Unix socket or TLS (`rediss://`, rustls, with an optional private CA and client
//! certificate). Every step, the Sentinel queries included, has the syncer's I/O timeout
//! (redis-rs's own Sentinel client has none: a silent Sentinel would hold the syncer, and an
//! engine's drop, for minutes). Building a [`Source`] does no I/O: the policy compiler builds
//! one to check a zone's settings.

use std::time::Duration;

use redis::cluster::{ClusterClient, ClusterClientBuilder, ClusterConnection, ClusterPipeline};
use redis::{Client, ConnectionAddr, ConnectionInfo, IntoConnectionInfo, RedisResult};

use super::{url_password, ClusterSpec, RedisMode, TlsFiles};

/// Where connections come from.
pub(super) enum Source {
    One(Client),
    Cluster(ClusterClient),
    Sentinel(Box<Sentinels>),
}

/// The Sentinels of a master and how to reach the master they name.
pub(super) struct Sentinels {
    sentinels: Vec<Client>,
    master: String,
    /// The master's database and credentials.
    redis: redis::RedisConnectionInfo,
    /// TLS to the master (when the Sentinels' URLs are `rediss://`), with these certificates.
    tls: Option<redis::TlsCertificates>,
}

/// A live connection: to one server (standalone, or the master found through Sentinels), or
/// to a Redis Cluster (one socket per node, opened as slots are used).
pub(super) enum Conn {
    One(redis::Connection),
    Cluster(Box<ClusterConnection>),
}

/// A pipeline of per-key commands for [`Conn::query`]. Every command touches one key, so a
/// cluster pipeline splits it by node without changing what each command does (each is atomic
/// on its key; no command depends on another's key).
pub(super) enum Pipe {
    One(redis::Pipeline),
    Cluster(ClusterPipeline),
}

macro_rules! both {
    ($pipe:expr, $p:ident => $e:expr) => {
        match $pipe {
            Pipe::One($p) => {
                $e;
            }
            Pipe::Cluster($p) => {
                $e;
            }
        }
    };
}

impl Pipe {
    /// `INCRBY k d` (its reply kept) and `PEXPIRE k ttl_ms` (reply ignored).
    pub(super) fn incr(&mut self, k: &str, d: u64, ttl_ms: u64) {
        both!(self, p => {
            p.cmd("INCRBY").arg(k).arg(d);
            p.cmd("PEXPIRE").arg(k).arg(ttl_ms).ignore()
        });
    }

    /// `GET k`.
    pub(super) fn get(&mut self, k: &str) {
        both!(self, p => p.cmd("GET").arg(k));
    }

    /// `EVALSHA sha 1 k args…`, or `EVAL script 1 k args…` when `load` (the server does not
    /// know the script yet: a first sync, a restart, a flush, a failover).
    pub(super) fn eval(&mut self, script: &Lua, load: bool, k: &str, args: &[u64]) {
        both!(self, p => {
            let c = if load {
                p.cmd("EVAL").arg(script.code)
            } else {
                p.cmd("EVALSHA").arg(script.get_hash())
            };
            c.arg(1).arg(k).arg(args)
        });
    }
}

/// A Lua script and its SHA1 (`EVALSHA` sends the hash, not the code).
pub(super) struct Lua {
    pub(super) code: &'static str,
    pub(super) script: redis::Script,
}

impl Lua {
    pub(super) fn new(code: &'static str) -> Lua {
        Lua {
            code,
            script: redis::Script::new(code),
        }
    }

    fn get_hash(&self) -> &str {
        self.script.get_hash()
    }
}

impl Conn {
    pub(super) fn pipe(&self) -> Pipe {
        match self {
            Conn::One(_) => Pipe::One(redis::pipe()),
            Conn::Cluster(_) => Pipe::Cluster(redis::cluster::cluster_pipe()),
        }
    }

    /// The replies of `pipe`'s kept commands, in order.
    pub(super) fn query<T: redis::FromRedisValue>(&mut self, pipe: &Pipe) -> RedisResult<Vec<T>> {
        match (pipe, self) {
            (Pipe::One(p), Conn::One(c)) => p.query(c),
            (Pipe::Cluster(p), Conn::Cluster(c)) => p.query(c),
            _ => Err((
                redis::ErrorKind::ClientError,
                "pipeline of another connection",
            )
                .into()),
        }
    }

    /// Proves the server (every cluster primary) answers.
    pub(super) fn ping(&mut self) -> RedisResult<()> {
        match self {
            Conn::One(c) => redis::cmd("PING").query(c),
            Conn::Cluster(c) => redis::cmd("PING").query(c.as_mut()),
        }
    }
}

fn certificates(tls: &TlsFiles) -> redis::TlsCertificates {
    redis::TlsCertificates {
        client_tls: tls
            .client
            .as_ref()
            .map(|(cert, key)| redis::ClientTlsConfig {
                client_cert: cert.clone(),
                client_key: key.clone(),
            }),
        root_cert: tls.ca.clone(),
    }
}

fn is_tls(info: &ConnectionInfo) -> bool {
    matches!(info.addr, ConnectionAddr::TcpTls { .. })
}

impl Source {
    /// The zone's client (no I/O). Errors name what is wrong with the settings.
    pub(super) fn new(spec: &ClusterSpec, io_timeout: Duration) -> RedisResult<Source> {
        let mut infos = spec
            .redis
            .iter()
            .map(|u| u.as_str().into_connection_info())
            .collect::<RedisResult<Vec<_>>>()?;
        if infos.is_empty() {
            return Err((redis::ErrorKind::InvalidClientConfig, "no redis URL").into());
        }
        let password = spec.password.clone();
        let certs = certificates(&spec.tls);
        match &spec.mode {
            RedisMode::Standalone => {
                let mut info = infos.swap_remove(0);
                if let Some(p) = password {
                    info.redis.password = Some(p);
                }
                let c = if is_tls(&info) {
                    Client::build_with_tls(info, certs)?
                } else {
                    Client::open(info)?
                };
                Ok(Source::One(c))
            }
            RedisMode::Cluster => {
                let tls = infos.iter().any(is_tls);
                let mut b = ClusterClientBuilder::new(infos)
                    .connection_timeout(io_timeout)
                    .response_timeout(io_timeout)
                    // A redirect (MOVED/ASK, a resharding) is retried at once; a node that
                    // does not answer fails the sync, which backs off as for one server.
                    .retries(2)
                    .min_retry_wait(5)
                    .max_retry_wait(50);
                if let Some(p) = password {
                    b = b.password(p);
                }
                if tls {
                    b = b.certs(certs);
                }
                Ok(Source::Cluster(b.build()?))
            }
            RedisMode::Sentinel { master } => {
                // The master's password: `password`, else the first URL's (the Sentinels'
                // own credentials stay in their URLs).
                let mut redis = infos[0].redis.clone();
                redis.password = password.or_else(|| url_password(&spec.redis[0]));
                let tls = infos.iter().any(is_tls).then_some(certs);
                let sentinels = infos
                    .into_iter()
                    .map(|i| match &tls {
                        Some(c) => Client::build_with_tls(i, c.clone()),
                        None => Client::open(i),
                    })
                    .collect::<RedisResult<_>>()?;
                Ok(Source::Sentinel(Box::new(Sentinels {
                    sentinels,
                    master: master.clone(),
                    redis,
                    tls,
                })))
            }
        }
    }

    /// A new connection with read/write timeouts `t` (Sentinel: to the master the Sentinels
    /// name now).
    pub(super) fn connect(&mut self, t: Duration) -> RedisResult<Conn> {
        let one = |client: &Client| -> RedisResult<redis::Connection> {
            let c = client.get_connection_with_timeout(t)?;
            c.set_read_timeout(Some(t))?;
            c.set_write_timeout(Some(t))?;
            Ok(c)
        };
        match self {
            Source::One(client) => one(client).map(Conn::One),
            Source::Sentinel(s) => s.master(one).map(Conn::One),
            Source::Cluster(client) => {
                let c = client.get_connection()?;
                c.set_read_timeout(Some(t))?;
                c.set_write_timeout(Some(t))?;
                Ok(Conn::Cluster(Box::new(c)))
            }
        }
    }
}

impl Sentinels {
    /// A connection to the master: the first Sentinel that answers names it, and the server
    /// there must say it is a master (`ROLE`: right after a failover a Sentinel may still
    /// name the old one).
    fn master(
        &self,
        one: impl Fn(&Client) -> RedisResult<redis::Connection>,
    ) -> RedisResult<redis::Connection> {
        let mut last: redis::RedisError =
            (redis::ErrorKind::ClientError, "no Sentinel given").into();
        for s in &self.sentinels {
            let found = one(s).and_then(|mut c| {
                redis::cmd("SENTINEL")
                    .arg("get-master-addr-by-name")
                    .arg(&self.master)
                    .query::<Option<(String, u16)>>(&mut c)
            });
            let (host, port) = match found {
                Ok(Some(a)) => a,
                Ok(None) => {
                    last = (
                        redis::ErrorKind::ClientError,
                        "the Sentinel knows no such master",
                    )
                        .into();
                    continue;
                }
                Err(e) => {
                    last = e;
                    continue;
                }
            };
            let info = ConnectionInfo {
                addr: match self.tls {
                    Some(_) => ConnectionAddr::TcpTls {
                        host,
                        port,
                        insecure: false,
                        tls_params: None,
                    },
                    None => ConnectionAddr::Tcp(host, port),
                },
                redis: self.redis.clone(),
            };
            let client = match &self.tls {
                Some(c) => Client::build_with_tls(info, c.clone())?,
                None => Client::open(info)?,
            };
            let mut conn = one(&client)?;
            let role: Vec<redis::Value> = redis::cmd("ROLE").query(&mut conn)?;
            if matches!(role.first(), Some(redis::Value::BulkString(r)) if r == b"master") {
                return Ok(conn);
            }
            last = (
                redis::ErrorKind::ClientError,
                "the server the Sentinel names is not a master (failover in progress?)",
            )
                .into();
        }
        Err(last)
    }
}

/// Checks that a zone's settings make a client (the policy compiler's last check).
pub(crate) fn check_spec(spec: &ClusterSpec) -> Result<(), String> {
    Source::new(spec, Duration::from_secs(1))
        .map(drop)
        .map_err(|e| e.to_string())
}
