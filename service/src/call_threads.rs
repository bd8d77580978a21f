//! The threads calls run on, apart from the ones serving sockets, in two tiers by the CPU a
//! call has used ([`CallThreads`]).

use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

/// The threads programs run on, apart from the ones serving sockets: a
/// program that spins until its deadline keeps a call thread busy (yielding
/// every epoch tick), never the threads that read requests and write answers.
/// A program that cannot wait on anything ([`crate::catalog::never_waits`]) starts
/// on the serving thread and only comes here if it is still running at its
/// first epoch tick (≤ 1 ms); the hop costs tens of µs on an idle machine,
/// more than a short call itself.
///
/// Two tiers, like an operating system's scheduler favouring interactive
/// work: calls run on the call threads (nice 10) until they have computed
/// for [`LONG_CALL`], then on the background threads (`SCHED_IDLE`), which
/// get only the CPU nothing else wants. A program spinning to its deadline
/// then costs the others next to nothing, and a short call that wakes up
/// preempts it at once instead of waiting out its time slice; a long call
/// still runs at full speed on an idle core.
pub(crate) struct CallThreads {
    calls: Option<tokio::runtime::Runtime>,
    background: Option<tokio::runtime::Runtime>,
}

/// The nice value of the call threads, relative to the serving threads (0):
/// at 10 the kernel gives a serving thread about nine times their share of
/// a contended core.
const CALL_THREAD_NICE: i32 = 10;

/// The nice value of the background threads where `SCHED_IDLE` is refused
/// (a seccomp allow list without `sched_setscheduler`).
const BACKGROUND_NICE: i32 = 19;

/// How much CPU a call uses on the call threads before it moves to the
/// background threads: far more than a call that answers a person or a
/// model in time needs, far less than a program spinning to its deadline.
pub const LONG_CALL: Duration = Duration::from_millis(2);

impl CallThreads {
    pub fn start() -> std::io::Result<CallThreads> {
        let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
        let calls = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .thread_name("berm-call")
            // Programs run below the threads that read requests and write
            // answers: a program spinning to its deadline then takes only
            // the CPU the serving threads leave, so short calls (which start
            // on a serving thread) keep their latency on a busy machine.
            // Linux applies a nice value per thread. Where it is refused
            // (a seccomp allow list without setpriority) nothing changes.
            .on_thread_start(|| {
                let _ = rustix::process::setpriority_process(None, CALL_THREAD_NICE);
            })
            // I/O too: `http.fetch` connects from the call's own task.
            .enable_all()
            .build()?;
        let background = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .thread_name("berm-long-call")
            .on_thread_start(|| {
                if crate::sys::schedule_idle().is_err() {
                    let _ = rustix::process::setpriority_process(None, BACKGROUND_NICE);
                }
            })
            // A long call may fetch over HTTP too.
            .enable_all()
            .build()?;
        Ok(CallThreads {
            calls: Some(calls),
            background: Some(background),
        })
    }

    /// Runs `call` on the call threads, and on the background threads once
    /// it has computed for [`LONG_CALL`]. The call stops when the returned
    /// future is dropped.
    pub async fn run<T: Send + 'static>(
        &self,
        call: Pin<Box<dyn Future<Output = T> + Send>>,
    ) -> Result<T, tokio::task::JoinError> {
        let (Some(calls), Some(background)) = (&self.calls, &self.background) else {
            return Ok(call.await);
        };
        let background = background.handle().clone();
        // Aborted when dropped: the task is dropped at its next epoch
        // yield, and the instance with it.
        AbortOnDrop(calls.spawn(tiered(call, background)))
            .await
            .and_then(|moved| moved)
    }
}

/// Polls `call` here until it has used [`LONG_CALL`] of CPU, then hands it
/// to `background`. A call yields at every epoch tick, so it moves within
/// a tick of its budget.
async fn tiered<T: Send + 'static>(
    mut call: Pin<Box<dyn Future<Output = T> + Send>>,
    background: tokio::runtime::Handle,
) -> Result<T, tokio::task::JoinError> {
    let mut used = Duration::ZERO;
    let here = std::future::poll_fn(|cx| {
        let start = thread_cpu();
        let poll = call.as_mut().poll(cx);
        used += thread_cpu().saturating_sub(start);
        match poll {
            Poll::Ready(outcome) => Poll::Ready(Some(outcome)),
            Poll::Pending if used >= LONG_CALL => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    })
    .await;
    match here {
        Some(outcome) => Ok(outcome),
        None => AbortOnDrop(background.spawn(call)).await,
    }
}

/// CPU time the calling thread has used.
fn thread_cpu() -> Duration {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(
        u64::try_from(now.tv_sec).unwrap_or(0),
        u32::try_from(now.tv_nsec).unwrap_or(0),
    )
}

impl Drop for CallThreads {
    fn drop(&mut self) {
        // A runtime may not be dropped from async code, which is where the
        // last reference to the service can go away.
        for runtime in [self.calls.take(), self.background.take()]
            .into_iter()
            .flatten()
        {
            runtime.shutdown_background();
        }
    }
}

/// A task on the call threads that is aborted when its handle is dropped, so
/// that dropping a call's future stops the call.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Future for AbortOnDrop<T> {
    type Output = Result<T, tokio::task::JoinError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0).poll(cx)
    }
}

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        // A no-op for a task that has finished.
        self.0.abort();
    }
}
