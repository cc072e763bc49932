//! Taking timers out of a shard: a drain of the due ones, merging the queue's with the
//! calendar's by (tick, sequence number), and `close`, which takes out everything at shutdown.

use super::{
    complete_waiter, lock, AnyQueue, Callback, Entry, Job, Ordering, Shard, Staged, NEVER,
    NO_CELL_REF,
};

/// Timers a drain takes out per lock hold.
pub(super) const DRAIN_CHUNK: usize = 128;

/// Where a drain puts what it took out of a shard.
#[derive(Default)]
pub(crate) struct Drained {
    pub(crate) jobs: Vec<Job>,
    /// Callbacks to run on the timer thread itself ([`Callback::is_inline`]: wakers and
    /// notifications).
    pub(crate) inline: Vec<Job>,
}

/// What a shard held when it closed.
pub(crate) enum Closed {
    /// The whole queue of worker callbacks (dropping it drops them) and how many it held,
    /// with the staged timers (worker callbacks too).
    Queue(AnyQueue<Entry>, usize, Vec<Staged>),
    /// Every callback, when some need telling (inline ones: see [`Callback::discard`]).
    Callbacks(Vec<Callback>),
}

impl Closed {
    /// How many timers were discarded.
    pub(crate) fn len(&self) -> usize {
        match self {
            Closed::Queue(_, n, staged) => n + staged.len(),
            Closed::Callbacks(all) => all.len(),
        }
    }

    /// Drops or tells every discarded timer (see [`Callback::discard`]); the caller holds no
    /// lock: a closure's `Drop` may run any code.
    pub(crate) fn discard(self) {
        match self {
            Closed::Queue(queue, _, staged) => {
                drop(queue);
                staged.into_iter().for_each(|s| s.callback.discard());
            }
            Closed::Callbacks(all) => all.into_iter().for_each(Callback::discard),
        }
    }
}

impl Shard {
    /// Takes every timer due at `now` out of the queue, in firing order; returns how many.
    ///
    /// The lock is taken once per [`DRAIN_CHUNK`] timers, not for the whole drain, so a
    /// producer on this shard waits at most one chunk. `chunk` is called after each one,
    /// outside the lock (it may hand the chunk on).
    pub(crate) fn drain(
        &self,
        now: u64,
        out: &mut Drained,
        mut chunk: impl FnMut(&mut Drained),
    ) -> usize {
        let mut total = 0;
        loop {
            let (n, more) = self.drain_chunk(now, out);
            total += n;
            chunk(out);
            if !more {
                break;
            }
        }
        self.core.release(total);
        total
    }

    /// One lock's worth of [`drain`](Self::drain): `(taken, maybe more due)`.
    pub(super) fn drain_chunk(&self, now: u64, out: &mut Drained) -> (usize, bool) {
        let mut st = self.lock_drain();
        let st = &mut *st;
        if self.unqueued() > 0 || self.inbox.earliest.load(Ordering::Relaxed) <= now {
            self.flush(st, now);
        } else {
            self.note_peak(st);
        }
        let mut n = 0;
        while n < DRAIN_CHUNK {
            // The queue's next due timer and the calendar's, merged by (tick, sequence).
            if st.held.is_none() && st.idle_at != Some(now) {
                match st.queue.poll_expired(now) {
                    Some((key, entry)) => st.held = Some((st.queue.now(), key, entry)),
                    None => st.idle_at = Some(now),
                }
            }
            if st.held.is_none() {
                // Nothing held after the poll above: nothing due in the queue. The calendar's
                // due timers go out in order, a tick's run at a time, with no merge.
                let taken = st.cal.take_due(now, DRAIN_CHUNK - n, &mut out.jobs);
                if taken > 0 {
                    n += taken;
                    continue;
                }
            }
            let queue_first = st.held.as_ref().map(|(tick, _, entry)| (*tick, entry.seq));
            // `Some(tick)`: the calendar's first timer goes next; `None`: the queue's.
            let calendar = match (queue_first, st.cal.peek(now)) {
                (Some(first), Some(other)) => (other < first).then_some(other.0),
                (Some(_), None) => None,
                (None, Some((tick, _))) => Some(tick),
                (None, None) => {
                    let next = st.queue.next_expiration().map_or(NEVER, |t| t.max(now + 1));
                    // Taken timers are all later than `now` (see `flush`), and so are the
                    // calendar's.
                    let next = next
                        .min(st.taken_earliest)
                        .min(st.cal.first_tick().unwrap_or(NEVER));
                    self.earliest.store(next, Ordering::SeqCst);
                    self.note_len(st);
                    return (n, false);
                }
            };
            let job = if let Some(deadline) = calendar {
                let Some(callback) = st.cal.take() else {
                    break;
                };
                Job { deadline, callback }
            } else {
                let Some((deadline, key, Entry { callback, cell, .. })) = st.held.take() else {
                    break;
                };
                st.cells.left(cell);
                if !st.waiters.is_empty() {
                    complete_waiter(&mut st.waiters, key);
                }
                Job { deadline, callback }
            };
            n += 1;
            if job.callback.is_inline() {
                st.inline -= 1;
                out.inline.push(job);
            } else {
                out.jobs.push(job);
            }
        }
        self.note_len(st);
        (n, true)
    }

    /// Closes the shard (inserts are refused from now on) and takes out every pending timer,
    /// for shutdown. Waiters are released. The caller drops what it gets outside the lock.
    pub(crate) fn close(&self) -> Closed {
        let mut st = lock(&self.state);
        self.note_peak(&mut st);
        st.closed = true;
        let staged = {
            let mut inbox = self.inbox.inbox.lock();
            inbox.closed = true;
            self.inbox.earliest.store(NEVER, Ordering::SeqCst);
            self.inbox.len.store(0, Ordering::Relaxed);
            let mut staged: Vec<Staged> = st.taken.drain(..).collect();
            staged.append(&mut inbox.staged);
            // A drain never leaves a timer held (it runs until nothing is due); the calendar's
            // timers are discarded with the staged ones.
            let held = st.held.take().map(|(tick, _, entry)| Staged {
                tick,
                callback: entry.callback,
                cell: entry.cell,
            });
            let calendar = st
                .cal
                .take_all()
                .into_iter()
                .map(|(tick, _, callback)| Staged {
                    tick,
                    callback,
                    cell: NO_CELL_REF,
                });
            staged.extend(held.into_iter().chain(calendar));
            st.taken_earliest = NEVER;
            self.taken_len.store(0, Ordering::Relaxed);
            self.queued_len.store(0, Ordering::Relaxed);
            staged
        };
        let count = st.queue.len();
        let closed = if st.inline == 0 {
            // Only callbacks: nobody needs telling, drop the queue whole (no cascades).
            let fresh = AnyQueue::new(st.flavor);
            Closed::Queue(std::mem::replace(&mut st.queue, fresh), count, staged)
        } else {
            let mut all = Vec::with_capacity(count);
            while let Some((_, entry)) = st.queue.poll_expired(NEVER) {
                all.push(entry.callback);
            }
            all.extend(staged.into_iter().map(|s| s.callback));
            st.inline = 0;
            Closed::Callbacks(all)
        };
        for (_, slot) in st.waiters.drain(..) {
            slot.complete();
        }
        self.earliest.store(NEVER, Ordering::SeqCst);
        drop(st);
        let count = closed.len();
        self.core.release(count);
        closed
    }
}
