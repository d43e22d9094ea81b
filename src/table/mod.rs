pub fn probe() -> bool {
    portable_atomic::AtomicU128::is_always_lock_free()
}
