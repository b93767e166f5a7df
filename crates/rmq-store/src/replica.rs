//! The slave side of replication after the handshake, in one thread (issue 16): receive the
//! master's TRANSFER records, append them at their offsets, record a new epoch when a header
//! carries one, move the confirm offset (controller mode) and ack the max offset.
//!
//! `broker/ha/slave.py` connects, authenticates, does the handshake and the truncation (once
//! per connection) and then hands the socket to [`run_slave_loop`]; the rules of each step are
//! those of its `_apply`. Python hears of progress in batches through `notify` (one wake-up for
//! any number of records) and keeps every role decision.
//!
//! Liveness: a master sends a heartbeat (an empty TRANSFER) at least every heartbeat interval;
//! a slave that receives nothing for `housekeeping` ends the loop ([`SlaveEnd::Silent`]) so that
//! the caller reconnects, and it acks at least every heartbeat interval.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rmq_wire::ha::{
    decode_master_packets_with_limit, decode_slave_packets, encode_slave_ack,
    encode_transfer_header, MasterPacket, SlavePacket, TransferHeader,
};

use crate::epoch::EpochFile;
use crate::store::Store;

/// Bytes asked of the socket per read.
pub const RECV_BYTES: usize = 256 * 1024;

/// Why a loop ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlaveEnd {
    /// [`SlaveLoopControl::stop`] was called.
    Stopped,
    /// The master closed the connection.
    Closed,
    /// Nothing arrived for the housekeeping interval.
    Silent,
    /// A socket error.
    Io(String),
    /// A record this slave must not apply (bad framing, an epoch below ours, an offset that
    /// is not our max, a record the store refuses): the caller reconnects and says why.
    Protocol(String),
}

impl SlaveEnd {
    /// A short name for the kind (`stopped`, `closed`, `silent`, `io`, `protocol`).
    pub fn kind(&self) -> &'static str {
        match self {
            SlaveEnd::Stopped => "stopped",
            SlaveEnd::Closed => "closed",
            SlaveEnd::Silent => "silent",
            SlaveEnd::Io(_) => "io",
            SlaveEnd::Protocol(_) => "protocol",
        }
    }
    pub fn message(&self) -> String {
        match self {
            SlaveEnd::Stopped => "stopped".into(),
            SlaveEnd::Closed => "master closed the HA connection".into(),
            SlaveEnd::Silent => "the master sent nothing for the housekeeping interval".into(),
            SlaveEnd::Io(m) | SlaveEnd::Protocol(m) => m.clone(),
        }
    }
}

/// What one applied TRANSFER changed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Applied {
    /// Bytes were appended.
    pub grew: bool,
    /// Messages became visible to consumers (classic mode: appended; controller mode: the
    /// confirm offset moved).
    pub visible: bool,
}

/// Applies one TRANSFER record as `slave.py`'s `_apply` does.
pub fn apply_transfer(
    store: &Store,
    epochs: &Mutex<EpochFile>,
    controller_mode: bool,
    h: &TransferHeader,
    body: &[u8],
) -> Result<Applied, String> {
    let epoch =
        u32::try_from(h.epoch).map_err(|_| format!("master sent a negative epoch {}", h.epoch))?;
    {
        let mut ef = epochs
            .lock()
            .map_err(|_| "epoch file lock poisoned".to_string())?;
        match ef.last_epoch() {
            Some(last) if epoch < last => {
                return Err(format!(
                    "master sent epoch {epoch} below our last epoch {last}"
                ))
            }
            Some(last) if epoch == last => {}
            _ => ef
                .append(epoch, h.epoch_start_offset)
                .map_err(|e| e.to_string())?,
        }
    }
    let mut out = Applied::default();
    if !body.is_empty() {
        let (max, min) = (store.max_offset(), store.min_offset());
        if h.offset > max && max == min {
            // An empty replica and a master whose log starts later (syncFromLastFile, or
            // retention deleted its first segments): this log starts there too.
            store.start_at(h.offset).map_err(|e| e.to_string())?;
        }
        let max = store.max_offset();
        if h.offset != max {
            return Err(format!("master sent offset {}, our max is {max}", h.offset));
        }
        store
            .append_raw(h.offset, body)
            .map_err(|e| e.to_string())?;
        out.grew = true;
        out.visible = !controller_mode;
    }
    if controller_mode {
        let c = h.confirm_offset.min(store.max_offset());
        if c > store.confirm_offset() {
            store.set_confirm_offset(c).map_err(|e| e.to_string())?;
            out.visible = true;
        }
    }
    Ok(out)
}

/// The loop's settings.
#[derive(Debug, Clone)]
pub struct SlaveLoopConfig {
    pub controller_mode: bool,
    pub heartbeat: Duration,
    pub housekeeping: Duration,
    /// Largest TRANSFER body accepted.
    pub max_body: usize,
}

