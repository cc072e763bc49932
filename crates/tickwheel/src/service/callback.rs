//! [`Callback`]: a `FnOnce() + Send + 'static` stored inline when it is small, boxed when not.
//!
//! # Why
//!
//! A `Box<dyn FnOnce()>` per timer costs a `malloc` on the scheduling thread and a `free` on
//! the worker that runs it, and the worker's first touch of the box is a cache miss on memory
//! written up to a second earlier. With one producer and callbacks freed on other threads,
//! the allocator also has to merge the blocks the workers freed back into the producer's
//! arena (glibc's `malloc_consolidate`), on the producer's hot path. Most timer callbacks capture
//! little — an `Arc` and an id, a channel sender — so [`INLINE`] bytes are kept in the queue
//! entry itself, and the callback travels by value: into the slab entry, out to the worker's
//! batch, called from there. Larger or over-aligned closures are boxed, and the box (one
//! pointer) is stored inline instead.
//!
//! The service's own entries are callbacks too, run on the timer thread rather than on a
//! worker: a `Sleep`'s [`Waker`] ([`Callback::waker`], swappable in place) and a `Deadlines`
//! notification ([`Callback::notify`]). One type for every entry keeps `Option<Callback>` at
//! three words (the vtable reference is its niche), where an enum beside it took four.
//!
//! # Safety argument
//!
//! The service's other `unsafe` blocks are the inbox's in-place append (`Staged::push` in
//! `shard/inbox.rs`, which hands a field of an uninitialised entry to [`Build::build_in`]), the
//! calendar's (`Bucket::push` in `shard/calendar.rs`) and the spin lock in `sync.rs`. Miri runs
//! this module's, the shard's and the lock's tests in CI.
//!
//! * `data` holds exactly one live `F` (the type `vtable` was made for) from `new` until
//!   `call` or `drop` moves it out, and nothing else ever reads or writes it. `new` writes it
//!   only after checking that `F` fits `data`'s size and alignment.
//! * A [`Callback::waker`] is the same with `F = Waker` and the `WAKER` vtable (its `call`
//!   wakes). It is the only callback whose value is reachable in place: `waker_mut` lends
//!   the `Waker` out for as long as the `Callback` is mutably borrowed, so a poll can swap in
//!   a new waker; it checks the vtable's `waker` flag, which only `Callback::waker` sets.
//!   [`Callback::notify`] is the same with `F = Arc<dyn Expire>` and the `NOTIFY` vtable.
//! * `new_in` writes the same `F` and vtable as `new`, field by field into a
//!   `&mut MaybeUninit<Callback>` (never through a reference to the uninitialised value).
//! * `discard` takes the value out once, like `call`.
//! * `call` and `drop` each take the `F` out once: `call` consumes `self` without running
//!   `Drop` (`ManuallyDrop`), so the value is read exactly once whichever path is taken,
//!   panicking callbacks included (a panic unwinds through `F`'s own call, which has already
//!   taken ownership of it).
//! * `Callback` is `Send` because every `F` stored is `Send` (the bound on `new`; `Waker` is
//!   `Send`); it is not
//!   `Sync` (a shared reference gives no access to `data` anyway).

use alloc::boxed::Box;
use core::fmt;
use core::marker::PhantomData;
use core::mem::{self, ManuallyDrop, MaybeUninit};
use core::ptr;
use core::task::Waker;
// Trait objects use std's `Arc` (loom's cannot coerce to `dyn`).
use std::sync::Arc as StdArc;

/// Bytes of captured state a callback may have and still be stored without a box: two
/// words, room for an `Arc` and an id, or a channel sender.
pub(crate) const INLINE: usize = 2 * mem::size_of::<usize>();

/// The inline storage: [`INLINE`] bytes, aligned like a pointer.
type Storage = MaybeUninit<[usize; INLINE / mem::size_of::<usize>()]>;

/// The operations on an erased `F`, and what kind of callback it is.
struct VTable {
    /// Moves the `F` out of the storage and calls it.
    call: unsafe fn(*mut Storage),
    /// Moves the `F` out of the storage and drops it.
    drop: unsafe fn(*mut Storage),
    /// Moves the `F` out of the storage for good at shutdown: drops a user closure, tells an
    /// internal entry.
    discard: unsafe fn(*mut Storage),
    /// Runs on the timer thread itself rather than on a worker (wakers, notifications).
    inline: bool,
    /// The storage holds a [`Waker`] ([`Callback::waker`]).
    waker: bool,
}

