//! The synchronisation primitives of the `std` layers, from `std` or from [loom].
//!
//! Every lock, condition variable and atomic that the service, the futures and `Deadlines`
//! share between threads is imported from here, never from `std::sync` directly, so that
//! building with `RUSTFLAGS="--cfg loom"` swaps them all for loom's model-checked versions.
//! The one kind of atomic that stays `std`'s in both builds is [`Counter`]: a relaxed count
//! (statistics, the round-robin thread index) whose value orders no other memory, so loom
//! would have nothing to check in it, and which can live in a `static`, as loom's atomics
//! cannot. Tests that run no model use `std` freely. (The `time` layer's clocks are below this
//! module and keep `std`'s atomics: no model moves a clock during a race.)
//!
//! `model` (test builds only) runs a test body once under plain `std`, or under every
//! interleaving loom explores with `--cfg loom`:
//!
//! ```text
//! RUSTFLAGS="--cfg loom" cargo test -p tickwheel --release --lib loom
//! ```
//!
//! `.ci/run` runs every unit test of the crate in that build (with `-D warnings`), in a
//! target directory of its own (`--cfg loom` reaches every crate, so sharing the main one
//! would rebuild everything twice). A test that builds a shard or a service outside `model`
//! panics there (loom's primitives exist only inside a model), so such a test is
//! `#[cfg(not(loom))]`, and so are the helpers only it uses.
//!
//! **Race on spawned threads only.** Put every operation of the race in a `spawn`ed
//! thread and let the model's main thread only set up, join and check. With one side of the
//! race on the main thread after the spawn, loom 0.7 explores a fraction of the
//! interleavings (4 instead of 27 for cancel-vs-fire, a single one for `settle`'s check
//! against a drain) and misses the bugs the model is there to find.
//!
//! Locks here never poison: [`lock`] and [`wait`] recover the guard of a lock whose holder
//! panicked. No code of ours panics while holding a lock, and user callbacks never run under
//! one, so the data behind a recovered guard is consistent.
//!
//! [loom]: https://docs.rs/loom

#[cfg(loom)]
pub(crate) use loom::sync::{
    atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
    Arc, Condvar, Mutex, MutexGuard,
};
#[cfg(not(loom))]
pub(crate) use std::sync::{
    atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
    Arc, Condvar, Mutex, MutexGuard,
};

/// A relaxed counter that orders nothing: statistics, round-robin indices. Always `std`'s
/// atomic (see the module docs), and `const`-constructible for `static`s.
#[derive(Default)]
pub(crate) struct Counter(std::sync::atomic::AtomicU64);

impl Counter {
    pub(crate) const fn new() -> Counter {
        Counter(std::sync::atomic::AtomicU64::new(0))
    }

    /// Adds `n`; returns the value before.
    #[inline]
    pub(crate) fn fetch_add(&self, n: u64) -> u64 {
        self.0.fetch_add(n, std::sync::atomic::Ordering::Relaxed)
    }

    /// Adds `n`.
    #[inline]
    pub(crate) fn add(&self, n: u64) {
        self.fetch_add(n);
    }