/// Progress reported to `notify` after each read that applied records, and after each ack.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SlaveProgress {
    pub max_offset: u64,
    pub confirm_offset: u64,
    /// Bytes were appended since the previous report.
    pub grew: bool,
    /// Messages became visible since the previous report.
    pub visible: bool,
    /// TRANSFER records applied (heartbeats included) since the loop started.
    pub transfers: u64,
    /// The max offset last acked to the master.
    pub acked: u64,
}

/// The socket side the loop needs (a connected stream socket), so that tests can use a pair.
fn poll_fd(fd: RawFd, events: i16, timeout: Duration) -> std::io::Result<i16> {
    let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
    let mut p = libc::pollfd {
        fd,
        events,
        revents: 0,
    };
    // SAFETY: `p` is one valid pollfd that lives across the call; nfds is 1.
    let n = unsafe { libc::poll(&mut p, 1, ms) };
    if n < 0 {
        let e = std::io::Error::last_os_error();
        if e.kind() == std::io::ErrorKind::Interrupted {
            return Ok(0);
        }
        return Err(e);
    }
    Ok(if n == 0 { 0 } else { p.revents })
}

enum ReadOutcome {
    Data(usize),
    Eof,
    WouldBlock,
}

fn read_some(fd: RawFd, buf: &mut [u8]) -> std::io::Result<ReadOutcome> {
    // SAFETY: `buf` is a valid writable region of `buf.len()` bytes for the whole call.
    let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        let e = std::io::Error::last_os_error();
        return match e.kind() {
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted => {
                Ok(ReadOutcome::WouldBlock)
            }
            _ => Err(e),
        };
    }
    // n >= 0 here, so the cast is lossless
    Ok(if n == 0 {
        ReadOutcome::Eof
    } else {
        ReadOutcome::Data(n as usize)
    })
}

/// Writes all of `data` (the socket may be non-blocking), giving up after `timeout` or when
/// `stop` is set.
fn write_all(
    fd: RawFd,
    mut data: &[u8],
    timeout: Duration,
    stop: &AtomicBool,
) -> Result<(), SlaveEnd> {
    let deadline = Instant::now() + timeout;
    while !data.is_empty() {
        if stop.load(Ordering::Acquire) {
            return Err(SlaveEnd::Stopped);
        }
        // SAFETY: `data` is a valid readable region of `data.len()` bytes for the whole call;
        // MSG_NOSIGNAL: a closed peer gives EPIPE, not SIGPIPE.
        let n = unsafe { libc::send(fd, data.as_ptr().cast(), data.len(), libc::MSG_NOSIGNAL) };
        if n >= 0 {
            // n >= 0 and <= data.len(), so the cast is lossless
            data = &data[n as usize..];
            continue;
        }
        let e = std::io::Error::last_os_error();
        match e.kind() {
            std::io::ErrorKind::Interrupted => continue,
            std::io::ErrorKind::WouldBlock => {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(SlaveEnd::Io("ack write timed out".into()));
                }
                poll_fd(fd, libc::POLLOUT, left.min(Duration::from_millis(100)))
                    .map_err(|e| SlaveEnd::Io(format!("poll: {e}")))?;
            }
            // the master closed its end (a broken pipe is how a write learns it)
            std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset => {
                return Err(SlaveEnd::Closed)
            }
            _ => return Err(SlaveEnd::Io(format!("ack write: {e}"))),
        }
    }
    Ok(())
}

/// Where the handshake left the connection: bytes already received and not yet decoded, and
/// the max offset last acked to the master.
#[derive(Debug, Default, Clone)]
pub struct Resume {
    pub pending: Vec<u8>,
    pub reported: u64,
}

