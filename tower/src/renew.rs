//! Keeping permits counted: a concurrency permit is a lease, so the process holding it renews
//! it while the request runs. The first request a layer serves starts one thread
//! (`weir-renew`) that renews the engine's held permits every quarter of its shortest lease
//! ([`weir::policy::Engine::renew_held`]); it needs no async runtime, reads the layer's
//! [`crate::Clock`], and ends within one interval once every layer and service sharing the
//! configuration is dropped. Policies without concurrency limits start none.

use std::sync::{Arc, Weak};
use std::time::Duration;

use super::Config;

/// Starts the configuration's renewer unless it runs (or is not needed).
#[inline]
pub(crate) fn ensure(cfg: &Arc<Config>) {
    cfg.renewer.call_once(|| {
        let Some(every) = cfg.engine.renew_interval_ns() else {
            return;
        };
        let weak = Arc::downgrade(cfg);
        let spawned = std::thread::Builder::new()
            .name("weir-renew".into())
            .spawn(move || run(&weak, Duration::from_nanos(every)));
        if let Err(e) = spawned {
            tracing::error!("weir: cannot start the permit renewer: {e}");
        }
    });
}

fn run(cfg: &Weak<Config>, every: Duration) {
    loop {
        std::thread::sleep(every);
        let Some(cfg) = cfg.upgrade() else {
            return;
        };
        // A panicking clock must not end the renewals: the next tick tries again.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            cfg.engine.renew_held(cfg.clock.now_ns())
        }));
    }
}
