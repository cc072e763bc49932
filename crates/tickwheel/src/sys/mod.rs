//! Event-loop drivers (layer 3): timers living in the same loop as sockets, with one kernel
//! timer armed at the earliest expiry (asio `epoll_reactor`, libco `co_eventloop`).
//!
//! Platform code lives here and nowhere else, picked with `cfg` the way mio's `sys/` does.
//!
//! # What a backend provides
//!
//! A backend is a type that owns a [`TimerQueue`](crate::queue::TimerQueue) and one kernel
//! timer object that an event loop can wait on next to its sockets. It must:
//!
//! * expose that object as a file descriptor (`AsFd`/`AsRawFd`) that becomes readable when the
//!   earliest timer is due, and never before (absolute arming on the monotonic clock, rounded
//!   up to the tick boundary);
//! * keep it armed at the queue's earliest expiry: re-arm when an insert or reset becomes the
//!   earliest, when the earliest is removed or moved later, and after each drain; disarm when
//!   the queue is empty; make no system call when the earliest did not change;
//! * offer `drain(now)`, which consumes the readiness and yields the expired timers in the
//!   queue's firing order.
//!
//! | platform | backend |
//! |---|---|
//! | Linux, feature `timerfd` | [`TimerFd`] (`timerfd_create` + `TFD_TIMER_ABSTIME` on `CLOCK_MONOTONIC`, via rustix) |
//! | everywhere | the portable path: any queue plus [`TickScale::poll_timeout`], passed as the timeout of `poll`/`epoll_wait`/`kqueue`/`mio::Poll::poll` |
//!
//! The portable path needs no fd: before blocking, ask the [`TickScale`] how long until the
//! queue's next expiry (rounded so a pending sub-tick timer never gives a zero timeout), block
//! at most that long, then drain the queue at [`TickScale::tick_at`]`(Instant::now())`.

mod ticks;

#[cfg(all(target_os = "linux", feature = "timerfd"))]
mod linux;
#[cfg(test)]
pub(crate) mod model;

#[cfg(all(target_os = "linux", feature = "timerfd"))]
pub use linux::{Drain, TimerFd};
pub use ticks::TickScale;