/// The vtable of a [`Callback::waker`]: the storage holds a `Waker`; calling or discarding
/// wakes it.
static WAKER: VTable = VTable {
    call: wake_erased,
    drop: drop_erased::<Waker>,
    discard: wake_erased,
    inline: true,
    waker: true,
};

/// The vtable of a [`Callback::notify`]: the storage holds an `Arc<dyn Expire>`.
static NOTIFY: VTable = VTable {
    call: expire_erased::<true>,
    drop: drop_erased::<StdArc<dyn Expire>>,
    discard: expire_erased::<false>,
    inline: true,
    waker: false,
};

/// How an entry made by [`Callback::notify`] left the service.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Expiry {
    /// Its deadline passed; called on the timer thread.
    Fired,
    /// The service shut down with the entry still pending.
    Discarded,
}

/// The cheap, non-blocking action of an entry that expires *on the timer thread* (the hook of
/// `Deadlines`). It must not block or panic: it runs on the thread that keeps every other
/// timer on time.
pub(crate) trait Expire: Send + Sync + 'static {
    /// Called exactly once per scheduling that was neither cancelled nor reset away.
    fn expire(&self, how: Expiry);
}

/// A callback run at most once; small ones are stored without allocating.
pub(crate) struct Callback {
    data: Storage,
    vtable: &'static VTable,
    /// Not `Sync`, and `Send` only through the `unsafe impl` below.
    _not_sync: PhantomData<*mut ()>,
}

// SAFETY: `new` only stores values of `F: Send`, and `data` is reachable only through `self`,
// so moving a `Callback` to another thread moves that `F`, which `F: Send` allows.
unsafe impl Send for Callback {}

/// A callback on its way into the inbox: built already ([`Callback`]), or a closure built
/// where it lands ([`Closure`], see [`Callback::new_in`]): `schedule` stages a closure
/// without copying it through the stack.
pub(crate) trait Build {
    /// Writes the callback into `slot`.
    fn build_in(self, slot: &mut MaybeUninit<Callback>);
    /// The callback, built on the stack: what a refused stage gives back.
    fn build(self) -> Callback;
}

impl Build for Callback {
    #[inline]
    fn build_in(self, slot: &mut MaybeUninit<Callback>) {
        slot.write(self);
    }

    #[inline]
    fn build(self) -> Callback {
        self
    }
}

/// A user closure kept whole until it is stored, so that a refused timer can give it back
/// (`try_schedule`): unlike [`Closure`], one too big to be stored inline is boxed only as it
/// is written into its entry, under the inbox lock.
pub(crate) struct Kept<F>(pub(crate) F);

impl<F> Build for Kept<F>
where
    F: FnOnce() + Send + 'static,
{
    #[inline]
    fn build_in(self, slot: &mut MaybeUninit<Callback>) {
        Callback::new_in(slot, self.0);
    }

    #[inline]
    fn build(self) -> Callback {
        Callback::new(self.0)
    }
}

/// A user closure small enough to be stored inline, on its way to becoming a [`Callback`]
/// where it is stored ([`Callback::new_in`]); see [`prepare`].
pub(crate) struct Closure<F>(F);

/// Hands `f` on as a [`Closure`] to `inline` if it fits [`INLINE`] bytes, else boxed as a
/// [`Callback`] to `boxed`, before the caller takes any lock. The choice is made at compile
/// time, so a closure that fits travels as itself (in registers) rather than inside an enum
/// with the boxed form: such an enum lives on the stack, its parts written 8 and 4 bytes at a
/// time and read back 16 at a time, loads that the store buffer cannot forward, so each
/// waited for every older store, the inbox entries of the previous stages included.
#[inline]
pub(crate) fn prepare<F, R>(
    f: F,
    inline: impl FnOnce(Closure<F>) -> R,
    boxed: impl FnOnce(Callback) -> R,
) -> R
where
    F: FnOnce() + Send + 'static,
{
    if fits::<F>() {
        inline(Closure(f))
    } else {
        boxed(Callback::new(f))
    }
}

