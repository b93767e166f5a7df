//! `HaSlaveLoop` and `HaMasterLoop`: the two sides of replication after the handshake
//! (rmq_store::replica) in a thread per connection, so that no Python runs per received buffer
//! or per batch. `broker/ha/slave.py` and `master.py` start one on the connected socket, wait on
//! `wake_fd` (readable when there is news) and call `take()` for the progress gathered since
//! their last look.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use rmq_store::replica::{
    run_master_loop, run_slave_loop, MasterEnd, MasterLoopConfig, MasterProgress, Resume, SlaveEnd,
    SlaveLoopConfig, SlaveProgress,
};
use rmq_wire::ha::MAX_TRANSFER_BODY;

use crate::{EpochFile, Store};

fn os_err(what: &str) -> PyErr {
    PyOSError::new_err(format!("{what}: {}", std::io::Error::last_os_error()))
}

/// Takes ownership of a descriptor a successful libc call returned.
fn owned(fd: RawFd, what: &str) -> PyResult<OwnedFd> {
    if fd < 0 {
        return Err(os_err(what));
    }
    // SAFETY: `fd` is a fresh descriptor from the caller's libc call, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn wake_pipe() -> PyResult<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes; the result is checked.
    let r = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) };
    if r < 0 {
        return Err(os_err("wake-up pipe"));
    }
    Ok((owned(fds[0], "pipe")?, owned(fds[1], "pipe")?))
}

/// What a loop's Python object and its thread share.
struct Shared<R> {
    stop: AtomicBool,
    /// A duplicate of the Python socket's descriptor (same socket): the thread reads and
    /// writes it; `halt` shuts it down to wake a blocked poll.
    sock: OwnedFd,
    /// The write end of the wake-up pipe.
    wake_w: OwnedFd,
    /// What the thread reports: progress gathered since the last `take`, and the end.
    report: Mutex<R>,
}

impl<R: Default> Shared<R> {
    /// Shares a duplicate of `fd`; returns the wake-up pipe's read end too.
    fn new(fd: RawFd) -> PyResult<(Arc<Self>, OwnedFd)> {
        // SAFETY: F_DUPFD_CLOEXEC on a descriptor the caller owns; `owned` checks the result.
        let dup = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
        let sock = owned(dup, "dup of the HA socket")?;
        let (wake_r, wake_w) = wake_pipe()?;
        let shared = Shared {
            stop: AtomicBool::new(false),
            sock,
            wake_w,
            report: Mutex::new(R::default()),
        };
        Ok((Arc::new(shared), wake_r))
    }
}

impl<R> Shared<R> {
    fn wake(&self) {
        let b = [1u8];
        // SAFETY: writes 1 byte from a valid buffer to our own non-blocking pipe; a full pipe
        // (EAGAIN) already means "there is news", so the result is ignored.
        let _ = unsafe { libc::write(self.wake_w.as_raw_fd(), b.as_ptr().cast(), 1) };
    }
    fn with<T>(&self, f: impl FnOnce(&mut R) -> T) -> T {
        let mut g = self.report.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut g)
    }
    /// Asks the loop to end: at once when it is blocked on the socket, else within ~100 ms.
    fn halt(&self) {
        self.stop.store(true, Ordering::Release);
        // SAFETY: shutdown on our own descriptor; it only wakes the thread's poll/read/write.
        unsafe { libc::shutdown(self.sock.as_raw_fd(), libc::SHUT_RDWR) };
    }
}

/// A loop's thread and the read end of its wake-up pipe.
struct LoopThread {
    wake_r: OwnedFd,
    thread: Mutex<Option<JoinHandle<()>>>,
    name: &'static str,
}

impl LoopThread {
    fn spawn(
        name: &'static str,
        wake_r: OwnedFd,
        body: impl FnOnce() + Send + 'static,
    ) -> PyResult<Self> {
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(body)
            .map_err(|e| PyOSError::new_err(format!("cannot start the {name} thread: {e}")))?;
        Ok(LoopThread {
            wake_r,
            thread: Mutex::new(Some(thread)),
            name,
        })
    }
    /// Empties the wake-up pipe (before reading the report).
    fn drain(&self) {
        let mut buf = [0u8; 64];
        loop {
            // SAFETY: reads into a valid 64-byte buffer from our own non-blocking pipe.
            let n = unsafe { libc::read(self.wake_r.as_raw_fd(), buf.as_mut_ptr().cast(), 64) };
            if n <= 0 {
                break;
            }
        }
    }
    fn join(&self, py: Python<'_>) -> PyResult<()> {
        let handle = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(h) = handle {
            py.detach(|| h.join())
                .map_err(|_| PyOSError::new_err(format!("the {} thread panicked", self.name)))?;
        }
        Ok(())
    }
}

// ---- the slave --------------------------------------------------------------------------------

#[derive(Default)]
struct SlaveReport {
    progress: SlaveProgress,
    end: Option<SlaveEnd>,
}

