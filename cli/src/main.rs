//! `weir`: check policies, replay access logs against a policy, watch a live status, inspect
//! or reset one key. See docs/CLI.md.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use weir_cli::{check, escape, key, replay, report, top};

#[derive(Parser)]
#[command(
    name = "weir",
    version,
    about = "weir rate-limit policies: check them, replay access logs against them, watch them live"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Compile policies: errors (exit 1) and warnings about known pitfalls, as file:line:col.
    Check {
        /// Exit 1 on warnings too.
        #[arg(short = 'D', long)]
        deny_warnings: bool,
        #[arg(required = true)]
        policies: Vec<PathBuf>,
    },
    /// Replay access logs through the engine in log-time order and report what each limit did.
    Replay {
        /// Policy file (TOML, docs/POLICY.md).
        #[arg(short, long)]
        policy: PathBuf,
        /// `combined`, `caddy-json`, or an nginx log_format string such as
        /// '$remote_addr [$time_iso8601] "$request" $status "$cookie_session"'.
        #[arg(short, long, default_value = "combined")]
        format: String,
        /// Print the report as JSON (schema in docs/CLI.md) instead of tables.
        #[arg(long)]
        json: bool,
        /// Write one JSON line per request (file, line, time, client, verdict, deciding limit).
        #[arg(long, value_name = "FILE.jsonl")]
        verdicts: Option<PathBuf>,
        /// Write a self-contained HTML report (the status page's charts): passed vs limited
        /// per limit per minute, top rejected keys and clients.
        #[arg(long, visible_alias = "html", value_name = "FILE.html")]
        timeline: Option<PathBuf>,
        /// Seconds of log time lines may be out of order and still replay in order.
        #[arg(long, default_value_t = 10, value_name = "SECONDS")]
        reorder_window: u64,
        /// Lines held for reordering at most (memory bound); past it the oldest replay early.
        #[arg(long, default_value_t = 1_000_000, value_name = "LINES")]
        max_buffered: usize,
        /// Bytes of parsed lines held for reordering at most (memory bound; `k`, `m`, `g`
        /// units); past it the oldest replay early.
        #[arg(long, default_value = "256m", value_name = "SIZE", value_parser = size)]
        max_buffered_bytes: usize,
        /// Longest log line parsed (`k`, `m`, `g` units); longer lines are malformed.
        #[arg(long, default_value = "4m", value_name = "SIZE", value_parser = size)]
        max_line_bytes: usize,
        /// Replay whole-second timestamps as given instead of spreading each second's requests
        /// evenly over that second.
        #[arg(long)]
        no_spread: bool,
        /// Caddy: use request.client_ip (already resolved by Caddy) as the peer address instead
        /// of request.remote_ip.
        #[arg(long)]
        caddy_client_ip: bool,
        /// How many top keys and clients to show per limit.
        #[arg(long, default_value_t = 10)]
        top: usize,
        /// Malformed lines to show on stderr.
        #[arg(long, default_value_t = 5, value_name = "N")]
        show_malformed: usize,
        /// No progress bar (it is only drawn when stderr is a terminal anyway).
        #[arg(long)]
        no_progress: bool,
        /// Log files in time order (oldest first); gzip is detected; `-` is stdin.
        #[arg(required = true, value_name = "LOG")]
        logs: Vec<String>,
    },
    /// Watch a host's JSON status live: per-limit rates, sparklines, top keys and clients, bans.
    Top(top::Options),
    /// One key's state in one limit, from a host's status endpoint; --reset forgets it,
    /// --unban lifts its ban (each change logs one audit line on the host).
    Key(key::Options),
}

/// A size option: bytes, or a number with `k`, `m` or `g` (powers of 1024).
fn size(s: &str) -> Result<usize, String> {
    let n = weir::policy::config::parse_size(s)?;
    usize::try_from(n).map_err(|_| format!("size {s:?} is too large"))
}

fn main() -> ExitCode {
    match Cli::parse().cmd {
        Cmd::Key(opts) => match key::run(&opts) {
            Ok(text) => {
                print!("{text}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("weir key: {}", escape::line(&e.message));
                ExitCode::from(if e.refused { 1 } else { 2 })
            }
        },
        Cmd::Top(opts) => match top::run(&opts) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("weir top: {}", escape::line(&e));
                ExitCode::from(2)
            }
        },
        Cmd::Check {
            deny_warnings,
            policies,
        } => {
            let (mut errors, mut warnings) = (0, 0);
            for p in &policies {
                let name = p.display().to_string();
                let src = match weir::policy::config::files::read_policy(p) {
                    Ok(s) => s,
                    Err(e) => {
                        eprintln!("{name}: error: cannot read: {e}");
                        errors += 1;
                        continue;
                    }
                };
                let diags = check::check_bytes(&src, &name);
                for d in &diags {
                    eprintln!("{}", escape::text(&d.render(&name)));
                }
                let (w, e): (Vec<_>, Vec<_>) = diags.iter().partition(|d| d.warning);
                errors += e.len();
                warnings += w.len();
                if e.is_empty() {
                    println!("{name}: ok ({} warnings)", w.len());
                }
            }
            if errors > 0 || (deny_warnings && warnings > 0) {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            }
        }
        Cmd::Replay {
            policy,
            format,
            json,
            verdicts,
            timeline,
            reorder_window,
            max_buffered,
            max_buffered_bytes,
            max_line_bytes,
            no_spread,
            caddy_client_ip,
            top,
            show_malformed,
            no_progress,
            logs,
        } => {
            let opts = replay::Options {
                policy: policy.clone(),
                format,
                caddy_client_ip,
                inputs: logs,
                window_s: reorder_window,
                spread: !no_spread,
                max_buffered,
                max_buffered_bytes,
                max_line: max_line_bytes,
                verdicts,
                top,
                progress: !no_progress,
                show_malformed,
            };
            let (r, tl) = match replay::run(&opts) {
                Ok(x) => x,
                Err(e) => {
                    eprintln!("weir replay: {}", escape::line(&e));
                    return ExitCode::from(2);
                }
            };
            if let Some(path) = timeline {
                let title = policy.display().to_string();
                if let Err(e) = std::fs::write(&path, tl.html(&r, &title)) {
                    eprintln!("weir replay: {}: {e}", path.display());
                    return ExitCode::from(2);
                }
            }
            // The report quotes the logs (keys, logged limit names): no control characters.
            if json {
                let json = serde_json::to_string_pretty(&r).expect("report serializes");
                println!("{}", escape::json(&json));
            } else {
                print!("{}", escape::text(&report::text(&r)));
            }
            ExitCode::SUCCESS
        }
    }
}
