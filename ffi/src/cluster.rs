//! Cluster zones: starting and stopping the syncers, and their log for hosts whose logger
//! must not be called from a foreign thread.

use std::collections::VecDeque;
use std::ffi::c_int;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;
use std::sync::Mutex;

use weir::policy::config::CompiledPolicy;
use weir::policy::Engine;

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

/// 1 when the engine's policy has a cluster zone (whose syncers `weir_engine_start_sync`
/// starts), 0 when not or for NULL.
#[no_mangle]
pub unsafe extern "C" fn weir_engine_has_cluster(e: *const weir_engine) -> c_int {
    let Some(e) = e.as_ref() else {
        return 0;
    };
    catch_unwind(AssertUnwindSafe(|| {
        c_int::from(has_cluster(e.engine.policy()))
    }))
    .unwrap_or(0)
}

fn has_cluster(p: &CompiledPolicy) -> bool {
    Engine::layouts(p).iter().any(|l| l.cluster_bytes > 0)
}

/// `weir_engine_start_sync` for hosts whose own threads take signals (nginx workers): the
/// syncer threads start with every signal blocked, so that none is delivered to them.
/// WEIR_ERR_ZONE with the reason in `*err` when the signals cannot be blocked (no syncer
/// starts then).
#[no_mangle]
pub unsafe extern "C" fn weir_engine_start_sync_masked(
    e: *const weir_engine,
    err: *mut *mut weir_error,
) -> c_int {
    // SAFETY: sigset_t is plain data, initialised by sigfillset / pthread_sigmask; the mask
    // is this thread's own and restored before returning (threads inherit it when spawned).
    let mut all: libc::sigset_t = std::mem::zeroed();
    let mut old: libc::sigset_t = std::mem::zeroed();
    libc::sigfillset(&mut all);
    if libc::pthread_sigmask(libc::SIG_BLOCK, &all, &mut old) != 0 {
        return fail(err, WEIR_ERR_ZONE, "pthread_sigmask() failed");
    }
    let rc = weir_engine_start_sync(e, err);
    libc::pthread_sigmask(libc::SIG_SETMASK, &old, ptr::null_mut());
    rc
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

#[cfg(test)]
mod tests {
    use super::*;

    const LOCAL: &str = "[zones.l]\nsize = \"64k\"\nalgorithm = \"gcra\"\nrate = \"1r/s\"\n\
        [[limit]]\nname = \"l\"\nclass = \"*\"\nzone = \"l\"\n";
    const CLUSTER: &str = "[zones.c]\nsize = \"64k\"\nalgorithm = \"sliding\"\nevents = 100\n\
        window = \"1s\"\nscope = \"cluster\"\nredis = \"redis://127.0.0.1:1/0\"\n\
        expected_nodes = 2\n\
        [[limit]]\nname = \"c\"\nclass = \"*\"\nzone = \"c\"\nkey = \"global\"\n";

    #[test]
    fn cluster_zones_are_told_apart() {
        let local = CompiledPolicy::parse(LOCAL, None).unwrap();
        let cluster = CompiledPolicy::parse(CLUSTER, None).unwrap();
        assert!(!has_cluster(&local));
        assert!(has_cluster(&cluster));
        assert_eq!(unsafe { weir_engine_has_cluster(ptr::null()) }, 0);
        assert_eq!(
            unsafe { weir_engine_start_sync_masked(ptr::null(), ptr::null_mut()) },
            WEIR_ERR_NULL
        );
    }
}