/// A slave's TRANSFER phase in a thread: receive, append, epochs, confirm offset, acks.
#[pyclass(frozen, module = "rmq_ha._native")]
struct HaSlaveLoop {
    shared: Arc<Shared<SlaveReport>>,
    thread: LoopThread,
}

#[pymethods]
impl HaSlaveLoop {
    /// Starts the loop on socket `fd` (duplicated; the caller keeps and later closes its own),
    /// with `pending` bytes already received and not decoded, `reported` the max offset last
    /// acked to the master.
    #[new]
    #[pyo3(signature = (store, epochs, fd, pending, reported, controller_mode, heartbeat_ms,
        housekeeping_ms, max_body=MAX_TRANSFER_BODY))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        store: Py<Store>,
        epochs: Py<EpochFile>,
        fd: RawFd,
        pending: Vec<u8>,
        reported: u64,
        controller_mode: bool,
        heartbeat_ms: u64,
        housekeeping_ms: u64,
        max_body: usize,
    ) -> PyResult<Self> {
        if heartbeat_ms == 0 || housekeeping_ms == 0 {
            return Err(PyValueError::new_err(
                "heartbeat_ms and housekeeping_ms must be positive",
            ));
        }
        let (shared, wake_r) = Shared::<SlaveReport>::new(fd)?;
        let cfg = SlaveLoopConfig {
            controller_mode,
            heartbeat: Duration::from_millis(heartbeat_ms),
            housekeeping: Duration::from_millis(housekeeping_ms),
            max_body,
        };
        let sh = shared.clone();
        let thread = LoopThread::spawn("rmq-ha-slave", wake_r, move || {
            // Frozen, Sync classes: read without the GIL.
            let st = &store.get().inner;
            let ep = &epochs.get().inner;
            let end = run_slave_loop(
                st,
                ep,
                sh.sock.as_raw_fd(),
                &cfg,
                Resume { pending, reported },
                &sh.stop,
                &mut |p| {
                    sh.with(|r| {
                        let (grew, visible) = (r.progress.grew, r.progress.visible);
                        r.progress = p;
                        r.progress.grew |= grew;
                        r.progress.visible |= visible;
                    });
                    sh.wake();
                },
            );
            sh.with(|r| {
                r.progress.max_offset = st.max_offset();
                r.progress.confirm_offset = st.confirm_offset();
                r.end = Some(end);
            });
            sh.wake();
        })?;
        Ok(HaSlaveLoop { shared, thread })
    }

    /// Readable when `take()` has news (wait on it with trio.lowlevel.wait_readable).
    #[getter]
    fn wake_fd(&self) -> RawFd {
        self.thread.wake_r.as_raw_fd()
    }

    /// `(max_offset, confirm_offset, grew, visible, transfers, acked, end_kind, end_message)`
    /// since the previous call (`grew`/`visible` reset); `end_kind` is None while running,
    /// else one of "stopped", "closed", "silent", "io", "protocol".
    #[allow(clippy::type_complexity)]
    fn take(
        &self,
    ) -> (
        u64,
        u64,
        bool,
        bool,
        u64,
        u64,
        Option<&'static str>,
        Option<String>,
    ) {
        self.thread.drain();
        self.shared.with(|r| {
            let p = r.progress;
            r.progress.grew = false;
            r.progress.visible = false;
            (
                p.max_offset,
                p.confirm_offset,
                p.grew,
                p.visible,
                p.transfers,
                p.acked,
                r.end.as_ref().map(SlaveEnd::kind),
                r.end.as_ref().map(SlaveEnd::message),
            )
        })
    }

    /// Asks the loop to end: it stops within ~100 ms, at once when blocked on the socket.
    fn stop(&self) {
        self.shared.halt();
    }

    /// Waits (GIL released) for the thread to end; call after `stop` or after an end.
    fn join(&self, py: Python<'_>) -> PyResult<()> {
        self.thread.join(py)
    }
}

impl Drop for HaSlaveLoop {
    fn drop(&mut self) {
        // Never leave a thread writing this store after its owner is gone.
        self.shared.halt();
    }
}

// ---- the master -------------------------------------------------------------------------------

#[derive(Default)]
struct MasterReport {
    progress: MasterProgress,
    end: Option<MasterEnd>,
}

/// What only the master's thread needs besides `Shared`.
struct MasterWake {
    /// The thread is about to sleep or sleeping: a `poke` must write to `data`.
    waiting: AtomicBool,
    /// An eventfd written by `poke` when the log grew; the thread polls it.
    data: OwnedFd,
}

/// A master's streaming to one slave in a thread: commitlog batches (never across an epoch),
/// heartbeats, and the slave's acks, reported in batches.
#[pyclass(frozen, module = "rmq_ha._native")]
struct HaMasterLoop {
    shared: Arc<Shared<MasterReport>>,
    wake: Arc<MasterWake>,
    thread: LoopThread,
}

