//! Writes the synthetic incident log: `cargo run -p weir-cli --example gen_incident -- OUT`
//! (`OUT` ending in `.gz` is gzip-compressed). The committed copy is
//! examples/incident/access.log.gz; `cargo test -p weir-cli` checks it matches this generator.

use std::fs::File;
use std::io::Write;

fn main() -> std::io::Result<()> {
    let out = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "examples/incident/access.log.gz".into());
    let f = File::create(&out)?;
    let n = if out.ends_with(".gz") {
        let mut gz = flate2::write::GzEncoder::new(f, flate2::Compression::best());
        let n = weir_cli::incident::generate(&mut gz)?;
        gz.finish()?.flush()?;
        n
    } else {
        let mut f = f;
        weir_cli::incident::generate(&mut f)?
    };
    eprintln!("{out}: {n} lines");
    Ok(())
}
