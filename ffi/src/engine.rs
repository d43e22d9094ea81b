//! Engines: a policy with its zones' tables, in process memory or callers' regions; what
//! hosts read of them (limits, header names, counters, Prometheus text).

use std::ffi::{c_int, c_void};
use std::ptr;

use weir::policy::engine::{AttachError, AttachOptions, HostRegions};
use weir::policy::Engine;
use weir::region::{Fresh, Region};

use crate::{fail, give, guard, take_back, weir_error, weir_policy};
use crate::{WEIR_ERR_INVALID, WEIR_ERR_NULL, WEIR_ERR_ZONE, WEIR_OK};

/// A policy with its zones' tables: evaluates requests. Thread-safe.
pub struct weir_engine {
    pub(crate) engine: Engine,
}

/// A caller-provided memory region (e.g. an nginx shared-memory zone), 64-byte aligned.
#[repr(C)]
pub struct weir_region {
    pub ptr: *mut c_void,
    pub len: usize,
}

/// An engine with its zones in this process's memory.
#[no_mangle]
pub unsafe extern "C" fn weir_engine_new(
    p: *const weir_policy,
    out: *mut *mut weir_engine,
    err: *mut *mut weir_error,
) -> c_int {
    guard(|| {
        if p.is_null() || out.is_null() {
            return fail(err, WEIR_ERR_NULL, "policy or out is NULL");
        }
        *out = ptr::null_mut();
        match Engine::new((*p).policy.clone()) {
            Ok(engine) => give(out, weir_engine { engine }),
            Err(e) => fail(err, WEIR_ERR_ZONE, e),
        }
    })
}

/// An engine over caller-provided regions, one per zone in `weir_policy_zone` order, each at
/// least that zone's `bytes` long and 64-byte aligned. A region that already holds the zone
/// (an nginx reload) keeps its state; one created for another layout is refused.
/// `counters` (may be NULL: counters then live in this process) is a region of at least
/// `weir_policy_counters_bytes` bytes, 8-byte aligned, shared by every process that attaches,
/// so that all of them add to and report the same counters; it keeps its counts while the
/// policy's limits stay the same and starts from zero otherwise. Attach it first in one process
/// (nginx: the master's zone init) before others use it.
/// `clock_base` is recorded in newly created zones (pass 0 to use CLOCK_MONOTONIC as is).
/// The regions must outlive the engine.
#[no_mangle]
pub unsafe extern "C" fn weir_engine_attach(
    p: *const weir_policy,
    regions: *const weir_region,
    n: usize,
    counters: *const weir_region,
    clock_base: u64,
    out: *mut *mut weir_engine,
    err: *mut *mut weir_error,
) -> c_int {
    weir_engine_attach_shared(
        p,
        regions,
        n,
        ptr::null(),
        counters,
        clock_base,
        0,
        out,
        err,
    )
}

/// `weir_engine_attach_shared` flag: do not start the cluster syncer threads yet (call
/// `weir_engine_start_sync` later, e.g. in each process after `fork`: threads do not survive
/// it).
pub const WEIR_ATTACH_DEFER_SYNC: u32 = 1;

/// `weir_engine_attach_shared` flag: every zone and cluster region that holds no table yet is
/// all zero bytes (fresh shared memory, as an nginx zone or an anonymous `mmap`). Only the
/// headers are written then, so a zone's pages are first touched when keys land in them and a
/// large zone costs no memory up front.
pub const WEIR_ATTACH_ZEROED: u32 = 2;

