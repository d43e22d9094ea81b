//! `weir top URL`: poll a host's JSON status and show per-limit rates, sparklines, top keys and
//! clients, and bans; `--once` prints one snapshot (text, or `--json`). See docs/CLI.md.

pub mod fetch;
pub mod snapshot;
pub mod status;
mod term;
pub mod ui;

use std::io::IsTerminal;
use std::time::Duration;

/// What `weir top` was asked (its command-line arguments).
#[derive(clap::Args)]
pub struct Options {
    /// The status endpoint: nginx's weir_status location, Caddy's admin /weir/status, a
    /// StatusService route (`format=json` is added to the query; http:// only).
    pub url: String,
    /// Time between polls (`500ms`, `1s`, `2`, `1m`).
    #[arg(long, default_value = "1s", value_parser = parse_interval)]
    pub interval: Duration,
    /// Fetch one snapshot, print it and exit (no terminal needed).
    #[arg(long)]
    pub once: bool,
    /// With --once: print the snapshot as one JSON object (schema in docs/CLI.md).
    #[arg(long)]
    pub json: bool,
    /// Show only this limit.
    #[arg(long, value_name = "NAME")]
    pub limit: Option<String>,
    /// How many top keys and clients to print with --once.
    #[arg(long, default_value_t = 10)]
    pub top: usize,
}

/// Runs `weir top`; an error is one line for stderr.
pub fn run(o: &Options) -> Result<(), String> {
    let timeout = o
        .interval
        .clamp(Duration::from_secs(2), Duration::from_secs(10));
    let fetcher = fetch::Fetcher::new(&o.url, timeout)?;
    if !o.once {
        if o.json {
            return Err("--json needs --once".into());
        }
        if !std::io::stdout().is_terminal() {
            return Err("standard output is not a terminal: use --once (and --json)".into());
        }
        // Check the endpoint and the limit name before taking over the terminal.
        let status = fetcher.fetch()?;
        snapshot::derive(&status, &fetcher.url, o.limit.as_deref())?;
        return term::run(fetcher, o.interval, o.limit.clone())
            .map_err(|e| format!("terminal: {e}"));
    }
    let status = fetcher.fetch()?;
    let mut snap = snapshot::derive(&status, &fetcher.url, o.limit.as_deref())?;
    if o.json {
        for l in &mut snap.limits {
            for w in [&mut l.last_1m, &mut l.last_15m] {
                w.keys.truncate(o.top);
                w.clients.truncate(o.top);
            }
        }
        let json = serde_json::to_string(&snap).expect("snapshot serializes");
        println!("{}", crate::escape::json(&json));
    } else {
        print!("{}", crate::escape::text(&snapshot::text(&snap, o.top)));
    }
    Ok(())
}

/// An interval option: seconds with an optional unit, `500ms`, `1s`, `2`, `1m`.
pub fn parse_interval(s: &str) -> Result<Duration, String> {
    let (num, mul) = if let Some(n) = s.strip_suffix("ms") {
        (n, 0.001)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix('m') {
        (n, 60.0)
    } else {
        (s, 1.0)
    };
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("interval {s:?}: a number of seconds, or with ms, s or m"))?;
    let d = v * mul;
    if !(0.1..=3600.0).contains(&d) {
        return Err(format!("interval {s:?}: between 100ms and 1h"));
    }
    Ok(Duration::from_secs_f64(d))
}
