//! The cluster region: what every process sharing a cluster zone must see alike (nginx
//! workers), in one caller-given, position-independent region.

#[cfg(not(loom))]
use crate::region::{attach, header::Ident, Fresh, Region};
use crate::table::Table;

use super::StatsRef;

/// "WEIRCLS" + layout version byte: the head of a cluster zone's shared region.
#[cfg(not(loom))]
const SHARED_MAGIC: u64 = crate::region::header::magic(b"WEIRCLS", 2);
/// Identity words, then [`ClusterStats`], then the two tables.
const SHARED_HEAD: usize = 192;

/// Bytes of one table of the shared region, rounded so the next one stays 64-byte aligned.
fn shared_table_bytes(capacity: usize) -> usize {
    Table::bytes_for(capacity).next_multiple_of(crate::table::REGION_ALIGN)
}

/// Bytes of the shared region of a cluster zone whose local table has `capacity` slots
/// (see [`ClusterShared`]).
pub fn shared_bytes(capacity: usize) -> usize {
    SHARED_HEAD + 2 * shared_table_bytes(capacity)
}

/// What every process sharing a cluster zone must see alike, in one caller-given region
/// (nginx: a shared-memory zone per cluster zone), position-independent:
///
/// ```text
/// [0, 64)     magic "WEIRCLS\x02", region length, schema, capacity, reserved (zero)
/// [64, 192)   ClusterStats: last successful sync (the health word), counters, leader pid,
///             a pool's node id and figures
/// [192, …)    remote table: the other nodes' counts per key (a weir table); a pool's grants
/// […, end)    pushed table: what this node has already pushed per key, for the current and
///             previous window (packed like a sliding state), so that a newly elected syncer
///             continues where the previous one stopped
/// ```
pub struct ClusterShared {
    pub(super) stats: StatsRef,
    pub(super) remote: Table,
    pub(super) pushed: Table,
}

impl ClusterShared {
    /// Attaches to the shared region of a cluster zone (local table of `capacity` slots,
    /// zone `schema`), or formats it when it holds none of this layout (first start; a reload
    /// with the same zone keeps it). Returns whether the state was kept. `fresh` says whether
    /// a region to format is known to hold only zero bytes (fresh shared memory: only the
    /// headers are written). The region must be 64-byte aligned; formatting must not race
    /// with its users (nginx formats it in the master before forking workers).
    #[cfg(not(loom))]
    pub fn create_or_attach_in(
        region: Region,
        capacity: usize,
        schema: u64,
        fresh: Fresh,
    ) -> Result<(ClusterShared, bool), String> {
        let need = shared_bytes(capacity);
        if region.as_ptr() as usize % crate::table::REGION_ALIGN != 0 {
            return Err("cluster region is NULL or not 64-byte aligned".into());
        }
        if region.len() < need {
            return Err(format!(
                "cluster region of {} bytes, needs {need}",
                region.len()
            ));
        }
        let region = region.part(0, need);
        let words = region.words(SHARED_HEAD / 8);
        let ident = Ident {
            magic: SHARED_MAGIC,
            version: None,
            size: &[(1, need as u64), (3, capacity as u64)],
            schema: &[(2, schema)],
        };
        let tb = shared_table_bytes(capacity);
        let (remote_at, pushed_at) = (
            region.part(SHARED_HEAD, tb),
            region.part(SHARED_HEAD + tb, tb),
        );
        let attached = ident.check(|i| &words[i]).and_then(|()| {
            Ok((
                Table::attach_in(remote_at, 0)?,
                Table::attach_in(pushed_at, 0)?,
            ))
        });
        let (remote, pushed, kept) = match attached {
            Ok((r, p)) => (r, p, true),
            Err(_) => {
                // The tables first (their magics), then this region's identity.
                let mut tables = None;
                attach::format(
                    &region,
                    |i| &words[i],
                    &ident,
                    fresh,
                    || {
                        let made = |at| Table::format_in(at, 0, 0, Fresh::Zeroed);
                        tables = Some(made(remote_at).and_then(|r| Ok((r, made(pushed_at)?))));
                    },
                );
                let (r, p) = tables.expect("filled").map_err(|e| e.to_string())?;
                (r, p, false)
            }
        };
        let stats = StatsRef::Shared(region);
        Ok((
            ClusterShared {
                stats,
                remote,
                pushed,
            },
            kept,
        ))
    }
}
