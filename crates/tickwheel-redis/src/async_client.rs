//! [`AsyncProducer`] and [`AsyncInspector`]: a [`Producer`] or an [`Inspector`] that async
//! code awaits, on a thread of its own.
//!
//! Every call of the crate is a blocking round trip to Redis (see DESIGN-NOTES, "Why is the
//! durable store's API blocking?"). Made from an async task, such a call would hold one of
//! the executor's threads for the whole round trip, and for a connect timeout when Redis is
//! away. An `AsyncProducer` (or `AsyncInspector`) runs its client on a thread it starts, and
//! hands each call to it through a channel: the task that awaits the call's [`AsyncCall`] is
//! woken when the answer is in. No executor is assumed: the futures are woken through their
//! `Waker`, as `tickwheel`'s timer futures are.

use std::any::Any;
use std::future::Future;
use std::panic::{self, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::{mpsc, Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};
use std::thread;

use crate::{Config, Error, Inspector, Producer};

/// A call on its way to a client's thread.
type Job<C> = Box<dyn FnOnce(&mut C) + Send>;

/// A started thread, and the future of its client's connect.
type Started<C> = (OnThread<C>, AsyncCall<Result<(), Error>>);

/// A client `C` on a thread of its own, running the calls sent to it in order: what
/// [`AsyncProducer`] and [`AsyncInspector`] share.
struct OnThread<C> {
    jobs: mpsc::Sender<Job<C>>,
}

impl<C> Clone for OnThread<C> {
    fn clone(&self) -> Self {
        OnThread {
            jobs: self.jobs.clone(),
        }
    }
}

impl<C: 'static> OnThread<C> {
    /// Starts thread `tickwheel-redis-<name>`, which gets its client from `open` and answers
    /// that through the returned call; then runs the calls sent, in order, until every sender
    /// is dropped.
    fn start(
        name: &'static str,
        open: impl FnOnce() -> Result<C, Error> + Send + 'static,
    ) -> Result<Started<C>, Error> {
        let (jobs, inbox) = mpsc::channel::<Job<C>>();
        let answer = Arc::new(Slot::default());
        let opened = Arc::clone(&answer);
        thread::Builder::new()
            .name(format!("tickwheel-redis-{name}"))
            .spawn(move || {
                let mut client = match panic::catch_unwind(AssertUnwindSafe(open)) {
                    Ok(Ok(client)) => {
                        opened.fill(Ok(Ok(())));
                        client
                    }
                    Ok(Err(e)) => return opened.fill(Ok(Err(e))),
                    Err(panicked) => return opened.fill(Err(panicked)),
                };
                for job in inbox {
                    job(&mut client);
                }
            })
            .map_err(|source| Error::Thread {
                thread: name,
                source,
            })?;
        Ok((OnThread { jobs }, AsyncCall::new(answer)))
    }

    /// [`start`](Self::start) with a client that `connect` makes on the new thread; the
    /// future answers once it has.
    fn connect(
        name: &'static str,
        connect: impl FnOnce() -> Result<C, Error> + Send + 'static,
    ) -> impl Future<Output = Result<OnThread<C>, Error>> + 'static {
        let started = OnThread::start(name, connect);
        async move {
            let (client, connected) = started?;
            connected.await?;
            Ok(client)
        }
    }

    /// Sends `call` to the thread, which runs it after the calls sent before it.
    fn call<R, F>(&self, call: F) -> AsyncCall<R>
    where
        F: FnOnce(&mut C) -> R + Send + 'static,
        R: Send + 'static,
    {
        let answer = Arc::new(Slot::default());
        let filled = Arc::clone(&answer);
        let job: Job<C> = Box::new(move |client| {
            filled.fill(panic::catch_unwind(AssertUnwindSafe(|| call(client))));
        });
        if let Err(mpsc::SendError(job)) = self.jobs.send(job) {
            // The thread ends only once every sender is gone, and `self` is one; it runs each
            // call inside `catch_unwind`. Should it have ended all the same, the call fails
            // rather than hang: its closure is dropped unrun, and its future panics.
            drop(job);
            answer.fill(Err(Box::new("the client's thread has ended")));
        }
        AsyncCall::new(answer)
    }
}

