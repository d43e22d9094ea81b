//! The size rules every host applies when it creates a zone's table, checked when a policy is
//! parsed: `weir check`, `nginx -t` and `caddy validate` refuse a zone no host could create,
//! at the line and column of its `size`.

use super::Algorithm;
use crate::table::{LogTable, SlidingLog, Table, MIN_CAPACITY, SLOT_BYTES};

/// Fewest bytes a zone of `algorithm` can live in: a slot table of [`MIN_CAPACITY`] keys, or
/// for a sliding_log zone the slot table's header followed by a log table of one key (the layout of
/// `log_for` in [`crate::policy::engine`]). `None` when the log parameters are invalid.
pub fn min_zone_bytes(algorithm: &Algorithm) -> Option<u64> {
    let bytes = match *algorithm {
        Algorithm::SlidingLog { events, window } => {
            let log = SlidingLog::new(events, window.as_nanos() as u64).ok()?;
            let header = Table::bytes_for(0) - MIN_CAPACITY * SLOT_BYTES;
            header + LogTable::bytes_for(&log, 1)
        }
        _ => Table::bytes_for(MIN_CAPACITY),
    };
    Some(bytes as u64)
}

/// Why no host can create a zone of `size` bytes for `algorithm`, if so.
pub(crate) fn size_error(size: u64, algorithm: &Algorithm) -> Option<String> {
    if size > isize::MAX as u64 {
        return Some(format!(
            "size {size} is more than this machine can address ({} bytes)",
            isize::MAX
        ));
    }
    let min = min_zone_bytes(algorithm)?;
    if size >= min {
        return None;
    }
    let kib = min.div_ceil(1024);
    Some(match *algorithm {
        Algorithm::SlidingLog { events, .. } => format!(
            "size {size} holds no key: a sliding_log zone of {events} events needs at least {min} bytes (\"{kib}k\"; {} bytes per key)",
            8 * events.next_multiple_of(2) + 16
        ),
        _ => format!("size {size} is too small: a zone needs at least {min} bytes (\"{kib}k\")"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::MAX_LOG_EVENTS;
    use std::time::Duration;

    /// The minimum is exactly what the tables accept: one byte less is refused by them too.
    #[test]
    fn the_minimum_is_what_the_tables_accept() {
        let gcra = Algorithm::Concurrency { max: 1 };
        let min = min_zone_bytes(&gcra).unwrap() as usize;
        assert!(Table::new(min, 1, 0).is_ok());
        assert!(Table::new(min - 1, 1, 0).is_err());
        for events in [1, 10, MAX_LOG_EVENTS] {
            let window = Duration::from_secs(1);
            let alg = Algorithm::SlidingLog { events, window };
            let min = min_zone_bytes(&alg).unwrap() as usize;
            let log = SlidingLog::new(events, window.as_nanos() as u64).unwrap();
            let skip = min - LogTable::bytes_for(&log, 1);
            assert_eq!(LogTable::capacity_for(&log, min - skip), 1);
            assert_eq!(LogTable::capacity_for(&log, min - 1 - skip), 0);
            assert!(size_error(min as u64, &alg).is_none());
            assert!(size_error(min as u64 - 1, &alg).is_some());
        }
    }
}