    /// Raises the value to `n` if it is lower.
    #[inline]
    pub(crate) fn raise_to(&self, n: u64) {
        if n > self.get() {
            self.0.fetch_max(n, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// The current value.
    #[inline]
    pub(crate) fn get(&self) -> u64 {
        self.0.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// Keeps `T` on cache lines of its own (128 bytes: two lines, for the adjacent-line
/// prefetcher), so that writes to it do not slow down readers of its neighbours.
#[derive(Default)]
#[repr(align(128))]
pub(crate) struct CachePadded<T>(pub(crate) T);

impl<T> core::ops::Deref for CachePadded<T> {
    type Target = T;

    #[inline]
    fn deref(&self) -> &T {
        &self.0
    }
}

/// Locks `mutex`, recovering the guard if a previous holder panicked.
#[inline]
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Waits on `condvar`, recovering the guard if a previous holder panicked.
#[inline]
pub(crate) fn wait<'a, T>(condvar: &Condvar, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
    condvar
        .wait(guard)
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// One step of a short wait for another thread: a spin hint for the first `spins` rounds,
/// then a yield of the time slice (under loom: always a loom yield, so models terminate).
#[inline]
pub(crate) fn backoff(round: u32) {
    #[cfg(loom)]
    {
        let _ = round;
        loom::thread::yield_now();
    }
    #[cfg(not(loom))]
    if round < 64 {
        std::hint::spin_loop();
    } else {
        std::thread::yield_now();
    }
}

/// A spin-wait hint (under loom: a loom yield, so spinning models terminate).
#[inline]
pub(crate) fn spin_hint() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    std::hint::spin_loop();
}

/// A lock for data held for a few instructions at a time (a push, a swap): one atomic
/// exchange to lock, a plain store to unlock. `std`'s mutex unlocks with a second atomic
/// exchange (it must learn whether to wake a sleeper), which on a path taken once per timer is
/// a third of the cost of scheduling it. A waiter spins, then yields its time slice
/// ([`backoff`]); it never sleeps, so nothing may block while holding one. Never poisons.
///
/// Under `--cfg loom` it is loom's mutex, so the models check the code that uses it; the lock
/// itself is checked by its own tests (under Miri too).
#[cfg(not(loom))]
pub(crate) struct SpinLock<T> {
    locked: AtomicBool,
    value: core::cell::UnsafeCell<T>,
}

// SAFETY: the lock hands out `&mut T` to one thread at a time (see `try_lock`), so sharing a
// `SpinLock<T>` shares nothing but the right to send `T` between threads, which `T: Send` gives.
#[cfg(not(loom))]
unsafe impl<T: Send> Sync for SpinLock<T> {}

/// What [`SpinLock::lock`] returns: the data, until dropped.
#[cfg(not(loom))]
pub(crate) struct SpinGuard<'a, T> {
    lock: &'a SpinLock<T>,
}

#[cfg(not(loom))]
impl<T> SpinLock<T> {
    pub(crate) const fn new(value: T) -> SpinLock<T> {
        SpinLock {
            locked: AtomicBool::new(false),
            value: core::cell::UnsafeCell::new(value),
        }
    }

    /// Locks if nobody holds the lock. A taken lock is only read, so a spinning waiter does
    /// not take its cache line from the holder.
    #[inline]
    pub(crate) fn try_lock(&self) -> Option<SpinGuard<'_, T>> {
        if self.locked.load(Ordering::Relaxed) || self.locked.swap(true, Ordering::Acquire) {
            return None;
        }
        Some(SpinGuard { lock: self })
    }

    /// Locks, spinning and then yielding until the holder unlocks.
    #[inline]
    pub(crate) fn lock(&self) -> SpinGuard<'_, T> {
        if let Some(guard) = self.try_lock() {
            return guard;
        }
        self.lock_contended()
    }

    #[cold]
    fn lock_contended(&self) -> SpinGuard<'_, T> {
        let mut round = 0;
        loop {
            backoff(round);
            round = round.saturating_add(1);
            if let Some(guard) = self.try_lock() {
                return guard;
            }
        }
    }
}

#[cfg(not(loom))]
impl<T> core::ops::Deref for SpinGuard<'_, T> {
    type Target = T;

    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: this guard's existence means its thread swapped `locked` from false to true
        // and has not stored false yet: no other guard of this lock exists, so no `&mut T`.
        unsafe { &*self.lock.value.get() }
    }
}