/// A [`Producer`] for async code: each call runs on the producer's own thread, and its
/// [`AsyncCall`] is a future of the answer, woken through its `Waker` on any executor.
///
/// ```no_run
/// use tickwheel_redis::{AsyncProducer, Config, RunAt};
/// use std::time::Duration;
///
/// # async fn example() -> Result<(), tickwheel_redis::Error> {
/// let producer = AsyncProducer::connect(&Config::new("redis://127.0.0.1:6379/", "orders")).await?;
/// producer
///     .schedule("cancel-order-42", RunAt::After(Duration::from_secs(1800)), b"order 42")
///     .await?;
/// // Any other call of the `Producer`: the closure runs on the producer's thread.
/// let id = String::from("cancel-order-42");
/// let cancelled = producer.call(move |p| p.cancel(&id)).await?;
/// assert!(cancelled);
/// # Ok(())
/// # }
/// ```
///
/// # What a call does
///
/// * **It is sent at once**, when [`call`](Self::call) (or [`schedule`](Self::schedule))
///   returns, not when its future is first polled, and it runs whether or not the future is
///   awaited: a dropped `AsyncCall` drops the answer, not the call. A call that has reached
///   Redis cannot be taken back anyway; the `Producer`'s errors say what a failed call
///   stored.
/// * **Calls run one at a time, in the order they were made** (from any clone, from any
///   thread), on one connection: a call made after another one returned sees its effect. For
///   more calls in flight at once, connect several `AsyncProducer`s; each has its own thread
///   and connection. Bulk calls (`schedule_many`) store many tasks in one round trip.
/// * **Queued calls are not bounded.** A program that makes calls faster than Redis answers
///   them should await them (or a bounded number of them) as it goes.
/// * **A panic in a call's closure** is caught on the producer's thread, which goes on with
///   the next call, and resumed in the task that polls the `AsyncCall`, as
///   `std::thread::JoinHandle::join` would return it.
/// * **Dropping the last clone** lets the thread finish the calls queued, then drop the
///   `Producer` (closing its connection) and end. Nothing waits for it.
#[derive(Clone)]
pub struct AsyncProducer {
    thread: OnThread<Producer>,
}

impl std::fmt::Debug for AsyncProducer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncProducer").finish_non_exhaustive()
    }
}

impl AsyncProducer {
    /// Starts the producer's thread, which connects ([`Producer::connect`]); the future
    /// answers once it has. The connection is made on that thread, so an unreachable Redis
    /// holds no executor thread for the connect timeout. The thread starts at once, whether
    /// or not the future is awaited; if it is dropped, the thread connects and ends.
    ///
    /// Errors: those of [`Producer::connect`], and [`Error::Thread`] when the thread cannot
    /// be started.
    pub fn connect(cfg: &Config) -> impl Future<Output = Result<AsyncProducer, Error>> + 'static {
        let cfg = cfg.clone();
        let connected = OnThread::connect("producer", move || Producer::connect(&cfg));
        async move {
            Ok(AsyncProducer {
                thread: connected.await?,
            })
        }
    }

    /// Starts a thread for a `producer` connected already (with [`Producer::connect`], say,
    /// before the program's executor started).
    ///
    /// Errors: [`Error::Thread`] when the thread cannot be started.
    pub fn new(producer: Producer) -> Result<AsyncProducer, Error> {
        let (thread, _) = OnThread::start("producer", move || Ok(producer))?;
        Ok(AsyncProducer { thread })
    }

    /// Sends `call` to the producer's thread, which runs it after the calls made before it;
    /// the returned future answers what it returned. Every method of [`Producer`] is reached
    /// so, its arguments moved into the closure:
    ///
    /// ```no_run
    /// # async fn example(producer: tickwheel_redis::AsyncProducer) -> Result<(), tickwheel_redis::Error> {
    /// let ids: Vec<String> = vec!["a".into(), "b".into()];
    /// let cancelled = producer.call(move |p| p.cancel_many(&ids)).await?;
    /// let pending = producer.call(|p| p.len()).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn call<R, F>(&self, call: F) -> AsyncCall<R>
    where
        F: FnOnce(&mut Producer) -> R + Send + 'static,
        R: Send + 'static,
    {
        self.thread.call(call)
    }

    /// [`Producer::schedule`] on the producer's thread: stores (or replaces) the task `id`,
    /// to run at `run_at` with `payload`.
    pub fn schedule(
        &self,
        id: impl Into<String>,
        run_at: crate::RunAt,
        payload: impl Into<Vec<u8>>,
    ) -> AsyncCall<Result<crate::Scheduled, Error>> {
        let (id, payload) = (id.into(), payload.into());
        self.call(move |p| p.schedule(&id, run_at, &payload))
    }
}

