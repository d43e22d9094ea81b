//! The policy file: TOML schema, validation and compilation into a
//! [`CompiledPolicy`].
//!
//! The operator reference for the format is `docs/POLICY.md`. In short:
//!
//! ```toml
//! failure_mode = "open"
//! trusted_proxies = ["10.0.0.0/8"]
//!
//! [zones.per_ip]
//! size = "10m"
//! algorithm = "gcra"
//! rate = "10r/s"
//!
//! [classes.api]
//! match = [{ path_prefix = "/api/" }]
//!
//! [exempt.health]
//! match = [{ path = ["/healthz", "/readyz"] }]
//!
//! [[limit]]
//! class = "api"
//! zone = "per_ip"
//! key = "ip"
//! burst = 20
//! nodelay = true
//! ```
//!
//! Parsing never stops at the first semantic problem: all errors are
//! collected with their position ([`check_policy`]); [`parse_policy`] returns
//! the one that comes first in the file.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;
use std::path::Path;
use std::time::Duration;

use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::Deserialize;
use toml::Spanned;

use super::key::{KeyPart, KeySpec, VarMask};
use super::matching::{Class, Glob, PathTest, Shape, ValueMatcher};
use super::net::CidrSet;
use super::request::{ClientIpResolver, ForwardedSource, PreparedRequest, RequestView};

mod compile;
mod compile_class;
mod compile_limit;
mod compile_redis;
mod compile_zone;
pub mod files;
mod host;
mod lines;
mod model;
mod spec;
mod units;
pub mod zone_size;

pub use compile::MAX_LIMITS;
use compile::*;
use compile_class::*;
use compile_limit::*;
use compile_redis::*;
use compile_zone::*;
pub use host::{HostCluster, HostLimit, HostLimits, HostZone};
pub use lines::LineIndex;
pub use model::*;
use spec::*;
pub use units::*;

/// The class of limits the host selects itself (`class = "@host"`).
pub const HOST_CLASS: &str = "@host";

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

/// A problem in a policy file, with its position.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyError {
    /// File name, if the policy came from a file (or the caller named it).
    pub file: Option<String>,
    /// 1-based line; 0 when the error has no position (e.g. the file could
    /// not be read).
    pub line: usize,
    /// 1-based column in characters; 0 when there is no position.
    pub column: usize,
    /// What is wrong, and what would be right.
    pub message: String,
}

