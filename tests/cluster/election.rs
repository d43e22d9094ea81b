//! Syncer election through the table header (`Table::try_lead`): the semantics with injected
//! times, then three forked processes contending every 10 ms on one MAP_SHARED table; the
//! leader is SIGKILLed twice and another process takes over each time within the staleness
//! limit. A plain `main` (no harness) so that the parent is single-threaded when it forks.

#[path = "../common/mod.rs"]
mod common;

use common::SharedRegion;
use std::time::Duration;
use weir::clock::monotonic_ns;
use weir::table::Table;

const MS: u64 = 1_000_000;
const STALE: u64 = 150 * MS;

fn semantics() {
    let t = Table::new(Table::bytes_for(64), 1, 0).unwrap();
    assert_eq!(t.leader(), None);
    assert!(t.try_lead(7, 1000, STALE));
    assert_eq!(t.leader(), Some((7, 1000)));
    // Another contender is refused while the heartbeat is fresh…
    assert!(!t.try_lead(9, 1000 + STALE, STALE));
    // …the leader renews…
    assert!(t.try_lead(7, 1000 + 100 * MS, STALE));
    assert!(!t.try_lead(9, 1000 + 200 * MS, STALE));
    // …and once the heartbeat is stale, the contender takes over; the old leader learns it.
    assert!(t.try_lead(9, 1000 + 100 * MS + STALE + 1, STALE));
    assert!(!t.try_lead(7, 1000 + 100 * MS + STALE + 2, STALE));
    assert_eq!(t.leader().unwrap().0, 9);
    // Resigning frees the seat at once; resigning someone else's does nothing.
    t.resign(7);
    assert_eq!(t.leader().unwrap().0, 9);
    t.resign(9);
    assert_eq!(t.leader(), None);
    assert!(t.try_lead(7, 5, STALE));
    println!("test semantics ... ok");
}

fn kill_the_leader() {
    let r = SharedRegion::new(Table::bytes_for(1024));
    // SAFETY: the mapping outlives the table (declared before it, dropped after).
    let t = unsafe { Table::create(r.ptr, r.len, 1, 0) }.unwrap();
    let mut pids = vec![];
    for _ in 0..3 {
        // SAFETY: the parent is single-threaded here (no harness), so the child may run Rust.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            let me = std::process::id() as u64;
            loop {
                t.try_lead(me, monotonic_ns(), STALE);
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        pids.push(pid);
    }
    let leader_after = |pids: &[i32], since: u64| {
        for _ in 0..100 {
            std::thread::sleep(Duration::from_millis(10));
            if let Some((who, beat)) = t.leader() {
                if beat > since && pids.contains(&(who as i32)) {
                    return who as i32;
                }
            }
        }
        panic!("no live leader");
    };
    let mut killed = vec![];
    for round in 0..2 {
        let first = leader_after(&pids, 0);
        // SAFETY: signalling our own child.
        unsafe { libc::kill(first, libc::SIGKILL) };
        unsafe { libc::waitpid(first, std::ptr::null_mut(), 0) };
        let t_kill = monotonic_ns();
        pids.retain(|&p| p != first);
        killed.push(first);
        let next = leader_after(&pids, t_kill);
        let took = monotonic_ns() - t_kill;
        assert!(!killed.contains(&next));
        assert!(took < STALE + 200 * MS, "takeover took {took} ns");
        println!(
            "round {round}: leader {first} killed, {next} took over after {} ms (stale limit {} ms)",
            took / MS,
            STALE / MS
        );
        // The new leader keeps its seat while alive.
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(t.leader().unwrap().0 as i32, next);
    }
    for p in pids {
        // SAFETY: our own children.
        unsafe { libc::kill(p, libc::SIGKILL) };
        unsafe { libc::waitpid(p, std::ptr::null_mut(), 0) };
    }
    println!("test kill_the_leader ... ok");
}

fn main() {
    semantics();
    kill_the_leader();
    println!("2 passed, 0 failed");
}