/// Like `weir_engine_attach`, for processes sharing the zones (nginx workers): `cluster` (may
/// be NULL when the policy has no `scope = "cluster"` zone, or to keep cluster state in this
/// process) holds `n` regions in zone order; for each cluster zone one of at least its
/// `cluster_bytes` (64-byte aligned, outliving the engine, formatted by the first attach as
/// `regions` are: attach it first in one process), for local zones `{NULL, 0}`. Every process
/// attached to the same cluster regions decides with the same view of the other nodes' counts
/// and sync health, and any of them can take over the syncing. `flags`: 0 or any of
/// `WEIR_ATTACH_DEFER_SYNC`, `WEIR_ATTACH_ZEROED`.
#[no_mangle]
pub unsafe extern "C" fn weir_engine_attach_shared(
    p: *const weir_policy,
    regions: *const weir_region,
    n: usize,
    cluster: *const weir_region,
    counters: *const weir_region,
    clock_base: u64,
    flags: u32,
    out: *mut *mut weir_engine,
    err: *mut *mut weir_error,
) -> c_int {
    guard(|| {
        if p.is_null() || out.is_null() || (regions.is_null() && n > 0) {
            return fail(err, WEIR_ERR_NULL, "policy, regions or out is NULL");
        }
        *out = ptr::null_mut();
        let policy = &(*p).policy;
        let layouts = Engine::layouts(policy);
        if n != layouts.len() {
            let zones = layouts.len();
            return fail(
                err,
                WEIR_ERR_INVALID,
                format_args!("{n} regions for {zones} zones"),
            );
        }
        // SAFETY (the slices and regions below): the caller's contract (weir.h): `n` regions,
        // and `n` cluster regions unless NULL, each valid for its `len` bytes for the engine's
        // life and formatted by one process before others use it.
        let slice = |r: *const weir_region| {
            if n == 0 {
                &[][..]
            } else {
                std::slice::from_raw_parts(r, n)
            }
        };
        let region = |r: &weir_region| Region::new(r.ptr.cast(), r.len, 1).ok();
        let mut zones = Vec::with_capacity(n);
        for (r, l) in slice(regions).iter().zip(&layouts) {
            let Some(r) = region(r) else {
                return fail(
                    err,
                    WEIR_ERR_NULL,
                    format_args!("zone {}: region is NULL", l.name),
                );
            };
            zones.push(r);
        }
        let cluster: Option<Vec<_>> =
            (!cluster.is_null()).then(|| slice(cluster).iter().map(region).collect());
        let counters = match counters.as_ref().map(region) {
            Some(None) => {
                let e = "counters: counters region must be non-NULL and 8-byte aligned";
                return fail(err, WEIR_ERR_ZONE, e);
            }
            c => c.flatten(),
        };
        let regions = HostRegions {
            zones: &zones,
            cluster: cluster.as_deref(),
            counters,
        };
        let opts = AttachOptions {
            clock_base,
            start_syncers: flags & WEIR_ATTACH_DEFER_SYNC == 0,
            fresh: Fresh::from_zeroed(flags & WEIR_ATTACH_ZEROED != 0),
        };
        match Engine::attach(policy.clone(), regions, opts) {
            Ok(engine) => give(out, weir_engine { engine }),
            Err(AttachError::Invalid(e)) => fail(err, WEIR_ERR_INVALID, e),
            Err(AttachError::Zone(e)) => fail(err, WEIR_ERR_ZONE, e),
        }
    })
}

/// After `weir_engine_attach_shared` with a new counters region (the policy's limits changed:
/// nginx gives the counters new memory), lists again in it the bans listed in `old`, the
/// counters region of the configuration before (still mapped), that the engine still
/// enforces: a ban stays listed in the status while it stays enforced. Call it in the process
/// that attached, before requests are evaluated. Returns how many bans it listed (0 when `old`
/// holds no counters of this build), `WEIR_ERR_NULL` for a NULL argument, `WEIR_ERR_INVALID`
/// for a region not 8-byte aligned.
#[no_mangle]
pub unsafe extern "C" fn weir_engine_carry_bans(
    e: *const weir_engine,
    old: *const weir_region,
) -> c_int {
    guard(|| {
        let (Some(e), Some(old)) = (e.as_ref(), old.as_ref().filter(|r| !r.ptr.is_null())) else {
            return WEIR_ERR_NULL;
        };
        // SAFETY: the caller's contract: `old` is valid for `len` bytes while this runs.
        let Ok(old) = Region::new(old.ptr.cast(), old.len, 8) else {
            return WEIR_ERR_INVALID;
        };
        let now = weir::clock::monotonic_ns();
        e.engine.carry_bans(old, now).min(c_int::MAX as usize) as c_int
    })
}

/// Frees an engine (NULL is ignored). Caller regions are left as they are.
#[no_mangle]
pub unsafe extern "C" fn weir_engine_free(e: *mut weir_engine) {
    take_back(e)
}

/// 1 when the policy says `failure_mode = "closed"` (reject when weir cannot decide, e.g. on
/// WEIR_ERR_PANIC), 0 for "open" (the default) or NULL.
#[no_mangle]
pub unsafe extern "C" fn weir_engine_fails_closed(e: *const weir_engine) -> c_int {
    if e.is_null() {
        return 0;
    }
    ((*e).engine.policy().failure_mode == weir::policy::config::FailureMode::Closed) as c_int
}

/// Number of limits in the engine's policy (0 for NULL).
#[no_mangle]
pub unsafe extern "C" fn weir_engine_limit_count(e: *const weir_engine) -> usize {
    if e.is_null() {
        return 0;
    }
    (*e).engine.policy().limits.len()
}

