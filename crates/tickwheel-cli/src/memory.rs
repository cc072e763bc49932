//! Heap accounting: a global allocator that counts live heap bytes and their peak, so a
//! run can report the peak memory of the queue it measured.
//!
//! Invariants: every allocation, reallocation and free of the process passes through
//! [`CountingAllocator`], which forwards it unchanged to the system allocator. Once the
//! first [`PeakMeter`] starts, it also adjusts two relaxed atomic counters (one uncontended
//! atomic add per call, the same cost for every entrant); before that (in `tickwheel demo`
//! and the service workers, which are multi-threaded) it costs one relaxed load. Counts are
//! process-wide and relative to the moment counting began, so a measurement is meaningful
//! only as a difference, while one thread allocates (the virtual-time workloads run on one
//! thread).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicIsize, Ordering};

static COUNTING: AtomicBool = AtomicBool::new(false);
static LIVE: AtomicIsize = AtomicIsize::new(0);
static PEAK: AtomicIsize = AtomicIsize::new(0);

/// The system allocator, counting live bytes and their peak.
#[derive(Debug)]
pub struct CountingAllocator;

fn grew(by: usize) {
    if !COUNTING.load(Ordering::Relaxed) {
        return;
    }
    let live = LIVE.fetch_add(by as isize, Ordering::Relaxed) + by as isize;
    if live > PEAK.load(Ordering::Relaxed) {
        PEAK.fetch_max(live, Ordering::Relaxed);
    }
}

fn shrank(by: usize) {
    if !COUNTING.load(Ordering::Relaxed) {
        return;
    }
    LIVE.fetch_sub(by as isize, Ordering::Relaxed);
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged, so the
// `GlobalAlloc` contract is `System`'s; the counters have no effect on the memory returned.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller upholds `alloc`'s contract, which we pass on unchanged.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            grew(layout.size());
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as in `alloc`.
        let ptr = unsafe { System.alloc_zeroed(layout) };
        if !ptr.is_null() {
            grew(layout.size());
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller upholds `dealloc`'s contract, which we pass on unchanged.
        unsafe { System.dealloc(ptr, layout) };
        shrank(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller upholds `realloc`'s contract, which we pass on unchanged.
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            // Counted as a new block before the old one is freed: a moving realloc holds
            // both for a moment, and that is the peak it really reaches.
            grew(new_size);
            shrank(layout.size());
        }
        new
    }
}

/// Heap bytes live now, relative to when counting began.
#[cfg(test)]
fn live_bytes() -> isize {
    LIVE.load(Ordering::Relaxed)
}

/// Measures the peak heap growth above the bytes live when it was created.
#[derive(Debug)]
pub struct PeakMeter {
    baseline: isize,
}

impl PeakMeter {
    /// Starts counting (if not yet) and a new peak measurement from the bytes live now.
    pub fn start() -> PeakMeter {
        COUNTING.store(true, Ordering::Relaxed);
        let baseline = LIVE.load(Ordering::Relaxed);
        PEAK.store(baseline, Ordering::Relaxed);
        PeakMeter { baseline }
    }

    /// Forgets the peak so far: from now on the peak is the most bytes live at once since
    /// this call, still counted above the baseline of [`PeakMeter::start`].
    pub fn restart_peak(&self) {
        PEAK.store(LIVE.load(Ordering::Relaxed), Ordering::Relaxed);
    }

    /// The most bytes live at once above the baseline since the start (or the last
    /// [`PeakMeter::restart_peak`]).
    pub fn peak_growth(&self) -> u64 {
        PEAK.load(Ordering::Relaxed)
            .saturating_sub(self.baseline)
            .max(0) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_vector_shows_in_the_peak_and_leaves_the_live_count() {
        // 64 MiB, judged with a 32 MiB margin: other test threads allocate meanwhile.
        let meter = PeakMeter::start();
        let v: Vec<u8> = Vec::with_capacity(64 << 20);
        assert!(meter.peak_growth() >= 32 << 20);
        let with = live_bytes();
        drop(v);
        assert!(live_bytes() + (32 << 20) < with);
        assert!(meter.peak_growth() >= 32 << 20, "the peak stays");
    }
}