impl<F> Build for Closure<F>
where
    F: FnOnce() + Send + 'static,
{
    #[inline]
    fn build_in(self, slot: &mut MaybeUninit<Callback>) {
        Callback::new_in(slot, self.0);
    }

    #[inline]
    fn build(self) -> Callback {
        Callback::new(self.0)
    }
}

/// Whether an `F` can live in [`Storage`].
const fn fits<F>() -> bool {
    mem::size_of::<F>() <= mem::size_of::<Storage>()
        && mem::align_of::<F>() <= mem::align_of::<Storage>()
}

impl Callback {
    /// Wraps `f`: inline if it fits in [`INLINE`] bytes at pointer alignment, boxed otherwise.
    #[inline]
    pub(crate) fn new<F>(f: F) -> Callback
    where
        F: FnOnce() + Send + 'static,
    {
        if fits::<F>() {
            Callback::inline(f)
        } else {
            // `Box<F>` is one pointer: it always fits.
            Callback::inline(Box::new(f))
        }
    }

    /// Whether `f`'s type would be stored without a box.
    #[cfg(test)]
    pub(crate) const fn fits_inline<F>(_: &F) -> bool {
        fits::<F>()
    }

    /// Stores `f` in `data`. `F` must fit: `new` only calls it for types that do. (A
    /// `const` assertion would also fire for the branch `new` never takes; this one is
    /// folded away.)
    #[inline]
    fn inline<F>(f: F) -> Callback
    where
        F: FnOnce() + Send + 'static,
    {
        assert!(fits::<F>(), "Callback::inline: F does not fit");
        let mut data = Storage::uninit();
        // SAFETY: `F` fits `data`'s size and alignment (asserted above), and `data` is fresh,
        // so this writes the one `F` the storage will hold, which `vtable` names.
        unsafe { data.as_mut_ptr().cast::<F>().write(f) };
        Callback {
            data,
            vtable: Self::vtable_of::<F>(),
            _not_sync: PhantomData,
        }
    }

    /// The vtable of a user closure of type `F` stored inline.
    #[inline]
    const fn vtable_of<F>() -> &'static VTable
    where
        F: FnOnce() + Send + 'static,
    {
        const {
            &VTable {
                call: call_erased::<F>,
                drop: drop_erased::<F>,
                discard: drop_erased::<F>,
                inline: false,
                waker: false,
            }
        }
    }

    /// Builds the callback of `f` in `slot`, as [`new`](Self::new) would, but with `f`'s
    /// captures written straight to their final place. A `Callback` built on the stack and
    /// then moved is copied in 16-byte pieces, each read back from the smaller stores that
    /// wrote the closure: a store-to-load forward that fails, and waits for every older store
    /// to reach the cache: on the producer's path, a stall behind the cache misses of the
    /// inbox entries it has just written.
    #[inline]
    pub(crate) fn new_in<F>(slot: &mut MaybeUninit<Callback>, f: F)
    where
        F: FnOnce() + Send + 'static,
    {
        if !fits::<F>() {
            slot.write(Callback::new(f));
            return;
        }
        let at = slot.as_mut_ptr();
        // SAFETY: `at` comes from a `&mut MaybeUninit<Callback>`, so it is valid for writes,
        // aligned and unaliased; the field pointers are made without a reference to the
        // (uninitialised) `Callback`. `F` fits `data` (checked above), so this writes the one
        // `F` the storage will hold, and then the vtable made for it: every field is written
        // (`_not_sync` has no bytes), as `inline` writes them.
        unsafe {
            ptr::addr_of_mut!((*at).data).cast::<F>().write(f);
            ptr::addr_of_mut!((*at).vtable).write(Self::vtable_of::<F>());
        }
    }

    /// A callback that wakes `waker`: the futures layer's timer entry. It is run on the
    /// timer thread itself ([`is_inline`](Self::is_inline)), and the waker stays reachable
    /// ([`waker_mut`](Self::waker_mut)) so a poll can replace it in place.
    #[inline]
    pub(crate) fn waker(waker: Waker) -> Callback {
        const { assert!(fits::<Waker>()) };
        let mut data = Storage::uninit();
        // SAFETY: a `Waker` fits `data` (asserted at compile time) and `data` is fresh; the
        // `WAKER` vtable is the one made for a `Waker`.
        unsafe { data.as_mut_ptr().cast::<Waker>().write(waker) };
        Callback {
            data,
            vtable: &WAKER,
            _not_sync: PhantomData,
        }
    }