/// The name of limit `i` (not NUL-terminated, valid as long as the engine).
#[no_mangle]
pub unsafe extern "C" fn weir_engine_limit_name(
    e: *const weir_engine,
    i: usize,
    name: *mut *const u8,
    len: *mut usize,
) -> c_int {
    engine_name(e, name, len, |e| {
        e.policy().limits.get(i).map(|l| l.name.as_bytes())
    })
}

/// Writes the name `pick` finds in engine `e` to `*name`/`*len` (it lives as long as the
/// engine): `WEIR_ERR_NULL` for a NULL argument, `WEIR_ERR_INVALID` when `pick` finds none.
unsafe fn engine_name(
    e: *const weir_engine,
    name: *mut *const u8,
    len: *mut usize,
    pick: impl FnOnce(&Engine) -> Option<&[u8]>,
) -> c_int {
    guard(|| {
        if e.is_null() || name.is_null() || len.is_null() {
            return WEIR_ERR_NULL;
        }
        let Some(n) = pick(&(*e).engine) else {
            return WEIR_ERR_INVALID;
        };
        *name = n.as_ptr();
        *len = n.len();
        WEIR_OK
    })
}

/// Number of headers the engine's policy reads (0 for NULL); see `weir_engine_header_name`.
#[no_mangle]
pub unsafe extern "C" fn weir_engine_header_count(e: *const weir_engine) -> usize {
    if e.is_null() {
        return 0;
    }
    (*e).engine.header_names().len()
}

/// The lowercase name of header `i` the policy reads (not NUL-terminated, valid as long as the
/// engine); `cookie` when it reads cookies. The engine's header callback is asked for no other
/// name, so a host that copies request headers for it may copy only these.
#[no_mangle]
pub unsafe extern "C" fn weir_engine_header_name(
    e: *const weir_engine,
    i: usize,
    name: *mut *const u8,
    len: *mut usize,
) -> c_int {
    engine_name(e, name, len, |e| e.header_names().nth(i))
}

/// Number of variables the engine's policy reads (`var:NAME` key parts; 0 for NULL); see
/// `weir_engine_var_name`.
#[no_mangle]
pub unsafe extern "C" fn weir_engine_var_count(e: *const weir_engine) -> usize {
    if e.is_null() {
        return 0;
    }
    (*e).engine.var_names().len()
}

/// The name of variable `i` (not NUL-terminated, valid as long as the engine): the engine asks
/// `weir_request.var` for it by the index `i`. Map the names to the host's own handles once,
/// when the engine is built.
#[no_mangle]
pub unsafe extern "C" fn weir_engine_var_name(
    e: *const weir_engine,
    i: usize,
    name: *mut *const u8,
    len: *mut usize,
) -> c_int {
    engine_name(e, name, len, |e| e.var_names().nth(i))
}

/// Per-limit counters.
#[repr(C)]
pub struct weir_limit_counters {
    pub passed: u64,
    pub delayed: u64,
    pub rejected: u64,
    pub queued: u64,
    pub dry_run_delayed: u64,
    pub dry_run_rejected: u64,
}

/// The log level limit `i` asks for its rejections (delays are logged one level lower):
/// 0 info, 1 notice, 2 warn, 3 error (the default); -1 for NULL or an index out of range.
#[no_mangle]
pub unsafe extern "C" fn weir_engine_limit_log_level(e: *const weir_engine, i: usize) -> c_int {
    use weir::policy::config::LogLevel;
    if e.is_null() {
        return -1;
    }
    match (*e).engine.policy().limits.get(i).map(|l| l.log_level) {
        Some(LogLevel::Info) => 0,
        Some(LogLevel::Notice) => 1,
        Some(LogLevel::Warn) => 2,
        Some(LogLevel::Error) => 3,
        None => -1,
    }
}

/// A snapshot of limit `i`'s counters.
#[no_mangle]
pub unsafe extern "C" fn weir_engine_limit_counters(
    e: *const weir_engine,
    i: usize,
    out: *mut weir_limit_counters,
) -> c_int {
    guard(|| {
        if e.is_null() || out.is_null() {
            return WEIR_ERR_NULL;
        }
        let engine = &(*e).engine;
        if i >= engine.policy().limits.len() {
            return WEIR_ERR_INVALID;
        }
        let c = engine.counters(i);
        *out = weir_limit_counters {
            passed: c.passed,
            delayed: c.delayed,
            rejected: c.rejected,
            queued: c.queued,
            dry_run_delayed: c.dry_run_delayed,
            dry_run_rejected: c.dry_run_rejected,
        };
        WEIR_OK
    })
}