/// Runs the TRANSFER phase on `fd` until the master closes, goes silent, sends something this
/// slave must not apply, or `stop` is set, going on from `resume`. `notify` gets the progress after each
/// read that applied records and after each ack; it must be cheap (it runs on this thread).
///
/// Stopping from another thread: set `stop`, then shut the socket down (`shutdown(2)`) so
/// that a blocked poll returns at once; the loop checks `stop` at least every 100 ms anyway.
pub fn run_slave_loop(
    store: &Store,
    epochs: &Mutex<EpochFile>,
    fd: RawFd,
    cfg: &SlaveLoopConfig,
    resume: Resume,
    stop: &AtomicBool,
    notify: &mut dyn FnMut(SlaveProgress),
) -> SlaveEnd {
    let mut pending = resume.pending;
    let mut prog = SlaveProgress {
        max_offset: store.max_offset(),
        confirm_offset: store.confirm_offset(),
        acked: resume.reported,
        ..SlaveProgress::default()
    };
    let mut scratch = vec![0u8; RECV_BYTES];
    let mut last_recv = Instant::now();
    let mut last_ack = Instant::now();
    let tick = Duration::from_millis(100);
    loop {
        // Apply every complete record buffered.
        if !pending.is_empty() {
            let (packets, used) = match decode_master_packets_with_limit(&pending, cfg.max_body) {
                Ok(x) => x,
                Err(e) => return SlaveEnd::Protocol(format!("HA record: {}", e.error)),
            };
            let mut applied_any = false;
            for p in &packets {
                match p {
                    MasterPacket::Handshake(_) => {
                        return SlaveEnd::Protocol(
                            "unexpected handshake record while transferring".into(),
                        )
                    }
                    MasterPacket::Transfer { header, body } => {
                        match apply_transfer(store, epochs, cfg.controller_mode, header, body) {
                            Ok(a) => {
                                prog.grew |= a.grew;
                                prog.visible |= a.visible;
                                prog.transfers += 1;
                                applied_any = true;
                            }
                            Err(m) => return SlaveEnd::Protocol(m),
                        }
                    }
                }
            }
            drop(packets);
            pending.drain(..used);
            if applied_any {
                prog.max_offset = store.max_offset();
                prog.confirm_offset = store.confirm_offset();
                notify(prog);
                prog.grew = false;
                prog.visible = false;
            }
        }
        if stop.load(Ordering::Acquire) {
            return SlaveEnd::Stopped;
        }
        // Ack a new max at once, and at least every heartbeat interval.
        let max = store.max_offset();
        if max != prog.acked || last_ack.elapsed() >= cfg.heartbeat {
            let ack = match encode_slave_ack(max) {
                Ok(a) => a,
                Err(e) => return SlaveEnd::Protocol(e.to_string()),
            };
            if let Err(end) = write_all(fd, &ack, cfg.housekeeping, stop) {
                return end;
            }
            prog.acked = max;
            last_ack = Instant::now();
            notify(prog);
        }
        // Wait for data: until the next ack is due, at most `tick` (to see `stop`).
        let silent_for = last_recv.elapsed();
        if silent_for >= cfg.housekeeping {
            return SlaveEnd::Silent;
        }
        let until_ack = cfg.heartbeat.saturating_sub(last_ack.elapsed());
        let wait = until_ack
            .min(cfg.housekeeping - silent_for)
            .min(tick)
            .max(Duration::from_millis(1));
        match poll_fd(fd, libc::POLLIN, wait) {
            Ok(0) => continue,
            Ok(_) => {}
            Err(e) => return SlaveEnd::Io(format!("poll: {e}")),
        }
        match read_some(fd, &mut scratch) {
            Ok(ReadOutcome::Data(n)) => {
                last_recv = Instant::now();
                pending.extend_from_slice(&scratch[..n]);
            }
            Ok(ReadOutcome::WouldBlock) => {}
            Ok(ReadOutcome::Eof) => {
                return if stop.load(Ordering::Acquire) {
                    SlaveEnd::Stopped
                } else {
                    SlaveEnd::Closed
                }
            }
            Err(e) => {
                return if stop.load(Ordering::Acquire) {
                    SlaveEnd::Stopped
                } else {
                    SlaveEnd::Io(format!("read: {e}"))
                }
            }
        }
    }
}

// ---- the master side -------------------------------------------------------------------------

/// The master's per-slave loop settings.
#[derive(Debug, Clone)]
pub struct MasterLoopConfig {
    pub controller_mode: bool,
    /// Largest TRANSFER body (haTransferBatchSize).
    pub batch_bytes: usize,
    /// A header-only heartbeat when nothing was sent for this long.
    pub heartbeat: Duration,
    /// A write that cannot finish in this long (a slave that stopped reading) ends the loop.
    pub write_timeout: Duration,
}

/// What the master loop reports: the latest of each since the previous report.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct MasterProgress {
    /// The master's max offset when it last sent bytes (a `Transferring` event), if it did.
    pub transferring: Option<u64>,
    /// The slave's latest ack, if one came.
    pub ack: Option<u64>,
    /// Nothing is left to send right now (a `SlaveIdle` event).
    pub idle: bool,
    /// The next offset to send.
    pub pos: u64,
}

/// Why a master loop ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MasterEnd {
    Stopped,
    /// The slave closed the connection.
    Closed,
    Io(String),
    /// The slave sent something it must not (a second handshake, bad framing), or the log
    /// has no epoch for what must be sent.
    Protocol(String),
    /// The bytes at `pos` are quarantined here: the caller takes the connection over from
    /// `pos` (its repair path), with `leftover` undecoded bytes the slave sent.
    Held {
        pos: u64,
        leftover: Vec<u8>,
    },
}