    /// A callback that calls `target.expire(Fired)` on the timer thread, or
    /// `expire(Discarded)` if the service shuts down first (`Deadlines`' timer entry).
    pub(crate) fn notify(target: StdArc<dyn Expire>) -> Callback {
        const { assert!(fits::<StdArc<dyn Expire>>()) };
        let mut data = Storage::uninit();
        // SAFETY: an `Arc<dyn Expire>` fits `data` (asserted at compile time) and `data` is
        // fresh; the `NOTIFY` vtable is the one made for it.
        unsafe { data.as_mut_ptr().cast::<StdArc<dyn Expire>>().write(target) };
        Callback {
            data,
            vtable: &NOTIFY,
            _not_sync: PhantomData,
        }
    }

    /// Whether this runs on the timer thread rather than on a worker: a
    /// [`waker`](Self::waker) or a [`notify`](Self::notify) (cheap and non-blocking).
    #[inline]
    pub(crate) fn is_inline(&self) -> bool {
        self.vtable.inline
    }

    /// Whether this is a [`waker`](Self::waker) callback.
    #[cfg(test)]
    pub(crate) fn is_waker(&self) -> bool {
        self.vtable.waker
    }

    /// The waker of a [`waker`](Self::waker) callback; `None` for any other.
    #[inline]
    pub(crate) fn waker_mut(&mut self) -> Option<&mut Waker> {
        if !self.vtable.waker {
            return None;
        }
        // SAFETY: only `Callback::waker` sets the `WAKER` vtable, after writing a `Waker` into
        // `data`; it stays live and in place until `call` or `drop` moves it out, which both
        // take the whole `Callback`, so it is live while `self` is borrowed.
        Some(unsafe { &mut *self.data.as_mut_ptr().cast::<Waker>() })
    }

    /// Runs the callback, consuming it. A panic propagates to the caller, with the callback's
    /// captured state dropped by the unwinding as usual.
    #[inline]
    pub(crate) fn call(self) {
        let mut this = ManuallyDrop::new(self);
        // SAFETY: `data` holds the live `F` that `vtable` was made for (module docs), and
        // `this` is never used or dropped again, so the value is moved out exactly once.
        unsafe { (this.vtable.call)(&mut this.data) }
    }
}

impl Callback {
    /// Gives the callback up at shutdown: a user closure is dropped without running, a waker
    /// is woken (its `Sleep` then sees its timer gone), a notification gets `Discarded`.
    pub(crate) fn discard(self) {
        let mut this = ManuallyDrop::new(self);
        // SAFETY: as in `call`: the value is live and moved out exactly once.
        unsafe { (this.vtable.discard)(&mut this.data) }
    }
}

impl Drop for Callback {
    fn drop(&mut self) {
        // SAFETY: as in `call`: the `F` is live (a `Callback` that was called never drops),
        // and `self` is not used again after `drop`.
        unsafe { (self.vtable.drop)(&mut self.data) }
    }
}

impl fmt::Debug for Callback {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Callback").finish_non_exhaustive()
    }
}

/// # Safety
///
/// `data` holds a live `F`, which is moved out: the caller must not touch it again.
unsafe fn call_erased<F: FnOnce()>(data: *mut Storage) {
    // SAFETY: the caller guarantees a live, properly aligned `F` it gives up.
    let f = unsafe { ptr::read(data.cast::<F>()) };
    f();
}

/// # Safety
///
/// `data` holds a live `Waker`, which is moved out: the caller must not touch it again.
unsafe fn wake_erased(data: *mut Storage) {
    // SAFETY: the caller guarantees a live, properly aligned `Waker` it gives up.
    let waker = unsafe { ptr::read(data.cast::<Waker>()) };
    waker.wake();
}

/// # Safety
///
/// `data` holds a live `Arc<dyn Expire>`, which is moved out: the caller must not touch it
/// again.
unsafe fn expire_erased<const FIRED: bool>(data: *mut Storage) {
    // SAFETY: the caller guarantees a live, properly aligned `Arc<dyn Expire>` it gives up.
    let target = unsafe { ptr::read(data.cast::<StdArc<dyn Expire>>()) };
    target.expire(if FIRED {
        Expiry::Fired
    } else {
        Expiry::Discarded
    });
}

