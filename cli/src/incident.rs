//! A deterministic synthetic incident log (examples/incident/): ten minutes of a wiki's nginx
//! access log in which, from minute 2 on, an anonymous zh-CN Chrome crawler spread over 3,000
//! addresses walks uncached tool pages in both URL shapes (`/w/Special:X/…` and
//! `/index.php?title=Special:X/…`), next to ordinary readers (pages plus versioned static
//! assets), logged-in editors (session cookie, logged with `$cookie_wiki_session`) and a load
//! balancer's health check every second.
//!
//! Each line's client address tells its group: 36.110.x.x–36.112.x.x crawler, 198.51.100.0/24 and
//! 192.0.2.0/24 readers, 203.0.113.0/24 editors, 10.0.0.2 the load balancer.

use std::io::{self, Write};

use crate::timefmt::{format_time_local, NS};

/// The nginx `log_format` the incident log is written in.
pub const LOG_FORMAT: &str = "$remote_addr - $remote_user [$time_local] \"$request\" $status \
     $body_bytes_sent \"$http_referer\" \"$http_user_agent\" \"$http_accept_language\" \
     \"$cookie_wiki_session\" $request_time";

/// 2026-12-02T03:00:00Z.
pub const START_NS: i64 = 1_796_180_400 * NS;
/// Ten minutes.
pub const DURATION_S: u64 = 600;
/// The crawler starts here (seconds after START).
pub const CRAWL_FROM_S: u64 = 120;
pub const CRAWLER_IPS: u32 = 3000;

const CHROME_ZH: &str = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 \
                         (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36";
const FIREFOX: &str = "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0";
const TOOLS: [&str; 3] = ["WhatLinksHere", "RecentChangesLinked", "Contributions"];

struct Rng(u64);
impl Rng {
    fn next(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

struct Line {
    t_ms: u64,
    text: String,
}

/// The crawler's address number `i` (0..3000).
pub fn crawler_ip(i: u32) -> String {
    format!("36.{}.{}.{}", 110 + i / 1000, (i / 4) % 250, 1 + i % 4 * 60)
}

/// Writes the log; returns the number of lines.
pub fn generate(out: &mut dyn Write) -> io::Result<u64> {
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let mut lines: Vec<Line> = Vec::new();
    let mut push = |t_ms: u64,
                    ip: &str,
                    req: &str,
                    status: u16,
                    ua: &str,
                    lang: &str,
                    cookie: &str| {
        let t = START_NS + (t_ms as i64) * 1_000_000;
        lines.push(Line {
            t_ms,
            text: format!(
                "{ip} - - [{}] \"{req} HTTP/1.1\" {status} {} \"-\" \"{ua}\" \"{lang}\" \"{cookie}\" 0.{:03}",
                format_time_local(t),
                800 + t_ms % 40_000,
                t_ms % 97
            ),
        });
    };
    let dur_ms = DURATION_S * 1000;

    // The load balancer: every second.
    for s in 0..DURATION_S {
        push(
            s * 1000,
            "10.0.0.2",
            "GET /healthz",
            200,
            "ELB-HealthChecker/2.0",
            "-",
            "-",
        );
    }
    // Readers: 120 addresses, a page every 10–30 s, each with its versioned CSS and JS.
    for i in 0..120u32 {
        let ip = if i < 60 {
            format!("198.51.100.{}", i + 10)
        } else {
            format!("192.0.2.{}", i - 50)
        };
        let mut t = rng.next(20_000);
        while t < dur_ms {
            let page = rng.next(5000);
            push(
                t,
                &ip,
                &format!("GET /wiki/Article_{page}"),
                200,
                FIREFOX,
                "en-US,en;q=0.5",
                "-",
            );
            push(
                t + 150,
                &ip,
                "GET /app.css?v=3",
                200,
                FIREFOX,
                "en-US,en;q=0.5",
                "-",
            );
            push(
                t + 160,
                &ip,
                "GET /load.js?v=7",
                200,
                FIREFOX,
                "en-US,en;q=0.5",
                "-",
            );
            t += 10_000 + rng.next(20_000);
        }
    }
    // Logged-in editors: the same tool pages the crawler walks, plus edits.
    for i in 0..20u32 {
        let ip = format!("203.0.113.{}", 10 + i);
        let cookie = format!("ed{i:02}{:08x}", rng.next(1 << 32));
        let mut t = rng.next(15_000);
        while t < dur_ms {
            let page = rng.next(5000);
            let req = match rng.next(3) {
                0 => format!("GET /w/Special:WhatLinksHere/Draft_{page}"),
                1 => format!("GET /index.php?title=Special%3ARecentChangesLinked%2FDraft_{page}"),
                _ => format!("POST /index.php?title=Draft_{page}&action=submit"),
            };
            push(t, &ip, &req, 200, FIREFOX, "en-US,en;q=0.5", &cookie);
            t += 5_000 + rng.next(20_000);
        }
    }
    // The crawler: 3,000 addresses, 3–6 requests each between minute 2 and the end.
    for i in 0..CRAWLER_IPS {
        let ip = crawler_ip(i);
        for _ in 0..3 + rng.next(4) {
            let t = CRAWL_FROM_S * 1000 + rng.next(dur_ms - CRAWL_FROM_S * 1000);
            let tool = TOOLS[rng.next(3) as usize];
            let page = rng.next(100_000);
            let req = if rng.next(2) == 0 {
                format!("GET /w/Special:{tool}/Page_{page}")
            } else {
                format!("GET /index.php?title=Special%3A{tool}%2FPage_{page}&limit=500")
            };
            push(t, &ip, &req, 200, CHROME_ZH, "zh-CN,zh;q=0.9", "-");
        }
    }
    lines.sort_by_key(|l| l.t_ms);
    // nginx writes a line when the response ends: a few slow responses appear after lines that
    // started later. Move every 150th line 1–3 s further down the log.
    let mut order: Vec<(u64, usize)> = lines
        .iter()
        .enumerate()
        .map(|(k, l)| {
            let delay = if k % 150 == 7 {
                1000 + (k as u64 % 3) * 1000
            } else {
                0
            };
            (l.t_ms + delay, k)
        })
        .collect();
    order.sort();
    let mut w = io::BufWriter::new(out);
    for (_, k) in &order {
        writeln!(w, "{}", lines[*k].text)?;
    }
    w.flush()?;
    Ok(order.len() as u64)
}
