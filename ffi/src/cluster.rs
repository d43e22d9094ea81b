//! Cluster zones: starting and stopping the syncers, and their log for hosts whose logger
//! must not be called from a foreign thread.

use std::collections::VecDeque;
use std::ffi::c_int;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;
use std::sync::Mutex;

use crate::{fail, guard, weir_engine, weir_error, WEIR_ERR_NULL, WEIR_ERR_ZONE, WEIR_OK};

/// Starts the engine's cluster syncer threads that are not running (see
/// `WEIR_ATTACH_DEFER_SYNC`); WEIR_OK when the policy has no cluster zone.
#[no_mangle]
pub unsafe extern "C" fn weir_engine_start_sync(
    e: *const weir_engine,
    err: *mut *mut weir_error,
) -> c_int {
    guard(|| {
        if e.is_null() {
            return fail(err, WEIR_ERR_NULL, "engine is NULL");
        }
        match (*e).engine.start_syncers() {
            Ok(()) => WEIR_OK,
            Err(m) => fail(err, WEIR_ERR_ZONE, m),
        }
    })
}

/// Stops the engine's cluster syncers and waits for them (at most one Redis I/O timeout,
/// ≤ 2 s); a leading syncer resigns so that another process takes over at once. Also done by
/// `weir_engine_free`. NULL is ignored.
#[no_mangle]
pub unsafe extern "C" fn weir_engine_stop_sync(e: *const weir_engine) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        if let Some(e) = e.as_ref() {
            e.engine.stop_syncers();
        }
    }));
}

// ---------------------------------------------------------------------------------------------
// Cluster log

/// Messages of the cluster syncers (sync failed / resumed) queued for the host, at most this
/// many; older ones are dropped when the host does not drain them.
const LOG_QUEUE: usize = 64;

static LOG: Mutex<VecDeque<String>> = Mutex::new(VecDeque::new());

fn queue_log(msg: &str) {
    let mut q = LOG.lock().unwrap_or_else(|e| e.into_inner());
    if q.len() == LOG_QUEUE {
        q.pop_front();
    }
    q.push_back(msg.to_owned());
}

/// Queues the cluster syncers' messages (which come from their threads) for
/// `weir_cluster_log_pop` instead of writing them to standard error: for hosts whose logger
/// must not be called from a foreign thread (nginx). At most 64 are kept; older ones are
/// dropped. Call before the syncers start.
#[no_mangle]
pub extern "C" fn weir_cluster_log_queue() {
    weir::cluster::set_log_hook(queue_log);
}

/// Takes the oldest queued cluster message: copies at most `cap` bytes of it into `buf` (not
/// NUL-terminated; a longer message is cut) and returns the number of bytes copied, 0 when
/// the queue is empty (or `buf` is NULL or `cap` 0). Call it from the host's own thread.
#[no_mangle]
pub unsafe extern "C" fn weir_cluster_log_pop(buf: *mut u8, cap: usize) -> usize {
    if buf.is_null() || cap == 0 {
        return 0;
    }
    catch_unwind(AssertUnwindSafe(|| {
        let Some(m) = LOG.lock().unwrap_or_else(|e| e.into_inner()).pop_front() else {
            return 0;
        };
        let n = m.len().min(cap);
        ptr::copy_nonoverlapping(m.as_ptr(), buf, n);
        n
    }))
    .unwrap_or(0)
}
