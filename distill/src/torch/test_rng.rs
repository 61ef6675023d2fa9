//! Test-only guard on libtorch's global random generator.
//!
//! The test harness runs unit tests on parallel threads, but libtorch has one default CPU
//! generator per process: a test that seeds it and draws twice (two identical students, the
//! same dropout masks replayed by a recomputed segment) gets different numbers whenever another
//! test draws in between. So every test that draws holds [`lock`] for its whole body, and the
//! library's drawing entry points (building a student, a training-mode forward, an example
//! input, seeding a step) call [`assert_held`], which fails a test that forgot, whichever test
//! it races with. The lock is reentrant on one thread, so helpers may take it too.

use std::cell::Cell;
use std::sync::{Mutex, MutexGuard};

static LOCK: Mutex<()> = Mutex::new(());

thread_local! {
    /// How many [`RngGuard`]s this thread holds.
    static DEPTH: Cell<usize> = const { Cell::new(0) };
}

/// Holds the generator for this thread until dropped.
pub(crate) struct RngGuard {
    _lock: Option<MutexGuard<'static, ()>>,
}

/// Takes the generator (waiting for other threads' guards; at once if this thread holds one).
pub(crate) fn lock() -> RngGuard {
    let lock = (DEPTH.get() == 0).then(|| LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner()));
    DEPTH.set(DEPTH.get() + 1);
    RngGuard { _lock: lock }
}

impl Drop for RngGuard {
    fn drop(&mut self) {
        DEPTH.set(DEPTH.get() - 1);
    }
}

/// Panics unless this thread holds [`lock`]; `what` names the drawing call.
pub(crate) fn assert_held(what: &str) {
    assert!(
        DEPTH.get() > 0,
        "{what} draws from libtorch's global random generator: take crate::torch::test_rng::lock() at the \
         start of the test, or a concurrent test's draws change its numbers"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_guard_is_reentrant_and_released() {
        assert_eq!(DEPTH.get(), 0);
        {
            let _outer = lock();
            let _inner = lock();
            assert_eq!(DEPTH.get(), 2);
            assert_held("a test");
        }
        assert_eq!(DEPTH.get(), 0);
        assert!(std::panic::catch_unwind(|| assert_held("a test")).is_err());
    }
}