impl MasterEnd {
    pub fn kind(&self) -> &'static str {
        match self {
            MasterEnd::Stopped => "stopped",
            MasterEnd::Closed => "closed",
            MasterEnd::Io(_) => "io",
            MasterEnd::Protocol(_) => "protocol",
            MasterEnd::Held { .. } => "held",
        }
    }
    pub fn message(&self) -> String {
        match self {
            MasterEnd::Stopped => "stopped".into(),
            MasterEnd::Closed => "slave closed the HA connection".into(),
            MasterEnd::Io(m) | MasterEnd::Protocol(m) => m.clone(),
            MasterEnd::Held { pos, .. } => format!("quarantined bytes at {pos}"),
        }
    }
}

fn slave_end_to_master(e: SlaveEnd) -> MasterEnd {
    match e {
        SlaveEnd::Stopped => MasterEnd::Stopped,
        SlaveEnd::Closed | SlaveEnd::Silent => MasterEnd::Closed,
        SlaveEnd::Io(m) => MasterEnd::Io(m),
        SlaveEnd::Protocol(m) => MasterEnd::Protocol(m),
    }
}

/// The epoch in force at `pos`: the last entry starting at or below it ((0, 0) if none).
fn epoch_at(epochs: &Mutex<EpochFile>, pos: u64) -> Result<(i32, u64), String> {
    let ef = epochs
        .lock()
        .map_err(|_| "epoch file lock poisoned".to_string())?;
    let (e, s) = ef
        .raw_entries()
        .iter()
        .take_while(|&&(_, s)| s <= pos)
        .last()
        .copied()
        .unwrap_or((0, 0));
    Ok((i32::try_from(e).unwrap_or(i32::MAX), s))
}

