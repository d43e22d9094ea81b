//! A fixed number of requests through one of the benchmark's services, for counting
//! instructions (load-independent, unlike wall time on a shared machine):
//!
//! ```sh
//! cargo bench -p weir-tower --bench layer_instructions --no-run   # prints the binary's path
//! for n in 1000 11000; do valgrind --tool=callgrind --callgrind-out-file=cg.$n BIN weir $n; done
//! # instructions per request = (total(11000) - total(1000)) / 10000
//! ```
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
    for _ in 0..n {
        let status = match which.as_str() {
            "inner" => run(&inner),
            "governor" => run(&governor),
            "weir" => run(&weir),
            "weir-concurrency" => run(&weir_conc),
            other => panic!("unknown service {other}"),
        };
        assert_eq!(status, 200);
    }
}