/// # Safety
///
/// As [`call_erased`].
unsafe fn drop_erased<F>(data: *mut Storage) {
    // SAFETY: the caller guarantees a live, properly aligned `F` it gives up.
    unsafe { ptr::drop_in_place(data.cast::<F>()) };
}

/// What [`Waker::will_wake`] compares of a waker: its data pointer and its vtable's address.
/// A `Sleep` keeps the one of the waker in its queue entry, to see without the shard lock that
/// a new poll brings a waker of the same task. Two wakers with equal ids are the same raw waker
/// (the same task); while the entry holds its waker, that waker's data is alive, so no other
/// waker can take its address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct WakerId {
    data: usize,
    vtable: usize,
}

impl WakerId {
    #[inline]
    pub(crate) fn of(waker: &Waker) -> WakerId {
        WakerId {
            data: waker.data() as usize,
            vtable: std::ptr::from_ref(waker.vtable()) as usize,
        }
    }
}

#[cfg(test)]
mod tests {
    //! Run under Miri by `.ci/run` (`cargo +nightly miri test --lib service::callback`).

    use super::*;
    use std::panic::{catch_unwind, AssertUnwindSafe};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// Counts drops of the values it is cloned into.
    #[derive(Clone)]
    struct Tracked(Arc<AtomicUsize>);

    impl Drop for Tracked {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn counter() -> Arc<AtomicUsize> {
        Arc::new(AtomicUsize::new(0))
    }

    /// Builds `f`'s callback in `slot` as a stage does: prepared, then built in place.
    fn built_in<F: FnOnce() + Send + 'static>(slot: &mut MaybeUninit<Callback>, f: F) {
        match prepare(f, Ok, Err) {
            Ok(closure) => closure.build_in(slot),
            Err(boxed) => boxed.build_in(slot),
        }
    }

    #[test]
    fn a_callback_built_in_place_runs_or_drops_its_closure_once() {
        // Inline (an `Arc` and a word) and boxed (three words), each called and dropped.
        let (ran, dropped) = (counter(), counter());
        for big in [false, true] {
            for call in [false, true] {
                let (r, tracked) = (ran.clone(), Tracked(dropped.clone()));
                let pad = [0u64; 3];
                let mut slot = MaybeUninit::uninit();
                if big {
                    built_in(&mut slot, move || {
                        let _keep = (&tracked, pad);
                        r.fetch_add(1, Ordering::SeqCst);
                    });
                } else {
                    built_in(&mut slot, move || {
                        let _keep = &tracked;
                        r.fetch_add(1, Ordering::SeqCst);
                    });
                }
                // SAFETY: `build_in` initialised the slot.
                let callback = unsafe { slot.assume_init() };
                assert!(!callback.is_inline());
                if call {
                    callback.call();
                } else {
                    drop(callback);
                }
            }
        }
        assert_eq!(ran.load(Ordering::SeqCst), 2);
        assert_eq!(dropped.load(Ordering::SeqCst), 4);
    }

    #[test]
    fn small_closures_are_inline_and_large_or_over_aligned_ones_boxed() {
        let id = 7u64;
        let arc = counter();
        let small = move || drop((id, arc));
        assert!(Callback::fits_inline(&small));
        let big = [1u64; 3];
        let large = move || assert_eq!(big[0], 1);
        assert!(!Callback::fits_inline(&large));
        #[repr(align(16))]
        struct Wide(u8);
        impl Wide {
            fn byte(&self) -> u8 {
                self.0
            }
        }
        let wide = Wide(1);
        // A method call captures the whole `wide`, not just its field.
        let aligned = move || assert_eq!(wide.byte(), 1);
        assert!(!Callback::fits_inline(&aligned));
        assert!(Callback::fits_inline(&|| {}));
        // Two words of state plus a vtable pointer: a `Callback` is three words.
        assert_eq!(mem::size_of::<Callback>(), 3 * mem::size_of::<usize>());
        // The vtable reference is never null, so a vacant slab entry costs no extra word:
        // wakers and notifications are callbacks too, not a second enum variant.
        assert_eq!(
            mem::size_of::<Option<Callback>>(),
            3 * mem::size_of::<usize>()
        );
    }