/// Streams the commitlog to one slave from `start` and reads its acks, as
/// `broker/ha/master.py`'s `_write` and `_read_acks` do: batches of at most `batch_bytes` that
/// never cross an epoch boundary, each with the epoch of its bytes and the confirm offset; a
/// heartbeat after `heartbeat` without a send. `data_fd` becomes readable when the log grew
/// (an eventfd the caller writes to); it is drained here. The caller need write to it only
/// while `waiting` is set: the loop sets it before it sleeps and looks at the log again after
/// setting it, so no append is missed. `notify` gets the progress whenever something changed;
/// it must be cheap.
#[allow(clippy::too_many_arguments)]
pub fn run_master_loop(
    store: &Store,
    epochs: &Mutex<EpochFile>,
    fd: RawFd,
    data_fd: RawFd,
    cfg: &MasterLoopConfig,
    start: u64,
    mut acks: Vec<u8>,
    stop: &AtomicBool,
    waiting: &AtomicBool,
    notify: &mut dyn FnMut(MasterProgress),
) -> MasterEnd {
    let mut prog = MasterProgress {
        pos: start,
        ..MasterProgress::default()
    };
    let mut scratch = vec![0u8; 64 * 1024];
    let mut last_send = Instant::now();
    let mut was_idle = false;
    let tick = Duration::from_millis(100);
    loop {
        if stop.load(Ordering::Acquire) {
            return MasterEnd::Stopped;
        }
        let mut changed = false;
        // The slave's acks: everything readable now; the last one says all.
        loop {
            match read_some(fd, &mut scratch) {
                Ok(ReadOutcome::Data(n)) => acks.extend_from_slice(&scratch[..n]),
                Ok(ReadOutcome::WouldBlock) => break,
                Ok(ReadOutcome::Eof) => {
                    return if stop.load(Ordering::Acquire) {
                        MasterEnd::Stopped
                    } else {
                        MasterEnd::Closed
                    }
                }
                Err(e) => return MasterEnd::Io(format!("read: {e}")),
            }
        }
        if !acks.is_empty() {
            let (packets, used) = match decode_slave_packets(&acks) {
                Ok(x) => x,
                Err(e) => return MasterEnd::Protocol(format!("HA record: {}", e.error)),
            };
            for p in packets {
                match p {
                    SlavePacket::Ack { max_offset } => {
                        prog.ack = Some(max_offset);
                        changed = true;
                    }
                    SlavePacket::Handshake(_) => {
                        return MasterEnd::Protocol(
                            "a second handshake on a transferring connection".into(),
                        )
                    }
                }
            }
            acks.drain(..used);
        }
        let end = store.max_offset();
        let pos = prog.pos;
        if pos < end {
            let entry = match epochs.lock() {
                Ok(ef) => ef.find_by_offset(pos),
                Err(_) => return MasterEnd::Protocol("epoch file lock poisoned".into()),
            };
            let Some(entry) = entry else {
                return MasterEnd::Protocol(format!("no epoch covers offset {pos}"));
            };
            let limit = end.min(entry.end_offset);
            let buf = match store.read_range(pos, cfg.batch_bytes, limit) {
                Ok(b) => b,
                Err(crate::StoreError::Quarantined { .. }) => {
                    if changed {
                        notify(prog);
                    }
                    return MasterEnd::Held {
                        pos,
                        leftover: acks,
                    };
                }
                Err(e) => return MasterEnd::Io(e.to_string()),
            };
            let body = buf.as_slice();
            if body.is_empty() {
                return MasterEnd::Protocol(format!("nothing readable at {pos} below {limit}"));
            }
            let confirm = if cfg.controller_mode {
                store.confirm_offset()
            } else {
                end
            };
            let header = TransferHeader {
                offset: pos,
                epoch: i32::try_from(entry.epoch).unwrap_or(i32::MAX),
                epoch_start_offset: entry.start_offset,
                confirm_offset: confirm,
            };
            let head = match encode_transfer_header(&header, body.len()) {
                Ok(h) => h,
                Err(e) => return MasterEnd::Protocol(e.to_string()),
            };
            // The transfer is reported before its bytes go, as `_write` does.
            prog.transferring = Some(end);
            prog.idle = false;
            was_idle = false;
            notify(prog);
            prog.transferring = None;
            prog.ack = None;
            if let Err(e) = write_all_vectored(fd, &head, body, cfg.write_timeout, stop) {
                return slave_end_to_master(e);
            }
            prog.pos = pos + body.len() as u64;
            last_send = Instant::now();
            continue;
        }
        if !was_idle {
            was_idle = true;
            prog.idle = true;
            changed = true;
        }
        if changed {
            notify(prog);
            prog.ack = None;
            prog.idle = false;
        }
        if last_send.elapsed() >= cfg.heartbeat {
            let (epoch, start_off) = match epoch_at(epochs, pos) {
                Ok(x) => x,
                Err(m) => return MasterEnd::Protocol(m),
            };
            let confirm = if cfg.controller_mode {
                store.confirm_offset()
            } else {
                store.max_offset()
            };
            let h = TransferHeader {
                offset: pos,
                epoch,
                epoch_start_offset: start_off,
                confirm_offset: confirm,
            };
            let head = match encode_transfer_header(&h, 0) {
                Ok(h) => h,
                Err(e) => return MasterEnd::Protocol(e.to_string()),
            };
            if let Err(e) = write_all(fd, &head, cfg.write_timeout, stop) {
                return slave_end_to_master(e);
            }
            last_send = Instant::now();
        }
        // Wait for an ack, new bytes, the next heartbeat or `tick` (to see `stop`).
        let wait = cfg
            .heartbeat
            .saturating_sub(last_send.elapsed())
            .min(tick)
            .max(Duration::from_millis(1));
        let mut fds = [
            libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: data_fd,
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        let ms = i32::try_from(wait.as_millis()).unwrap_or(i32::MAX);
        waiting.store(true, Ordering::SeqCst);
        // pairs with the fence in the caller's poke: either it sees `waiting` or this sees
        // its append
        std::sync::atomic::fence(Ordering::SeqCst);
        if store.max_offset() > prog.pos {
            // appended after the look above, maybe before `waiting` was seen: no sleep
            waiting.store(false, Ordering::SeqCst);
            continue;
        }
        // SAFETY: `fds` holds two valid pollfd entries that live across the call.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, ms) };
        waiting.store(false, Ordering::SeqCst);
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return MasterEnd::Io(format!("poll: {e}"));
            }
        }
        if fds[1].revents != 0 {
            let mut b = [0u8; 8];
            // SAFETY: reads at most 8 bytes into a valid buffer from our own eventfd/pipe.
            let _ = unsafe { libc::read(data_fd, b.as_mut_ptr().cast(), b.len()) };
        }
    }
}

