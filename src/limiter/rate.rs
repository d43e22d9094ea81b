//! Request rates: `N r/s`, `r/m`, `r/h`, `r/d`.

use std::fmt;
use std::ops::Range;

use super::{ParamError, NS_PER_SEC};

/// Largest count [`Rate::parse`] accepts (per unit): one request per nanosecond at `r/s`.
pub const MAX_RATE_COUNT: u64 = 1_000_000_000;

/// Why a rate does not parse.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RateError {
    pub message: String,
    /// The bytes of the input the message is about (the unit), when it is about one part.
    pub span: Option<Range<usize>>,
}

impl fmt::Display for RateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for RateError {}

/// A rate of `count` requests per `period_ns`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rate {
    pub count: u64,
    pub period_ns: u64,
}

impl Rate {
    pub fn per_second(count: u64) -> Rate {
        Rate {
            count,
            period_ns: NS_PER_SEC,
        }
    }
    pub fn per_minute(count: u64) -> Rate {
        Rate {
            count,
            period_ns: 60 * NS_PER_SEC,
        }
    }
    pub fn per_hour(count: u64) -> Rate {
        Rate {
            count,
            period_ns: 3600 * NS_PER_SEC,
        }
    }
    pub fn per_day(count: u64) -> Rate {
        Rate {
            count,
            period_ns: 86_400 * NS_PER_SEC,
        }
    }

    /// Parses `10r/s`, `30r/m`, `100r/h`, `1000r/d` (nginx's syntax plus `r/h` and `r/d`): a
    /// count from 1 to [`MAX_RATE_COUNT`] and a unit, nothing else. The one rate parser of weir:
    /// the policy loader points its errors at [`RateError::span`].
    pub fn parse(s: &str) -> Result<Rate, RateError> {
        let digits = s.bytes().take_while(u8::is_ascii_digit).count();
        let bad = || {
            RateError {
            message: format!("invalid rate {s:?}; expected requests per unit like \"10r/s\", \"30r/m\", \"100r/h\" or \"1000r/d\""),
            span: None,
        }
        };
        if digits == 0 || !s[digits..].starts_with('r') {
            return Err(bad());
        }
        let count: u64 = s[..digits].parse().map_err(|_| bad())?;
        let rate = match &s[digits..] {
            "r/s" => Rate::per_second(count),
            "r/m" => Rate::per_minute(count),
            "r/h" => Rate::per_hour(count),
            "r/d" => Rate::per_day(count),
            u => {
                return Err(RateError {
                    message: format!("unknown rate unit {u:?}; expected r/s, r/m, r/h or r/d"),
                    span: Some(digits..s.len()),
                })
            }
        };
        if count == 0 {
            return Err(RateError {
                message: format!("rate {s:?} admits nothing; the count must be at least 1"),
                span: None,
            });
        }
        if count > MAX_RATE_COUNT {
            return Err(RateError {
                message: format!("rate {s:?} is too high; at most {MAX_RATE_COUNT} per unit"),
                span: None,
            });
        }
        Ok(rate)
    }

    /// Time between two conforming requests (the GCRA emission interval), in whole ns.
    pub fn interval_ns(&self) -> Result<u64, ParamError> {
        if self.count == 0 {
            return Err(ParamError(
                "rate must be at least 1 request per period".into(),
            ));
        }
        let t = self.period_ns / self.count;
        if t == 0 {
            return Err(ParamError(format!(
                "rate {} per {} ns is faster than one request per nanosecond",
                self.count, self.period_ns
            )));
        }
        Ok(t)
    }
}

/// Writes the syntax [`Rate::parse`] reads (`10r/s`); a period other than a second, minute or
/// hour is written as days.
impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let u = match self.period_ns / NS_PER_SEC {
            1 => "s",
            60 => "m",
            3600 => "h",
            _ => "d",
        };
        write!(f, "{}r/{u}", self.count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_unit() {
        assert_eq!(
            Rate::parse("10r/s").unwrap().interval_ns().unwrap(),
            100_000_000
        );
        assert_eq!(
            Rate::parse("1r/m").unwrap().interval_ns().unwrap(),
            60 * NS_PER_SEC
        );
        assert_eq!(
            Rate::parse("2r/h").unwrap().interval_ns().unwrap(),
            1800 * NS_PER_SEC
        );
        assert_eq!(
            Rate::parse("1r/d").unwrap().interval_ns().unwrap(),
            86_400 * NS_PER_SEC
        );
    }

    #[test]
    fn rejects_bad_rates_with_a_hint() {
        let e = Rate::parse("10r/w").unwrap_err();
        assert!(e.message.contains("expected r/s, r/m, r/h or r/d"));
        assert_eq!(e.span, Some(2..5));
        assert!(Rate::parse("0r/s")
            .unwrap_err()
            .message
            .contains("at least 1"));
        assert!(Rate::parse("1000000001r/s")
            .unwrap_err()
            .message
            .contains("too high"));
        assert!(Rate::parse("ten r/s").is_err());
        assert!(Rate::parse("10 r/s").is_err());
        assert!(Rate::parse("10").is_err());
        assert_eq!(Rate::parse("100r/h").unwrap().to_string(), "100r/h");
    }
}
