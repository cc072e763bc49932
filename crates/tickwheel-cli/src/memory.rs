//! Heap accounting: a global allocator that counts live heap bytes and their peak, so a
//! run can report the peak memory of the queue it measured.
//!
//! Invariants: every allocation, reallocation and free of the process passes through
//! [`CountingAllocator`], which forwards it unchanged to the system allocator and adjusts
//! two relaxed atomic counters (one uncontended atomic add per call, the same cost for
//! every entrant). Counts are process-wide, so a measurement is meaningful only while one
//! thread allocates (the virtual-time workloads run on one thread).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

static LIVE: AtomicIsize = AtomicIsize::new(0);
static PEAK: AtomicIsize = AtomicIsize::new(0);

/// The system allocator, counting live bytes and their peak.
#[derive(Debug)]
pub struct CountingAllocator;

fn grew(by: usize) {
    let live = LIVE.fetch_add(by as isize, Ordering::Relaxed) + by as isize;
    if live > PEAK.load(Ordering::Relaxed) {
        PEAK.fetch_max(live, Ordering::Relaxed);
    }
}

fn shrank(by: usize) {
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

/// Heap bytes live now.
#[cfg(test)]
pub fn live_bytes() -> u64 {
    LIVE.load(Ordering::Relaxed).max(0) as u64
}

/// Starts a new peak measurement from the bytes live now; returns them (the baseline).
pub fn reset_peak() -> u64 {
    let live = LIVE.load(Ordering::Relaxed);
    PEAK.store(live, Ordering::Relaxed);
    live.max(0) as u64
}

/// The most heap bytes live at once since the last [`reset_peak`].
pub fn peak_bytes() -> u64 {
    PEAK.load(Ordering::Relaxed).max(0) as u64
}

/// Measures the peak heap growth above the bytes live when it was created.
#[derive(Debug)]
pub struct PeakMeter {
    baseline: u64,
}

impl PeakMeter {
    /// Starts measuring from now.
    pub fn start() -> PeakMeter {
        PeakMeter {
            baseline: reset_peak(),
        }
    }

    /// The peak bytes above the baseline so far.
    pub fn peak_growth(&self) -> u64 {
        peak_bytes().saturating_sub(self.baseline)
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
