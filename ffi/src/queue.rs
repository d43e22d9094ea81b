//! The order of a host's waiters: which queue a freed permit serves, and whether that queue
//! serves its newest waiter first (it stands) or its oldest.

use std::ffi::c_int;

use weir::policy::engine::{QueueTicket, RawPermit};

use crate::evaluate::held;
use crate::{guard, weir_engine, weir_permit, WEIR_ERR_INVALID, WEIR_ERR_NULL};

/// The key of the queue `ticket` (a WEIR_QUEUE verdict's) waits in: a permit given back
/// (`weir_engine_release*`) frees a slot for it when the permit's `limit` is the ticket's and
/// its `key_hash` is this. 0 for NULL or an empty ticket.
#[no_mangle]
pub unsafe extern "C" fn weir_ticket_queue_key(ticket: *const weir_permit) -> u64 {
    let Some(t) = ticket.as_ref() else {
        return 0;
    };
    let Ok(limit) = u16::try_from(t.limit) else {
        return 0;
    };
    let raw = RawPermit {
        limit,
        key_hash: t.key_hash,
        bucket: t.bucket,
        generation: t.generation,
    };
    QueueTicket::from_raw(raw, 0).queue().key_hash
}

/// Whether a slot freed for `ticket`'s queue goes to its newest waiter first (1: the queue
/// stands, its old waiters are refused early) or to its oldest (0), at `now`. Hosts that keep
/// their waiters in order ask this when they wake one. WEIR_ERR_INVALID for a ticket that
/// names no concurrency limit of `e` (or an empty one).
#[no_mangle]
pub unsafe extern "C" fn weir_engine_queue_lifo(
    e: *const weir_engine,
    ticket: *const weir_permit,
    now: u64,
) -> c_int {
    guard(|| {
        if e.is_null() || ticket.is_null() {
            return WEIR_ERR_NULL;
        }
        let engine = &(*e).engine;
        match held(engine, &*ticket) {
            Ok(Some(raw)) => {
                c_int::from(engine.queue_lifo(QueueTicket::from_raw(raw, 0).queue(), now))
            }
            Ok(None) => WEIR_ERR_INVALID,
            Err(code) => code,
        }
    })
}