/// `head` then `body` with as few syscalls as the socket allows (one `writev` when it takes
/// both; the body is never copied).
fn write_all_vectored(
    fd: RawFd,
    head: &[u8],
    body: &[u8],
    timeout: Duration,
    stop: &AtomicBool,
) -> Result<(), SlaveEnd> {
    let iov = [
        libc::iovec {
            iov_base: head.as_ptr() as *mut libc::c_void,
            iov_len: head.len(),
        },
        libc::iovec {
            iov_base: body.as_ptr() as *mut libc::c_void,
            iov_len: body.len(),
        },
    ];
    // SAFETY: both iovecs point into buffers that stay alive and unchanged during the call;
    // writev only reads them.
    let n = unsafe { libc::writev(fd, iov.as_ptr(), 2) };
    let done = if n < 0 {
        let e = std::io::Error::last_os_error();
        match e.kind() {
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted => 0,
            std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset => {
                return Err(SlaveEnd::Closed)
            }
            _ => return Err(SlaveEnd::Io(format!("write: {e}"))),
        }
    } else {
        // n >= 0 and at most head.len() + body.len(), so the cast is lossless
        n as usize
    };
    if done < head.len() {
        write_all(fd, &head[done..], timeout, stop)?;
        write_all(fd, body, timeout, stop)
    } else {
        write_all(fd, &body[done - head.len()..], timeout, stop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::StoreConfig;
    use rmq_wire::ha::SLAVE_ACK_LEN;
    use rmq_wire::message::MessageIn;
    use std::io::{Read, Write};
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;
    use std::path::Path;

    fn open(root: &Path, follows: bool) -> Store {
        let mut c = StoreConfig::new(root);
        c.segment_size = 1 << 20;
        c.confirm_follows_max = follows;
        Store::open(c).expect("open").0
    }

    fn fill(master: &Store, n: usize) {
        for i in 0..n {
            let body = vec![b'x'; 50 + i % 100];
            let m = MessageIn {
                topic: b"T",
                queue_id: (i % 2) as i32,
                flag: 0,
                sys_flag: 0,
                body: &body,
                properties: b"",
                born_timestamp: 1,
                born_host: std::net::SocketAddr::from(([127, 0, 0, 1], 4000)),
                reconsume_times: 0,
                prepared_txn_offset: 0,
            };
            master.append_batch(&[m]).expect("append");
        }
    }

    fn transfer(offset: u64, epoch: i32, start: u64, confirm: u64, body: &[u8]) -> Vec<u8> {
        let h = TransferHeader {
            offset,
            epoch,
            epoch_start_offset: start,
            confirm_offset: confirm,
        };
        let mut v = encode_transfer_header(&h, body.len())
            .expect("head")
            .to_vec();
        v.extend_from_slice(body);
        v
    }

    fn cfg(controller_mode: bool) -> SlaveLoopConfig {
        SlaveLoopConfig {
            controller_mode,
            heartbeat: Duration::from_millis(50),
            housekeeping: Duration::from_millis(2000),
            max_body: 1 << 20,
        }
    }

    /// `N` fresh temporary directories.
    fn tmps<const N: usize>() -> [tempfile::TempDir; N] {
        std::array::from_fn(|_| tempfile::tempdir().expect("tempdir"))
    }

    fn epochs(dir: &Path) -> Mutex<EpochFile> {
        Mutex::new(EpochFile::open(&dir.join("epoch")).expect("epochs").0)
    }

    #[test]
    fn apply_follows_slave_py_rules() {
        let [md, sd, ed] = tmps();
        let master = open(md.path(), true);
        fill(&master, 20);
        let slave = open(sd.path(), false);
        let ep = epochs(ed.path());
        let all = master.read_range(0, 1 << 20, u64::MAX).expect("range");
        let bytes = all.as_slice();
        let h = |offset, epoch, confirm| TransferHeader {
            offset,
            epoch,
            epoch_start_offset: 0,
            confirm_offset: confirm,
        };
        // a heartbeat records the epoch and appends nothing
        let a = apply_transfer(&slave, &ep, true, &h(0, 3, 0), b"").expect("hb");
        assert_eq!(a, Applied::default());
        assert_eq!(ep.lock().expect("l").last_epoch(), Some(3));
        // an offset that is not our max is refused
        assert!(apply_transfer(&slave, &ep, true, &h(5, 3, 0), bytes).is_err());
        // bytes, and the confirm offset clamped to our max
        let a = apply_transfer(&slave, &ep, true, &h(0, 3, u64::MAX), bytes).expect("apply");
        assert_eq!(
            a,
            Applied {
                grew: true,
                visible: true
            }
        );
        assert_eq!(slave.max_offset(), master.max_offset());
        assert_eq!(slave.confirm_offset(), master.max_offset());
        // an epoch below ours is refused
        let e = apply_transfer(&slave, &ep, true, &h(slave.max_offset(), 2, 0), b"")
            .expect_err("below");
        assert!(e.contains("below our last epoch 3"), "{e}");
        assert!(apply_transfer(&slave, &ep, true, &h(0, -1, 0), b"").is_err());
        // classic mode: appended bytes are visible, no confirm offset
        let [sd2, ed2] = tmps();
        let classic = open(sd2.path(), true);
        let ep2 = epochs(ed2.path());
        let a = apply_transfer(&classic, &ep2, false, &h(0, 0, 0), bytes).expect("apply");
        assert_eq!(
            a,
            Applied {
                grew: true,
                visible: true
            }
        );
    }

    /// A master stream split at every byte boundary ends in the same log, the same epochs
    /// and acks of the final max; a bad record ends the loop with the reason.
    #[test]
    fn the_loop_applies_a_stream_split_anywhere_and_acks() {
        let [md] = tmps();
        let master = open(md.path(), true);
        fill(&master, 40);
        let max = master.max_offset();
        let mut stream = transfer(0, 1, 0, 0, b"");
        let mut off = 0;
        let mut epoch = 1;
        while off < max {
            let chunk = master.read_range(off, 700, u64::MAX).expect("range");
            if off > max / 2 && epoch == 1 {
                epoch = 2;
            }
            stream.extend(transfer(
                off,
                epoch,
                if epoch == 1 { 0 } else { off },
                off,
                chunk.as_slice(),
            ));
            off += chunk.as_slice().len() as u64;
        }
        stream.extend(transfer(max, epoch, 0, max, b""));
        for cut in [1usize, 7, 36, 37, 500, 4096] {
            let [sd, ed] = tmps();
            let slave = open(sd.path(), false);
            let ep = epochs(ed.path());
            let (mut ours, theirs) = UnixStream::pair().expect("pair");
            let stop = AtomicBool::new(false);
            let data = stream.clone();
            let writer = std::thread::spawn(move || {
                for piece in data.chunks(cut) {
                    ours.write_all(piece).expect("write");
                }
                // read acks until the final max is acked, then close
                let mut ack = [0u8; SLAVE_ACK_LEN];
                loop {
                    ours.read_exact(&mut ack).expect("ack");
                    if u64::from_be_bytes(ack[4..].try_into().expect("8")) == max {
                        break;
                    }
                }
            });
            let mut last = SlaveProgress::default();
            let end = run_slave_loop(
                &slave,
                &ep,
                theirs.as_raw_fd(),
                &cfg(true),
                Resume::default(),
                &stop,
                &mut |p| last = p,
            );
            writer.join().expect("writer");
            assert_eq!(end, SlaveEnd::Closed, "cut {cut}");
            assert_eq!(slave.max_offset(), max);
            assert_eq!(slave.confirm_offset(), max);
            assert_eq!(last.acked, max);
            let a = master.read_range(0, 1 << 20, u64::MAX).expect("m");
            let b = slave.read_range(0, 1 << 20, u64::MAX).expect("s");
            assert_eq!(a.as_slice(), b.as_slice());
            let got: Vec<_> = ep
                .lock()
                .expect("l")
                .entries()
                .iter()
                .map(|e| e.epoch)
                .collect();
            assert_eq!(got, vec![1, 2]);
        }
    }

    #[test]
    fn the_loop_ends_on_a_bad_record_silence_and_stop() {
        let [sd, ed] = tmps();
        let slave = open(sd.path(), false);
        let ep = epochs(ed.path());
        let stop = AtomicBool::new(false);
        // garbage state field
        let (mut a, b) = UnixStream::pair().expect("pair");
        a.write_all(&[0, 0, 0, 9, 0, 0, 0, 0]).expect("w");
        let end = run_slave_loop(
            &slave,
            &ep,
            b.as_raw_fd(),
            &cfg(true),
            Resume::default(),
            &stop,
            &mut |_| {},
        );
        assert_eq!(end.kind(), "protocol", "{end:?}");
        // silence: nothing for the housekeeping interval (the peer stays open)
        let (_a, b) = UnixStream::pair().expect("pair");
        let mut c = cfg(true);
        c.housekeeping = Duration::from_millis(200);
        let end = run_slave_loop(
            &slave,
            &ep,
            b.as_raw_fd(),
            &c,
            Resume::default(),
            &stop,
            &mut |_| {},
        );
        assert_eq!(end, SlaveEnd::Silent);
        // stop from another thread
        let (_a, b) = UnixStream::pair().expect("pair");
        let stop2 = std::sync::Arc::new(AtomicBool::new(false));
        let s2 = stop2.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            s2.store(true, Ordering::Release);
        });
        let end = run_slave_loop(
            &slave,
            &ep,
            b.as_raw_fd(),
            &cfg(true),
            Resume::default(),
            &stop2,
            &mut |_| {},
        );
        t.join().expect("t");
        assert_eq!(end, SlaveEnd::Stopped);
    }

    /// The master loop streams to the slave loop over a socket pair: the slave ends with the
    /// master's log and epochs, the master hears the final ack and goes idle; bytes appended
    /// later go out when the data descriptor is poked; stop ends both.
    #[test]
    fn master_and_slave_loops_replicate_a_log() {
        let [md, sd, med, sed] = tmps();
        let master = std::sync::Arc::new(open(md.path(), true));
        fill(&master, 50);
        let mep = std::sync::Arc::new(epochs(med.path()));
        mep.lock().expect("l").append(1, 0).expect("e1");
        let half = master.max_offset();
        mep.lock().expect("l").append(2, half).expect("e2");
        fill(&master, 50);
        let slave = std::sync::Arc::new(open(sd.path(), false));
        let sep = std::sync::Arc::new(epochs(sed.path()));
        let (a, b) = UnixStream::pair().expect("pair");
        a.set_nonblocking(true).expect("nb");
        b.set_nonblocking(true).expect("nb");
        let (dr, dw) = UnixStream::pair().expect("data pair");
        dr.set_nonblocking(true).expect("nb");
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let mcfg = MasterLoopConfig {
            controller_mode: true,
            batch_bytes: 1000,
            heartbeat: Duration::from_millis(50),
            write_timeout: Duration::from_secs(5),
        };
        let progress = std::sync::Arc::new(Mutex::new(Vec::<MasterProgress>::new()));
        let (m2, e2, s2, p2) = (master.clone(), mep.clone(), stop.clone(), progress.clone());
        let afd = a.as_raw_fd();
        let dfd = dr.as_raw_fd();
        let mt = std::thread::spawn(move || {
            let waiting = AtomicBool::new(false);
            run_master_loop(
                &m2,
                &e2,
                afd,
                dfd,
                &mcfg,
                0,
                Vec::new(),
                &s2,
                &waiting,
                &mut |p| p2.lock().expect("l").push(p),
            )
        });
        let (sl2, se2, st2) = (slave.clone(), sep.clone(), stop.clone());
        let bfd = b.as_raw_fd();
        let stt = std::thread::spawn(move || {
            run_slave_loop(
                &sl2,
                &se2,
                bfd,
                &cfg(true),
                Resume::default(),
                &st2,
                &mut |_| {},
            )
        });
        let wait_for = |what: &str, f: &dyn Fn() -> bool| {
            let t0 = Instant::now();
            while !f() {
                assert!(t0.elapsed() < Duration::from_secs(30), "timed out: {what}");
                std::thread::sleep(Duration::from_millis(5));
            }
        };
        wait_for("the first half", &|| {
            slave.max_offset() == master.max_offset()
        });
        fill(&master, 30);
        (&dw).write_all(&[1]).expect("poke");
        wait_for("the appended bytes", &|| {
            slave.max_offset() == master.max_offset()
                && slave.confirm_offset() == master.max_offset()
        });
        let m = master.max_offset();
        wait_for("the final ack and idle", &|| {
            let p = progress.lock().expect("l");
            p.iter().any(|x| x.ack == Some(m)) && p.iter().any(|x| x.idle && x.pos == m)
        });
        stop.store(true, Ordering::Release);
        let (me, se) = (mt.join().expect("m"), stt.join().expect("s"));
        assert_eq!(me, MasterEnd::Stopped);
        assert_eq!(se, SlaveEnd::Stopped);
        let x = master.read_range(0, 1 << 20, u64::MAX).expect("m");
        let y = slave.read_range(0, 1 << 20, u64::MAX).expect("s");
        assert_eq!(x.as_slice(), y.as_slice());
        let got: Vec<_> = sep.lock().expect("l").raw_entries().to_vec();
        assert_eq!(got, vec![(1, 0), (2, half)]);
        // no batch crossed the epoch boundary: every transfer report is at or after a boundary
        assert!(progress.lock().expect("l").iter().all(|p| p.pos <= m));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]
        /// Whatever a master sends — garbage, or TRANSFER headers around damaged record bytes
        /// at any offset — the slave loop ends with a reason, never panics, and its log holds
        /// only whole valid records: everything it kept reads back, and the max offset is a
        /// record boundary.
        #[test]
        fn a_hostile_master_never_leaves_a_bad_log(
            garbage in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..600),
            flips in proptest::collection::vec((0usize..4000, 1u8..=255), 0..4),
            framed in proptest::prelude::any::<bool>(),
            cut in 1usize..700,
        ) {
            let [md, sd, ed] = tmps();
            let master = open(md.path(), true);
            fill(&master, 20);
            let mut log = master.read_range(0, 1 << 20, u64::MAX).expect("r").as_slice().to_vec();
            for (at, x) in &flips {
                let i = at % log.len();
                log[i] ^= x;
            }
            let mut stream = Vec::new();
            if framed {
                let mut off = 0usize;
                while off < log.len() {
                    let n = cut.min(log.len() - off);
                    stream.extend(transfer(off as u64, 1, 0, off as u64, &log[off..off + n]));
                    off += n;
                }
            }
            stream.extend_from_slice(&garbage);
            let slave = open(sd.path(), false);
            let ep = epochs(ed.path());
            let (mut a, b) = UnixStream::pair().expect("pair");
            let writer = std::thread::spawn(move || {
                let _ = a.write_all(&stream);
                // closing ends the loop if nothing else did
            });
            let stop = AtomicBool::new(false);
            let end = run_slave_loop(&slave, &ep, b.as_raw_fd(), &cfg(true), Resume::default(), &stop, &mut |_| {});
            writer.join().expect("writer");
            proptest::prop_assert!(matches!(end, SlaveEnd::Closed | SlaveEnd::Protocol(_)), "{:?}", end);
            let max = slave.max_offset();
            if max > 0 {
                let kept = slave.read_range(0, 1 << 20, u64::MAX).expect("kept bytes read back");
                proptest::prop_assert_eq!(kept.as_slice().len() as u64, max);
                proptest::prop_assert_eq!(kept.as_slice(), &log[..max as usize]);
            }
        }
    }
}
