//! Deferred charges (`charge_on_status`): carried in the verdict, handed back with the
//! response status.

use std::ffi::c_int;

use weir::policy::engine::{Charges, RawCharge, MAX_CHARGES};

use crate::{guard, weir_engine, weir_verdict, WEIR_ERR_INVALID, WEIR_ERR_NULL, WEIR_OK};

/// Number of deferred charges a verdict can hold.
pub const WEIR_MAX_CHARGES: usize = 4;
const _: () = assert!(WEIR_MAX_CHARGES == MAX_CHARGES);

/// A deferred charge: limit `limit` (a rate limit with `charge_on_status`) for the key of
/// hash `key_hash`. `limit < 0` means empty.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct weir_charge {
    pub limit: i32,
    pub key_hash: u64,
}

pub(crate) const NO_CHARGE: weir_charge = weir_charge {
    limit: -1,
    key_hash: 0,
};

/// Writes an outcome's charges into its verdict.
pub(crate) fn put_charges(v: &mut weir_verdict, charges: Charges) {
    let (raw, generation) = charges.into_raw();
    for (slot, r) in v.charges.iter_mut().zip(raw) {
        *slot = r.map_or(NO_CHARGE, |r| weir_charge {
            limit: i32::from(r.limit),
            key_hash: r.key_hash,
        });
    }
    v.charges_generation = generation;
}

/// Takes the charges out of `v` (emptying them); `Err` and nothing taken when one names no
/// deferred limit of `e`, or `e` never handed out their generation (forged, or from another
/// engine).
fn take_charges(e: &weir::policy::Engine, v: &mut weir_verdict) -> Result<Charges, c_int> {
    let any = v.charges.iter().any(|c| c.limit >= 0);
    if any && !e.issued_charges(v.charges_generation) {
        return Err(WEIR_ERR_INVALID);
    }
    let mut raw = [None; MAX_CHARGES];
    for (slot, c) in raw.iter_mut().zip(&v.charges) {
        if c.limit < 0 {
            continue;
        }
        match u16::try_from(c.limit) {
            Ok(limit) if e.is_deferred_limit(limit.into()) => {
                *slot = Some(RawCharge {
                    limit,
                    key_hash: c.key_hash,
                })
            }
            _ => return Err(WEIR_ERR_INVALID),
        }
    }
    v.charges = [NO_CHARGE; WEIR_MAX_CHARGES];
    Ok(Charges::from_raw(raw, v.charges_generation))
}

/// Charges the deferred charges held in `v` for a response of `status` (call it once the
/// response status is known, before `weir_engine_release`; status 0 when there was no
/// response, which charges nothing) and clears them, so a second call changes nothing;
/// charging a copy of `v` afterwards changes nothing either. Only the limits whose
/// `charge_on_status` lists `status` are charged. A charge naming no such limit of `e`, or
/// not made by `e` (another engine's verdict, a made-up one), gives WEIR_ERR_INVALID and
/// nothing is charged.
#[no_mangle]
pub unsafe extern "C" fn weir_engine_charge(
    e: *const weir_engine,
    v: *mut weir_verdict,
    status: u16,
    now: u64,
) -> c_int {
    guard(|| {
        if e.is_null() || v.is_null() {
            return WEIR_ERR_NULL;
        }
        if (*v).charges.iter().all(|c| c.limit < 0) {
            return WEIR_OK; // nothing deferred: most requests
        }
        match take_charges(&(*e).engine, &mut *v) {
            Ok(charges) => {
                (*e).engine.charge_response(charges, status, now);
                WEIR_OK
            }
            Err(code) => code,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evaluate::empty_verdict;
    use weir::policy::{parse_policy, Engine, OwnedRequest};

    /// An engine whose limit 0 refuses a key after two 401s in a minute.
    fn engine() -> weir_engine {
        let src =
            "[zones.f]\nsize = \"64k\"\nalgorithm = \"sliding\"\nevents = 2\nwindow = \"1m\"\n\
                   [[limit]]\nclass = \"*\"\nzone = \"f\"\ncharge_on_status = [401]\n";
        weir_engine {
            engine: Engine::new(parse_policy(src, None).unwrap()).unwrap(),
        }
    }

    const NOW: u64 = 1_000_000_000_000;

    fn req() -> OwnedRequest {
        OwnedRequest::new("POST", "/login", "192.0.2.1".parse().unwrap())
    }

    /// `e`'s verdict for the request, with its charges.
    fn verdict(e: &weir_engine) -> weir_verdict {
        let out = e.engine.evaluate(&req(), NOW).unwrap();
        let mut v = empty_verdict();
        put_charges(&mut v, out.charges);
        v
    }

    fn refused(e: &weir_engine) -> bool {
        e.engine.evaluate(&req(), NOW).unwrap().status == 429
    }

    fn charge(e: &weir_engine, v: &mut weir_verdict) -> c_int {
        // SAFETY: both are valid for the call.
        unsafe { weir_engine_charge(e, v, 401, NOW) }
    }

    #[test]
    fn forged_and_foreign_charges_are_refused_and_charge_nothing() {
        let (a, b) = (engine(), engine());
        // A charge made up from scratch: limit 0, the key's hash, generation 0.
        let real = verdict(&a);
        for _ in 0..3 {
            let mut forged = empty_verdict();
            forged.charges[0] = real.charges[0];
            assert_eq!(charge(&a, &mut forged), WEIR_ERR_INVALID);
            assert_eq!(forged.charges[0].limit, 0, "nothing taken");
        }
        // A verdict of engine `a` charged on engine `b` (the same policy); twice, as the
        // key's third request is refused with nothing to charge.
        for _ in 0..2 {
            let mut foreign = verdict(&a);
            assert_eq!(charge(&b, &mut foreign), WEIR_ERR_INVALID);
            assert_eq!(charge(&a, &mut foreign), WEIR_OK, "its own engine takes it");
        }
        assert!(!refused(&b), "b was charged nothing");
        assert!(refused(&a), "a was charged its own verdicts");
        // Its own verdict, charged twice: the copy is stale, not invalid.
        let mut v = verdict(&b);
        // SAFETY: a verdict is plain C data; a host copies it as C does (`copy = v`).
        let mut copy = unsafe { std::ptr::read(&v) };
        assert_eq!(charge(&b, &mut v), WEIR_OK);
        assert_eq!(charge(&b, &mut copy), WEIR_OK);
        assert!(!refused(&b), "one 401 of two");
    }
}
