//! The fork harness of the multi-process tests (`tests/table/multiprocess.rs`,
//! `tests/table/log_multiprocess.rs`): those binaries have a plain `main` (no test harness) so that
//! the parent is single-threaded when it forks, and children may run Rust.

use super::SharedRegion;
use std::sync::atomic::AtomicU64;

/// Forked processes × threads per process of [`fork_all`].
pub const PROCS: usize = 4;
pub const THREADS: usize = 2;

/// Result counters shared with forked children (one zeroed page of its own).
pub struct Tally {
    region: SharedRegion,
}

impl Tally {
    pub fn new() -> Tally {
        Tally {
            region: SharedRegion::new(4096),
        }
    }

    pub fn at(&self, i: usize) -> &AtomicU64 {
        assert!(i < 512);
        // SAFETY: the page is zeroed, aligned, and shared; AtomicU64 has u64's layout.
        unsafe { &*(self.region.ptr as *const AtomicU64).add(i) }
    }
}

/// Runs `work(process, thread)` in `PROCS` forked processes × `THREADS` threads and waits for
/// all; panics if a child panicked.
pub fn fork_all(work: impl Fn(usize, usize) + Sync) {
    let mut pids = vec![];
    for p in 0..PROCS {
        // SAFETY: the parent is single-threaded here (no harness), so the child may run Rust.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                std::thread::scope(|s| {
                    for t in 0..THREADS {
                        let work = &work;
                        s.spawn(move || work(p, t));
                    }
                })
            }))
            .is_ok();
            // SAFETY: leave the child (never return into the parent's code) without running
            // the parent's atexit handlers.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        pids.push(pid);
    }
    for pid in pids {
        let mut status = 0;
        // SAFETY: waiting on our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "a child failed"
        );
    }
}

/// `rounds` times: `PROCS` children run `writer(round, process)` (a loop that never returns)
/// and are SIGKILLed together after 0.2–3.2 ms (pseudo-random, the same sequence every run),
/// at whatever point of an update they are.
pub fn sigkill_rounds(rounds: u64, writer: impl Fn(u64, usize)) {
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    for round in 0..rounds {
        let mut pids = vec![];
        for p in 0..PROCS {
            // SAFETY: single-threaded parent.
            let pid = unsafe { libc::fork() };
            assert!(pid >= 0, "fork failed");
            if pid == 0 {
                writer(round, p);
                // SAFETY: the writer is not meant to return; never run the parent's code.
                unsafe { libc::_exit(2) };
            }
            pids.push(pid);
        }
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        std::thread::sleep(std::time::Duration::from_micros(200 + rng % 3000));
        for pid in pids {
            // SAFETY: our own children.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, std::ptr::null_mut(), 0);
            }
        }
    }
}

/// Runs the named scenarios (those containing the first command-line argument, when given),
/// prints a line per scenario like the test harness and exits 1 if any failed.
pub fn run_scenarios(scenarios: &[(&str, fn())]) -> ! {
    let filter = std::env::args().nth(1).filter(|a| !a.starts_with('-'));
    let (mut passed, mut failed) = (0, 0);
    for &(name, f) in scenarios {
        if filter.as_deref().is_some_and(|p| !name.contains(p)) {
            continue;
        }
        match std::panic::catch_unwind(f) {
            Ok(()) => {
                println!("test {name} ... ok");
                passed += 1;
            }
            Err(_) => {
                println!("test {name} ... FAILED");
                failed += 1;
            }
        }
    }
    println!("{passed} passed, {failed} failed");
    std::process::exit(if failed == 0 { 0 } else { 1 });
}