    #[test]
    fn calls_run_once_and_drop_the_captured_state_once() {
        // The counter gets 100 per run and 1 per drop of the tracker. Captures of one word
        // (the tracker), two (inline at the limit) and four (boxed).
        for words in [1usize, 2, 4] {
            let count = counter();
            let t = Tracked(count.clone());
            let callback = match words {
                1 => Callback::new(move || {
                    t.0.fetch_add(100, Ordering::SeqCst);
                }),
                2 => {
                    let run = 100usize;
                    assert!(Callback::fits_inline(&(&t, run)));
                    Callback::new(move || {
                        t.0.fetch_add(run, Ordering::SeqCst);
                    })
                }
                _ => {
                    let runs = [0, 0, 100usize];
                    Callback::new(move || {
                        t.0.fetch_add(runs[2], Ordering::SeqCst);
                    })
                }
            };
            assert_eq!(count.load(Ordering::SeqCst), 0);
            callback.call();
            assert_eq!(count.load(Ordering::SeqCst), 101, "{words} words");
        }
    }

    #[test]
    fn dropping_uncalled_drops_the_state_once_and_never_calls() {
        let ran = counter();
        let drops = counter();
        let (r, t) = (ran.clone(), Tracked(drops.clone()));
        let inline = Callback::new(move || {
            r.fetch_add(1, Ordering::SeqCst);
            drop(t);
        });
        let (r, t, big) = (ran.clone(), Tracked(drops.clone()), [9u64; 5]);
        let boxed = Callback::new(move || {
            r.fetch_add(big[0] as usize, Ordering::SeqCst);
            drop(t);
        });
        drop(inline);
        drop(boxed);
        assert_eq!(ran.load(Ordering::SeqCst), 0);
        assert_eq!(drops.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn a_panicking_callback_drops_its_state_once() {
        for boxed in [false, true] {
            let drops = counter();
            let t = Tracked(drops.clone());
            let big = [1u64; 4];
            let callback = if boxed {
                Callback::new(move || {
                    let _keep = (&t, big);
                    panic!("boom");
                })
            } else {
                Callback::new(move || {
                    let _keep = &t;
                    panic!("boom");
                })
            };
            let result = catch_unwind(AssertUnwindSafe(|| callback.call()));
            assert!(result.is_err());
            assert_eq!(drops.load(Ordering::SeqCst), 1, "boxed {boxed}");
        }
    }

    #[test]
    fn callbacks_move_across_threads() {
        let ran = counter();
        let callbacks: Vec<Callback> = (0..4)
            .map(|i| {
                let ran = ran.clone();
                Callback::new(move || {
                    ran.fetch_add(i, Ordering::SeqCst);
                })
            })
            .collect();
        std::thread::spawn(move || callbacks.into_iter().for_each(Callback::call))
            .join()
            .unwrap();
        assert_eq!(ran.load(Ordering::SeqCst), 6);
    }

    /// Counts wake-ups and drops of the wakers made from it.
    struct CountWake(AtomicUsize);

    impl std::task::Wake for CountWake {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_waker_callback_wakes_once_can_be_swapped_and_frees_its_waker() {
        let first = Arc::new(CountWake(AtomicUsize::new(0)));
        let second = Arc::new(CountWake(AtomicUsize::new(0)));
        let mut callback = Callback::waker(Waker::from(first.clone()));
        assert!(callback.is_waker());
        assert!(!Callback::new(|| {}).is_waker());
        assert!(Callback::new(|| {}).waker_mut().is_none());
        // A poll with another task's waker swaps it in place; the old one is dropped.
        let slot = callback.waker_mut().unwrap();
        *slot = Waker::from(second.clone());
        assert_eq!(
            Arc::strong_count(&first),
            1,
            "the replaced waker was dropped"
        );
        callback.call();
        assert_eq!(first.0.load(Ordering::SeqCst), 0);
        assert_eq!(second.0.load(Ordering::SeqCst), 1);
        assert_eq!(Arc::strong_count(&second), 1, "waking consumed the waker");
        // Dropped without being called: the waker is dropped, not woken.
        let dropped = Callback::waker(Waker::from(second.clone()));
        assert_eq!(Arc::strong_count(&second), 2);
        drop(dropped);
        assert_eq!(Arc::strong_count(&second), 1);
        assert_eq!(second.0.load(Ordering::SeqCst), 1);
    }
}
