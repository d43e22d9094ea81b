//! A fixed number of requests through one of the benchmark's services, for counting
//! instructions (load-independent, unlike wall time on a shared machine):
//!
//! ```sh
//! cargo bench -p weir-tower --bench layer_instructions --no-run   # prints the binary's path
//! for n in 1000 11000; do
//!     valgrind --tool=callgrind --toggle-collect='layer_instructions::measure*' BIN weir $n
//! done
//! # instructions per request = (total(11000) - total(1000)) / 10000
//! ```
//!
//! Only [`measure`] is counted: the set-up before it varies from run to run by more than a
//! layer costs (tower_governor's clock calibrates itself against the time it takes).
//!
//! Services: `inner`, `governor`, `weir`, `weir-concurrency`. Without arguments (as under
//! `cargo bench`) it does nothing.

mod setup;

use setup::{run, services};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(which), Some(Ok(n))) = (args.first(), args.get(1).map(|n| n.parse::<usize>())) else {
        eprintln!("usage: layer_instructions inner|governor|weir|weir-concurrency N");
        return;
    };
    let (inner, governor, weir, weir_conc) = services();
    match which.as_str() {
        "inner" => measure(&inner, n),
        "governor" => measure(&governor, n),
        "weir" => measure(&weir, n),
        "weir-concurrency" => measure(&weir_conc, n),
        other => panic!("unknown service {other}"),
    }
}

/// `n` requests through `svc`: what callgrind counts.
#[inline(never)]
fn measure<S, B>(svc: &S, n: usize)
where
    S: tower::Service<http::Request<axum::body::Body>, Response = http::Response<B>> + Clone,
    S::Error: std::fmt::Debug,
{
    for _ in 0..n {
        assert_eq!(run(svc), 200);
    }
}
