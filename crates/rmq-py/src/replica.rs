//! `HaSlaveLoop`: a slave's TRANSFER phase (rmq_store::replica) in a thread of its own, so
//! that no Python runs per received buffer or per batch. `broker/ha/slave.py` starts it on the
//! connected socket after the handshake, waits on `wake_fd` (readable when there is news) and
//! calls `take()` for the progress gathered since its last look.

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

/// What the thread reports: progress with its flags gathered since the last `take`, and how
/// the loop ended.
#[derive(Default)]
struct Report {
    progress: SlaveProgress,
    end: Option<SlaveEnd>,
}

struct Shared {
    stop: AtomicBool,
    /// A duplicate of the Python socket's descriptor (same socket): the thread reads and
    /// writes it; `stop` shuts it down to wake a blocked poll.
    sock: OwnedFd,
    /// The write end of the wake-up pipe.
    wake_w: OwnedFd,
    report: Mutex<Report>,
}

impl Shared {
    fn wake(&self) {
        let b = [1u8];
        // SAFETY: writes 1 byte from a valid buffer to our own pipe; a full pipe (EAGAIN)
        // already means "there is news", so the result is ignored.
        let _ = unsafe { libc::write(self.wake_w.as_raw_fd(), b.as_ptr().cast(), 1) };
    }
    fn with<T>(&self, f: impl FnOnce(&mut Report) -> T) -> T {
        let mut g = self.report.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut g)
    }
}

fn os_err(what: &str) -> PyErr {
    PyOSError::new_err(format!("{what}: {}", std::io::Error::last_os_error()))
}

fn dup_cloexec(fd: RawFd) -> PyResult<OwnedFd> {
    // SAFETY: F_DUPFD_CLOEXEC on a descriptor the caller owns; the result is checked.
    let d = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
    if d < 0 {
        return Err(os_err("dup of the HA socket"));
    }
    // SAFETY: `d` is a fresh descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(d) })
}

fn wake_pipe() -> PyResult<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes; the result is checked.
    let r = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) };
    if r < 0 {
        return Err(os_err("wake-up pipe"));
    }
    // SAFETY: both are fresh descriptors from pipe2, owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// A slave's TRANSFER phase in a thread: receive, append, epochs, confirm offset, acks.