#[pymethods]
impl HaMasterLoop {
    /// Starts streaming on socket `fd` (duplicated) from `start`; `acks`: bytes the slave
    /// sent that are not decoded yet.
    #[new]
    #[pyo3(signature = (store, epochs, fd, start, acks, controller_mode, batch_bytes,
        heartbeat_ms, write_timeout_ms))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        store: Py<Store>,
        epochs: Py<EpochFile>,
        fd: RawFd,
        start: u64,
        acks: Vec<u8>,
        controller_mode: bool,
        batch_bytes: usize,
        heartbeat_ms: u64,
        write_timeout_ms: u64,
    ) -> PyResult<Self> {
        if heartbeat_ms == 0 || write_timeout_ms == 0 || batch_bytes == 0 {
            return Err(PyValueError::new_err(
                "heartbeat_ms, write_timeout_ms and batch_bytes must be positive",
            ));
        }
        let (shared, wake_r) = Shared::<MasterReport>::new(fd)?;
        // SAFETY: creates a new eventfd; `owned` checks the result.
        let data = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        let wake = Arc::new(MasterWake {
            waiting: AtomicBool::new(false),
            data: owned(data, "eventfd")?,
        });
        let cfg = MasterLoopConfig {
            controller_mode,
            batch_bytes,
            heartbeat: Duration::from_millis(heartbeat_ms),
            write_timeout: Duration::from_millis(write_timeout_ms),
        };
        let (sh, wk) = (shared.clone(), wake.clone());
        let thread = LoopThread::spawn("rmq-ha-master", wake_r, move || {
            let st = &store.get().inner;
            let ep = &epochs.get().inner;
            let end = run_master_loop(
                st,
                ep,
                sh.sock.as_raw_fd(),
                wk.data.as_raw_fd(),
                &cfg,
                start,
                acks,
                &sh.stop,
                &wk.waiting,
                &mut |p| {
                    sh.with(|r| {
                        let q = &mut r.progress;
                        q.pos = p.pos;
                        if p.transferring.is_some() {
                            q.transferring = p.transferring;
                            q.idle = false;
                        }
                        if p.ack.is_some() {
                            q.ack = p.ack;
                        }
                        q.idle |= p.idle;
                    });
                    sh.wake();
                },
            );
            sh.with(|r| r.end = Some(end));
            sh.wake();
        })?;
        Ok(HaMasterLoop {
            shared,
            wake,
            thread,
        })
    }

    /// Readable when `take()` has news.
    #[getter]
    fn wake_fd(&self) -> RawFd {
        self.thread.wake_r.as_raw_fd()
    }

    /// The log grew: the thread sends what is new (a syscall only when it sleeps).
    fn poke(&self) {
        // pairs with the loop's fence: the append before this call is seen, or `waiting` is
        std::sync::atomic::fence(Ordering::SeqCst);
        if !self.wake.waiting.load(Ordering::SeqCst) {
            return;
        }
        let one = 1u64.to_ne_bytes();
        // SAFETY: writes 8 bytes from a valid buffer to our own eventfd; a saturated counter
        // (EAGAIN) already means "poked".
        let _ = unsafe { libc::write(self.wake.data.as_raw_fd(), one.as_ptr().cast(), 8) };
    }

    /// `(ack, transferring, idle, pos, end_kind, end_message, leftover)` since the previous
    /// call: the slave's latest ack or None, the master's max offset at the latest transfer
    /// or None, whether it is idle now (nothing left to send), the next offset to send, and
    /// how the loop ended (None while running; "stopped", "closed", "io", "protocol", or
    /// "held": quarantined bytes at `pos`, the caller goes on from there with `leftover`).
    #[allow(clippy::type_complexity)]
    fn take<'py>(
        &self,
        py: Python<'py>,
    ) -> (
        Option<u64>,
        Option<u64>,
        bool,
        u64,
        Option<&'static str>,
        Option<String>,
        Option<Bound<'py, PyBytes>>,
    ) {
        self.thread.drain();
        self.shared.with(|r| {
            let p = r.progress;
            r.progress.ack = None;
            r.progress.transferring = None;
            r.progress.idle = false;
            let (pos, leftover) = match &r.end {
                Some(MasterEnd::Held { pos, leftover }) => (*pos, Some(PyBytes::new(py, leftover))),
                _ => (p.pos, None),
            };
            (
                p.ack,
                p.transferring,
                p.idle,
                pos,
                r.end.as_ref().map(MasterEnd::kind),
                r.end.as_ref().map(MasterEnd::message),
                leftover,
            )
        })
    }

    /// Asks the loop to end (at once when it is blocked on the socket).
    fn stop(&self) {
        self.shared.halt();
    }

    /// Waits (GIL released) for the thread to end; call after `stop` or after an end.
    fn join(&self, py: Python<'_>) -> PyResult<()> {
        self.thread.join(py)
    }
}

impl Drop for HaMasterLoop {
    fn drop(&mut self) {
        self.shared.halt();
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<HaSlaveLoop>()?;
    m.add_class::<HaMasterLoop>()
}