impl fmt::Display for PolicyError {
    /// `file:line:col: message` (parts that are unknown are left out).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(file) = &self.file {
            write!(f, "{file}:")?;
        }
        if self.line > 0 {
            write!(f, "{}:{}:", self.line, self.column)?;
        }
        if self.file.is_some() || self.line > 0 {
            f.write_str(" ")?;
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for PolicyError {}

/// 1-based (line, column) of a byte offset; the column counts characters.
fn line_col(src: &str, offset: usize) -> (usize, usize) {
    LineIndex::new(src).line_col(offset)
}

// ---------------------------------------------------------------------------
// Entry points
// ---------------------------------------------------------------------------

/// Parse and compile a policy; on failure, the first error in file order.
pub fn parse_policy(src: &str, file: Option<&str>) -> Result<CompiledPolicy, PolicyError> {
    check_policy(src, file).map_err(|mut errs| errs.swap_remove(0))
}

/// Parse and compile a policy; on failure, every error found, in file order
/// (a TOML syntax or schema error stops parsing, so it comes alone).
pub fn check_policy(src: &str, file: Option<&str>) -> Result<CompiledPolicy, Vec<PolicyError>> {
    let lines = LineIndex::new(src);
    let mk = |offset: Option<usize>, message: String| {
        let (line, column) = offset.map_or((1, 1), |o| lines.line_col(o));
        PolicyError {
            file: file.map(str::to_owned),
            line,
            column,
            message,
        }
    };
    let spec: FileSpec = match toml::from_str(src) {
        Ok(s) => s,
        Err(e) => {
            return Err(vec![mk(
                e.span().map(|s| s.start),
                e.message().trim_end().to_owned(),
            )])
        }
    };
    compile_spec(src, spec)
        .map_err(|errors| errors.into_iter().map(|(o, m)| mk(Some(o), m)).collect())
}

/// Read, parse and compile a policy file.
pub fn load_policy(path: &Path) -> Result<CompiledPolicy, PolicyError> {
    let name = path.display().to_string();
    let src = files::read_policy(path).map_err(|e| PolicyError {
        file: Some(name.clone()),
        line: 0,
        column: 0,
        message: format!("cannot read policy: {e}"),
    })?;
    parse_policy(policy_text(&src, Some(&name))?, Some(&name))
}

/// `src` as text, or an error at the line and column of its first byte that is not UTF-8.
pub fn policy_text<'s>(src: &'s [u8], file: Option<&str>) -> Result<&'s str, PolicyError> {
    std::str::from_utf8(src).map_err(|e| {
        let good = e.valid_up_to();
        // The prefix up to `valid_up_to` is valid UTF-8 by definition.
        let before = std::str::from_utf8(&src[..good]).unwrap_or("");
        let (line, column) = line_col(before, good);
        PolicyError {
            file: file.map(str::to_owned),
            line,
            column,
            message: format!(
                "the policy is not valid UTF-8 (byte {:#04x}); save it as UTF-8",
                src[good]
            ),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("512"), Ok(512));
        assert_eq!(parse_size("512k"), Ok(512 << 10));
        assert_eq!(parse_size("10M"), Ok(10 << 20));
        assert_eq!(parse_size("1g"), Ok(1 << 30));
        assert!(parse_size("10mb").unwrap_err().contains("\"mb\""));
        assert!(parse_size("m").is_err());
        assert!(parse_size("99999999999999999999").is_err());
    }

    #[test]
    fn rates() {
        let r = parse_rate("10r/s").unwrap();
        assert_eq!(r.interval_ns(), Ok(100_000_000));
        assert_eq!(parse_rate("30r/m").unwrap(), Rate::per_minute(30));
        assert_eq!(parse_rate("100r/h").unwrap().to_string(), "100r/h");
        assert_eq!(parse_rate("1000r/d").unwrap(), Rate::per_day(1000));
        assert_eq!(
            parse_rate("5r/w").unwrap_err(),
            "unknown rate unit \"r/w\"; expected r/s, r/m, r/h or r/d"
        );
        assert!(parse_rate("0r/s").is_err());
        assert!(parse_rate("r/s").is_err());
        assert!(parse_rate("10/s").is_err());
    }

    #[test]
    fn durations() {
        let ms = |s| parse_duration(s).map(|d| d.as_millis() as u64);
        assert_eq!(ms("1s"), Ok(1000));
        assert_eq!(ms("500ms"), Ok(500));
        assert_eq!(ms("1h30m"), Ok(5_400_000));
        assert_eq!(ms("1h 30m"), Ok(5_400_000));
        assert_eq!(ms("7d"), Ok(7 * 86_400_000));
        assert_eq!(ms("90"), Ok(90_000));
        assert_eq!(ms("1m30"), Ok(90_000));
        assert_eq!(ms("1M"), Ok(30 * 86_400_000));
        assert_eq!(ms("1w1d"), Ok(8 * 86_400_000));
        assert!(parse_duration("30m1h")
            .unwrap_err()
            .contains("largest first"));
        assert!(parse_duration("1m1m").is_err());
        assert!(parse_duration("5x").unwrap_err().contains("\"x\""));
        assert!(parse_duration("").is_err());
        assert!(parse_duration("h").is_err());
    }

    #[test]
    fn line_cols() {
        let s = "ab\ncdé f\n";
        assert_eq!(line_col(s, 0), (1, 1));
        assert_eq!(line_col(s, 3), (2, 1));
        assert_eq!(line_col(s, 8), (2, 5)); // after 'é' (2 bytes)
    }
}