#[pyclass(frozen, module = "rmq_ha._native")]
struct HaSlaveLoop {
    shared: Arc<Shared>,
    wake_r: OwnedFd,
    thread: Mutex<Option<JoinHandle<()>>>,
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
        let sock = dup_cloexec(fd)?;
        let (wake_r, wake_w) = wake_pipe()?;
        let shared = Arc::new(Shared {
            stop: AtomicBool::new(false),
            sock,
            wake_w,
            report: Mutex::new(Report::default()),
        });
        let cfg = SlaveLoopConfig {
            controller_mode,
            heartbeat: Duration::from_millis(heartbeat_ms),
            housekeeping: Duration::from_millis(housekeeping_ms),
            max_body,
        };
        let sh = shared.clone();
        let thread = std::thread::Builder::new()
            .name("rmq-ha-slave".into())
            .spawn(move || {
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
            })
            .map_err(|e| PyOSError::new_err(format!("cannot start the HA slave thread: {e}")))?;
        Ok(HaSlaveLoop {
            shared,
            wake_r,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Readable when `take()` has news (wait on it with trio.lowlevel.wait_readable).
    #[getter]
    fn wake_fd(&self) -> RawFd {
        self.wake_r.as_raw_fd()
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
        drain(self.wake_r.as_raw_fd());
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
        self.shared.stop.store(true, Ordering::Release);
        // SAFETY: shutdown on our own descriptor; it only wakes the thread's poll/read.
        unsafe { libc::shutdown(self.shared.sock.as_raw_fd(), libc::SHUT_RDWR) };
    }

    /// Waits (GIL released) for the thread to end; call after `stop` or after an end.
    fn join(&self, py: Python<'_>) -> PyResult<()> {
        let handle = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(h) = handle {
            py.detach(|| h.join())
                .map_err(|_| PyOSError::new_err("the HA slave thread panicked"))?;
        }
        Ok(())
    }
}

impl Drop for HaSlaveLoop {
    fn drop(&mut self) {
        // Never leave a thread writing this store after its owner is gone.
        self.shared.stop.store(true, Ordering::Release);
        // SAFETY: shutdown on our own descriptor.
        unsafe { libc::shutdown(self.shared.sock.as_raw_fd(), libc::SHUT_RDWR) };
    }
}

fn eventfd() -> PyResult<OwnedFd> {
    // SAFETY: creates a new eventfd; the result is checked.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(os_err("eventfd"));
    }
    // SAFETY: a fresh descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

#[derive(Default)]
struct MasterReport {
    progress: MasterProgress,
    end: Option<MasterEnd>,
}

struct MasterShared {
    stop: AtomicBool,
    /// The thread is about to sleep or sleeping: a `poke` must write to `data`.
    waiting: AtomicBool,
    sock: OwnedFd,
    /// Written by `poke` when the log grew; the thread polls it.
    data: OwnedFd,
    wake_w: OwnedFd,
    report: Mutex<MasterReport>,
}

impl MasterShared {
    fn with<T>(&self, f: impl FnOnce(&mut MasterReport) -> T) -> T {
        let mut g = self.report.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut g)
    }
    fn wake(&self) {
        let b = [1u8];
        // SAFETY: 1 byte from a valid buffer to our own non-blocking pipe; a full pipe
        // already means "there is news".
        let _ = unsafe { libc::write(self.wake_w.as_raw_fd(), b.as_ptr().cast(), 1) };
    }
    fn halt(&self) {
        self.stop.store(true, Ordering::Release);
        // SAFETY: shutdown on our own descriptor; it only wakes the thread's poll/read/write.
        unsafe { libc::shutdown(self.sock.as_raw_fd(), libc::SHUT_RDWR) };
    }
}

/// A master's streaming to one slave in a thread: commitlog batches (never across an epoch),
/// heartbeats, and the slave's acks, reported in batches.
#[pyclass(frozen, module = "rmq_ha._native")]
struct HaMasterLoop {
    shared: Arc<MasterShared>,
    wake_r: OwnedFd,
    thread: Mutex<Option<JoinHandle<()>>>,
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
        let sock = dup_cloexec(fd)?;
        let data = eventfd()?;
        let (wake_r, wake_w) = wake_pipe()?;
        let shared = Arc::new(MasterShared {
            stop: AtomicBool::new(false),
            waiting: AtomicBool::new(false),
            sock,
            data,
            wake_w,
            report: Mutex::new(MasterReport::default()),
        });
        let cfg = MasterLoopConfig {
            controller_mode,
            batch_bytes,
            heartbeat: Duration::from_millis(heartbeat_ms),
            write_timeout: Duration::from_millis(write_timeout_ms),
        };
        let sh = shared.clone();
        let thread = std::thread::Builder::new()
            .name("rmq-ha-master".into())
            .spawn(move || {
                let st = &store.get().inner;
                let ep = &epochs.get().inner;
                let end = run_master_loop(
                    st,
                    ep,
                    sh.sock.as_raw_fd(),
                    sh.data.as_raw_fd(),
                    &cfg,
                    start,
                    acks,
                    &sh.stop,
                    &sh.waiting,
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
            })
            .map_err(|e| PyOSError::new_err(format!("cannot start the HA master thread: {e}")))?;
        Ok(HaMasterLoop {
            shared,
            wake_r,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Readable when `take()` has news.
    #[getter]
    fn wake_fd(&self) -> RawFd {
        self.wake_r.as_raw_fd()
    }

    /// The log grew: the thread sends what is new (a syscall only when it sleeps).
    fn poke(&self) {
        // pairs with the loop's fence: the append before this call is seen, or `waiting` is
        std::sync::atomic::fence(Ordering::SeqCst);
        if !self.shared.waiting.load(Ordering::SeqCst) {
            return;
        }
        let one = 1u64.to_ne_bytes();
        // SAFETY: writes 8 bytes from a valid buffer to our own eventfd; a saturated counter
        // (EAGAIN) already means "poked".
        let _ = unsafe { libc::write(self.shared.data.as_raw_fd(), one.as_ptr().cast(), 8) };
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
        drain(self.wake_r.as_raw_fd());
        self.shared.with(|r| {
            let p = r.progress;
            r.progress.ack = None;
            r.progress.transferring = None;
            r.progress.idle = false;
            let leftover = match &r.end {
                Some(MasterEnd::Held { leftover, .. }) => Some(PyBytes::new(py, leftover)),
                _ => None,
            };
            let pos = match &r.end {
                Some(MasterEnd::Held { pos, .. }) => *pos,
                _ => p.pos,
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
        let handle = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(h) = handle {
            py.detach(|| h.join())
                .map_err(|_| PyOSError::new_err("the HA master thread panicked"))?;
        }
        Ok(())
    }
}

impl Drop for HaMasterLoop {
    fn drop(&mut self) {
        self.shared.halt();
    }
}

/// Empties our own non-blocking wake-up pipe.
fn drain(fd: RawFd) {
    let mut buf = [0u8; 64];
    loop {
        // SAFETY: reads into a valid 64-byte buffer from our own non-blocking pipe.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n <= 0 {
            break;
        }
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<HaSlaveLoop>()?;
    m.add_class::<HaMasterLoop>()
}
