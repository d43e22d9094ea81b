//! Limits charged by response status (`charge_on_status`): checked before the request runs,
//! charged after its response.
//!
//! The check is a prediction that writes nothing: a key already over the limit is refused
//! (the ordinary rejection, which strikes a `ban`); otherwise the request passes without
//! delay and the outcome carries the charge ([`Charges`]). The host hands the charges back
//! with the response status; only limits listing that status are charged.
//!
//! Bound: requests of one key that are checked before earlier ones are charged all pass, so
//! at most the key's requests in flight at the check pass beyond the limit. A concurrency
//! limit with the same key (e.g. 1 per client) bounds that, provided the host charges
//! before it releases the permits.

use super::*;

impl Engine {
    /// Checks deferred limit `limit` for key `key_hash` without charging it: the prediction,
    /// with a delay turned into a pass (the charge comes after the response, so there is
    /// nothing to pace). A pass records the charge in `out`.
    #[inline(never)]
    pub(super) fn check_deferred(
        &self,
        out: &mut Outcome,
        limit: usize,
        alg: &RateAlg,
        key_hash: u64,
        now: u64,
    ) -> Verdict {
        let l = &self.policy.limits[limit];
        let mut v = alg.predict(&self.tables[l.zone], key_hash, l.cost, now);
        if v.decision == Decision::Delay {
            v.decision = Decision::Pass;
            v.wait_ns = 0;
        }
        if v.decision == Decision::Pass {
            out.charges.push(limit, key_hash);
        }
        v
    }

    /// Charges the deferred limits of an admitted request whose response had `status`: each
    /// limit whose `charge_on_status` lists it is charged as an ordinary request would be. A
    /// charge that does not conform (the key filled up meanwhile) changes nothing: the key is
    /// already at its limit, so its next checks are refused until the limit lets one through.
    /// Any other status (0 for "no response") charges nothing. A set handed back before (a
    /// stale copy), or naming no rate limit of this engine, charges nothing.
    pub fn charge_response(&self, charges: Charges, status: u16, now: u64) {
        if charges.is_empty()
            || !self.ledger.issued(charges.generation)
            || self.ledger.give_back(charges.generation, 0).is_none()
        {
            return;
        }
        for (l, key_hash) in charges.due() {
            let Some(Limiter::Rate(alg)) = self.limiters.get(l) else {
                continue;
            };
            let limit = &self.policy.limits[l];
            if limit.charge_on_status.binary_search(&status).is_ok() {
                alg.check(&self.tables[limit.zone], key_hash, limit.cost, now);
            }
        }
    }

    /// Whether this engine handed out a charge set of `generation` ([`Charges::into_raw`]),
    /// charged since or not: false for another engine's and for made-up ones (for hosts that
    /// check the charges they carry across an FFI).
    pub fn issued_charges(&self, generation: u64) -> bool {
        self.ledger.issued(generation)
    }

    /// Whether limit `limit` exists and is a rate limit with `charge_on_status` (for hosts
    /// that check the charges they carry across an FFI).
    pub fn is_deferred_limit(&self, limit: usize) -> bool {
        matches!(self.limiters.get(limit), Some(Limiter::Rate(_)))
            && !self.policy.limits[limit].charge_on_status.is_empty()
    }
}
