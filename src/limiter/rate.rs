//! Request rates: `N r/s`, `r/m`, `r/h`, `r/d`.

use super::{ParamError, NS_PER_SEC};

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

    /// Parses nginx's syntax, `10r/s` or `30r/m`, plus weir's `r/h` and `r/d`.
    pub fn parse(text: &str) -> Result<Rate, ParamError> {
        let t = text.trim();
        let at = t.find("r/").ok_or_else(|| {
            ParamError(format!(
                "invalid rate \"{t}\"; expected e.g. 10r/s, 30r/m, 100r/h or 1000r/d"
            ))
        })?;
        let count: u64 = t[..at].trim().parse().map_err(|_| {
            ParamError(format!(
                "invalid rate \"{t}\": \"{}\" is not a whole number",
                &t[..at]
            ))
        })?;
        let rate = match &t[at + 2..] {
            "s" => Rate::per_second(count),
            "m" => Rate::per_minute(count),
            "h" => Rate::per_hour(count),
            "d" => Rate::per_day(count),
            unit => {
                return Err(ParamError(format!(
                    "unknown rate unit \"r/{unit}\"; expected r/s, r/m, r/h or r/d"
                )))
            }
        };
        rate.interval_ns().map(|_| rate)
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
        assert!(Rate::parse("10r/w")
            .unwrap_err()
            .0
            .contains("expected r/s, r/m, r/h or r/d"));
        assert!(Rate::parse("0r/s").is_err());
        assert!(Rate::parse("ten r/s").is_err());
        assert!(Rate::parse("10").is_err());
    }
}
