//! Peer: tokio-util's `DelayQueue`, driven by paused tokio time.
//!
//! The queue lives on a current-thread runtime started paused, so tokio's clock is virtual
//! and moves only when we call `tokio::time::advance`. Each [`VirtualTimeQueue::advance`] moves
//! the clock one millisecond (DelayQueue's own resolution) and drains every expired entry,
//! which is how a task awaiting `poll_expired` would see them (outside tokio's coop budget;
//! see the comment in `advance`). Inserts use `insert_at` with
//! `start + deadline` so deadlines are absolute, exactly as for the other entrants.

use super::VirtualTimeQueue;
use std::future::poll_fn;
use std::task::Poll;
use std::time::Duration;
use tokio::runtime::Runtime;
use tokio::time::Instant;
use tokio_util::time::delay_queue::{DelayQueue, Key};

/// A `DelayQueue<u32>` plus the paused runtime that gives it time.
pub struct TokioDelayQueue {
    runtime: Runtime,
    queue: DelayQueue<u32>,
    start: Instant,
}

impl std::fmt::Debug for TokioDelayQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokioDelayQueue").finish_non_exhaustive()
    }
}

impl TokioDelayQueue {
    /// An empty queue on a fresh paused runtime.
    pub fn new() -> std::io::Result<TokioDelayQueue> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()?;
        // Both read tokio's clock, so both must see the paused one.
        let (queue, start) = {
            let _context = runtime.enter();
            (DelayQueue::new(), Instant::now())
        };
        Ok(TokioDelayQueue {
            runtime,
            queue,
            start,
        })
    }
}

impl VirtualTimeQueue for TokioDelayQueue {
    type Handle = Key;

    #[inline]
    fn insert(&mut self, id: u32, deadline: u64) -> Key {
        self.queue
            .insert_at(id, self.start + Duration::from_millis(deadline))
    }

    #[inline]
    fn cancel(&mut self, key: Key) -> bool {
        // `DelayQueue::remove` panics on a stale key; `try_remove` is the checked form.
        self.queue.try_remove(&key).is_some()
    }

    #[inline]
    fn reset(&mut self, key: Key, _id: u32, deadline: u64) -> Key {
        self.queue
            .reset_at(&key, self.start + Duration::from_millis(deadline));
        key
    }

    fn advance(&mut self, now: u64, fired: &mut Vec<(u32, u64)>) {
        let queue = &mut self.queue;
        let target = self.start + Duration::from_millis(now);
        self.runtime.block_on(async {
            let behind = target.saturating_duration_since(Instant::now());
            tokio::time::advance(behind).await;
            // `unconstrained`: tokio's coop budget would make the inner `Sleep` return
            // `Pending` after 128 polls, and a task would be re-polled at once, at the same
            // instant; here the clock would move first and the rest would look a tick late.
            tokio::task::unconstrained(poll_fn(|cx| {
                while let Poll::Ready(Some(expired)) = queue.poll_expired(cx) {
                    fired.push((expired.into_inner(), now));
                }
                Poll::Ready(())
            }))
            .await;
        });
    }

    fn scoped<R>(&mut self, f: impl FnOnce(&mut Self) -> R) -> R {
        let handle = self.runtime.handle().clone();
        let _context = handle.enter();
        f(self)
    }
}
