//! Lease renewal: the process holding concurrency permits keeps them counted while its
//! requests run.

use std::ffi::c_int;

use crate::{guard, weir_engine, WEIR_ERR_NULL};

/// Renews the lease of every concurrency permit and queue place this process holds through
/// `e` that is older than the current lease (see `weir_engine_renew_interval_ns`). Without
/// it a request held longer than its limit's lease stops counting after one to two leases.
/// Safe from any thread, at the same time as requests; a permit released meanwhile is
/// released in its renewed lease. Returns how many moved (≥ 0), or WEIR_ERR_NULL. Costs a
/// scan of the engine's ledger (65,536 entries) plus one table update per renewed permit.
#[no_mangle]
pub unsafe extern "C" fn weir_engine_renew_held(e: *const weir_engine, now: u64) -> c_int {
    guard(|| {
        if e.is_null() {
            return WEIR_ERR_NULL;
        }
        c_int::try_from((*e).engine.renew_held(now)).unwrap_or(c_int::MAX)
    })
}

/// How often to call `weir_engine_renew_held`, in ns: a quarter of the shortest lease of
/// `e`'s concurrency limits. 0 when `e` is NULL or has no concurrency limit (nothing to
/// renew).
#[no_mangle]
pub unsafe extern "C" fn weir_engine_renew_interval_ns(e: *const weir_engine) -> u64 {
    if e.is_null() {
        return 0;
    }
    std::panic::catch_unwind(|| (*e).engine.renew_interval_ns().unwrap_or(0)).unwrap_or(0)
}