/// An [`Inspector`] for async code: each call runs on the inspector's own thread, and its
/// [`AsyncCall`] is a future of the answer, woken through its `Waker` on any executor. Calls
/// are made and run as an [`AsyncProducer`]'s are: sent at once, run whether or not awaited,
/// one at a time in the order made, a panic resumed where the future is polled, the thread
/// ended after the calls queued once the last clone is dropped. For an operator's API served
/// by an async web framework:
///
/// ```no_run
/// use tickwheel_redis::{AsyncInspector, Config};
///
/// # async fn example() -> Result<(), tickwheel_redis::Error> {
/// let inspector =
///     AsyncInspector::connect(&Config::new("redis://127.0.0.1:6379/", "orders")).await?;
/// let stats = inspector.call(|i| i.stats()).await?;
/// println!("{} pending", stats.pending());
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct AsyncInspector {
    thread: OnThread<Inspector>,
}

impl std::fmt::Debug for AsyncInspector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncInspector").finish_non_exhaustive()
    }
}

impl AsyncInspector {
    /// Starts the inspector's thread, which connects ([`Inspector::connect`]); the future
    /// answers once it has, as [`AsyncProducer::connect`] does.
    ///
    /// Errors: those of [`Inspector::connect`], and [`Error::Thread`] when the thread cannot
    /// be started.
    pub fn connect(cfg: &Config) -> impl Future<Output = Result<AsyncInspector, Error>> + 'static {
        let cfg = cfg.clone();
        let connected = OnThread::connect("inspector", move || Inspector::connect(&cfg));
        async move {
            Ok(AsyncInspector {
                thread: connected.await?,
            })
        }
    }

    /// Starts a thread for an `inspector` connected already.
    ///
    /// Errors: [`Error::Thread`] when the thread cannot be started.
    pub fn new(inspector: Inspector) -> Result<AsyncInspector, Error> {
        let (thread, _) = OnThread::start("inspector", move || Ok(inspector))?;
        Ok(AsyncInspector { thread })
    }

    /// Sends `call` to the inspector's thread, which runs it after the calls made before it;
    /// the returned future answers what it returned. Every method of [`Inspector`] is reached
    /// so, its arguments moved into the closure.
    pub fn call<R, F>(&self, call: F) -> AsyncCall<R>
    where
        F: FnOnce(&mut Inspector) -> R + Send + 'static,
        R: Send + 'static,
    {
        self.thread.call(call)
    }
}

/// The answer to one call of an [`AsyncProducer`] or an [`AsyncInspector`]: a future of what
/// the call returned, ready once the client's thread has run it. The call runs whether or not
/// this is awaited.
#[must_use = "the call runs anyway; await its future for the answer"]
pub struct AsyncCall<R> {
    /// `None` once the answer has been returned.
    answer: Option<Arc<Slot<R>>>,
}

impl<R> AsyncCall<R> {
    fn new(answer: Arc<Slot<R>>) -> AsyncCall<R> {
        AsyncCall {
            answer: Some(answer),
        }
    }
}

impl<R> std::fmt::Debug for AsyncCall<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncCall")
            .field("answered", &self.answer.is_none())
            .finish()
    }
}

impl<R> Future for AsyncCall<R> {
    type Output = R;

    /// Ready with the call's answer once its closure has returned; resumes its panic if it
    /// panicked. Panics if polled again after it was ready.
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<R> {
        let slot = self
            .answer
            .as_ref()
            .expect("an AsyncCall polled after it was ready");
        let mut state = slot.lock();
        let Some(answer) = state.answer.take() else {
            match &state.waker {
                Some(waker) if waker.will_wake(cx.waker()) => {}
                _ => state.waker = Some(cx.waker().clone()),
            }
            return Poll::Pending;
        };
        drop(state);
        self.answer = None;
        match answer {
            Ok(answer) => Poll::Ready(answer),
            Err(panicked) => panic::resume_unwind(panicked),
        }
    }
}

/// Where the client's thread leaves a call's answer (or the panic of its closure), and where
/// the task awaiting it leaves its waker.
struct Slot<R> {
    state: Mutex<SlotState<R>>,
}

struct SlotState<R> {
    answer: Option<Result<R, Box<dyn Any + Send>>>,
    waker: Option<Waker>,
}

impl<R> Default for Slot<R> {
    fn default() -> Self {
        Slot {
            state: Mutex::new(SlotState {
                answer: None,
                waker: None,
            }),
        }
    }
}

impl<R> Slot<R> {
    fn lock(&self) -> std::sync::MutexGuard<'_, SlotState<R>> {
        // No code that can panic runs under the lock.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Leaves the answer and wakes the task waiting for it, if any (outside the lock).
    fn fill(&self, answer: Result<R, Box<dyn Any + Send>>) {
        let waker = {
            let mut state = self.lock();
            state.answer = Some(answer);
            state.waker.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}