#[cfg(not(loom))]
impl<T> core::ops::DerefMut for SpinGuard<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`, this is the only guard, and `&mut self` makes this the only
        // reference to the data through it.
        unsafe { &mut *self.lock.value.get() }
    }
}

#[cfg(not(loom))]
impl<T> Drop for SpinGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        // Release: the next holder's `Acquire` swap sees every write made under this guard.
        self.lock.locked.store(false, Ordering::Release);
    }
}

/// Under loom: loom's mutex with the same interface (see the plain build's docs).
#[cfg(loom)]
pub(crate) struct SpinLock<T>(Mutex<T>);

/// What [`SpinLock::lock`] returns under loom.
#[cfg(loom)]
pub(crate) type SpinGuard<'a, T> = MutexGuard<'a, T>;

#[cfg(loom)]
impl<T> SpinLock<T> {
    pub(crate) fn new(value: T) -> SpinLock<T> {
        SpinLock(Mutex::new(value))
    }

    pub(crate) fn try_lock(&self) -> Option<SpinGuard<'_, T>> {
        self.0.try_lock().ok()
    }

    pub(crate) fn lock(&self) -> SpinGuard<'_, T> {
        lock(&self.0)
    }
}

/// Runs `f` once (plain build) or under every interleaving loom explores (`--cfg loom`).
///
/// Tests of concurrent code call this instead of running their body directly, so one test
/// serves both builds; spawn threads with [`spawn`] inside it.
#[cfg(test)]
pub(crate) fn model<F>(f: F)
where
    F: Fn() + Sync + Send + 'static,
{
    #[cfg(loom)]
    loom::model(f);
    #[cfg(not(loom))]
    f();
}

/// [`model`], with loom's search bounded to interleavings of at most `preemptions` forced
/// switches between threads, for a model whose full search takes minutes (three racing
/// threads). Loom's docs find a bound of 2 or 3 enough to catch most bugs.
/// `LOOM_MAX_PREEMPTIONS`, when set, wins, so the full search stays one variable away.
#[cfg(test)]
pub(crate) fn model_bounded<F>(preemptions: usize, f: F)
where
    F: Fn() + Sync + Send + 'static,
{
    #[cfg(loom)]
    {
        let mut builder = loom::model::Builder::new();
        builder.preemption_bound = builder.preemption_bound.or(Some(preemptions));
        builder.check(f);
    }
    #[cfg(not(loom))]
    {
        let _ = preemptions;
        f();
    }
}

/// Spawns a thread: a loom thread under `--cfg loom`, a std thread otherwise.
#[cfg(test)]
pub(crate) fn spawn<F, T>(f: F) -> JoinHandle<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    #[cfg(loom)]
    return loom::thread::spawn(f);
    #[cfg(not(loom))]
    return std::thread::spawn(f);
}

/// The join handle [`spawn`] returns.
#[cfg(all(test, loom))]
pub(crate) type JoinHandle<T> = loom::thread::JoinHandle<T>;
/// The join handle [`spawn`] returns.
#[cfg(all(test, not(loom)))]
pub(crate) type JoinHandle<T> = std::thread::JoinHandle<T>;

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_spin_lock_excludes_while_held_and_frees_on_drop() {
        let lock = SpinLock::new(vec![1]);
        let mut guard = lock.lock();
        guard.push(2);
        assert!(lock.try_lock().is_none(), "locked twice");
        drop(guard);
        let guard = lock.try_lock().expect("unlocked by the drop");
        assert_eq!(*guard, [1, 2]);
    }

    #[test]
    fn a_spin_lock_loses_no_update_between_threads() {
        // A plain read-modify-write under the lock: two holders at once would lose updates.
        const EACH: usize = if cfg!(miri) { 200 } else { 200_000 };
        let lock = std::sync::Arc::new(SpinLock::new(0usize));
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let lock = lock.clone();
                std::thread::spawn(move || {
                    for _ in 0..EACH {
                        let mut n = lock.lock();
                        let seen = *n;
                        std::hint::spin_loop();
                        *n = seen + 1;
                    }
                })
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        assert_eq!(*lock.lock(), 2 * EACH);
    }
}
