//! The Linux backend: [`TimerFd`], a timer queue driven by one `timerfd` (feature `timerfd`).

#[cfg(test)]
mod tests;
mod timerfd;

pub use timerfd::{Drain, TimerFd};
