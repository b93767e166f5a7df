//! The message store: commitlog + consume queues + checkpoint + the confirm-offset dispatcher,
//! with a background flush thread doing interval flushes and group commits.
//!
//! # Visibility
//! Consumers only see what the dispatcher has put in consume queues, and the dispatcher never
//! goes past the confirm offset. With `confirm_follows_max` (a standalone master, or RocketMQ's
//! rule for a one-member SyncStateSet / `allAckInSyncStateSet=false`) the confirm offset is the
//! max offset and every append is dispatched at once. Otherwise the owner (the HA layer) moves it
//! with [`Store::set_confirm_offset`].
//!
//! # Queue offsets across restarts (RocketMQ #7689)
//! Records past the dispatch point already carry queue offsets. Recovery rebuilds the per-queue
//! next-offset table from the consume queues *and* from every record after the dispatch point,
//! so a restart never hands out a queue offset twice.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rmq_wire::message::{MessageIn, RecordView};

use crate::checkpoint::{Checkpoint, CheckpointFile, CheckpointLoad};
use crate::commitlog::{
    CommitLog, CommitLogConfig, Placement, RecordBuf, RecoveryReport, Shared, DEFAULT_SEGMENT_SIZE,
};
use crate::consume_queue::{ConsumeQueue, CqUnit};
use crate::dispatch::{DispatchState, PendingUnit, QueueKey};
use crate::error::{IoContext, Result, StoreError};

/// Units a filtered read looks at per call at most (RocketMQ's maxFilterMessageCount).
pub const MAX_FILTER_SCAN: usize = 16_000;

/// SYSFLAG transaction type bits (bits 2-3).
const TRANSACTION_TYPE_MASK: i32 = 0xC;
const TRANSACTION_PREPARED: i32 = 0x4;
const TRANSACTION_ROLLBACK: i32 = 0xC;

/// Prepared and rolled-back transaction records are stored but never dispatched and do not take
/// a queue offset (RocketMQ: only NOT_TYPE and COMMIT_TYPE reach consume queues).
pub fn is_dispatchable(sys_flag: i32) -> bool {
    let t = sys_flag & TRANSACTION_TYPE_MASK;
    t != TRANSACTION_PREPARED && t != TRANSACTION_ROLLBACK
}

/// RocketMQ's topic rule: `[%|a-zA-Z0-9_-]+`, at most 255 bytes here (it becomes a directory).
pub fn check_topic(topic: &[u8]) -> std::result::Result<&str, String> {
    if topic.is_empty() || topic.len() > 255 {
        return Err(format!("topic length {} is outside 1..=255", topic.len()));
    }
    if !topic
        .iter()
        .all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'%' | b'|' | b'_' | b'-'))
    {
        return Err(format!(
            "topic {:?} has characters outside [%|a-zA-Z0-9_-]",
            String::from_utf8_lossy(topic)
        ));
    }
    std::str::from_utf8(topic).map_err(|e| e.to_string())
}

/// Java's `String.hashCode` over UTF-16 code units: RocketMQ's tag code.
pub fn java_string_hash(s: &str) -> i64 {
    let mut h: i32 = 0;
    for u in s.encode_utf16() {
        h = h.wrapping_mul(31).wrapping_add(u as i32);
    }
    h as i64
}

/// The value of property `key` in RocketMQ's `k\x01v\x02` encoding.
pub fn property<'a>(props: &'a [u8], key: &[u8]) -> Option<&'a [u8]> {
    props.split(|&b| b == 2).find_map(|kv| {
        let sep = kv.iter().position(|&b| b == 1)?;
        (&kv[..sep] == key).then_some(&kv[sep + 1..])
    })
}

fn tag_code(props: &[u8]) -> i64 {
    match property(props, b"TAGS") {
        Some(t) => java_string_hash(&String::from_utf8_lossy(t)),
        None => 0,
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

#[derive(Debug, Clone)]
pub struct StoreConfig {
    pub root: PathBuf,
    pub segment_size: u64,
    pub cq_units_per_file: u64,
    pub store_host: SocketAddr,
    pub flush_interval_ms: u64,
    pub checkpoint_interval_ms: u64,
    /// Largest accepted body (RocketMQ maxMessageSize, 4 MiB).
    pub max_message_size: usize,
    /// Confirm offset = max offset (standalone); false when the HA layer drives it.
    pub confirm_follows_max: bool,
}

impl StoreConfig {
    pub fn new(root: impl Into<PathBuf>) -> StoreConfig {
        StoreConfig {
            root: root.into(),
            segment_size: DEFAULT_SEGMENT_SIZE,
            cq_units_per_file: 300_000,
            store_host: SocketAddr::from(([127, 0, 0, 1], 10911)),
            flush_interval_ms: 500,
            checkpoint_interval_ms: 1000,
            max_message_size: 4 * 1024 * 1024,
            confirm_follows_max: true,
        }
    }

    fn validate(&self) -> Result<()> {
        if self.cq_units_per_file == 0 || self.cq_units_per_file > (1 << 26) {
            return Err(StoreError::Config {
                key: "cq_units_per_file",
                reason: format!("{} is outside [1, 2^26]", self.cq_units_per_file),
            });
        }
        if self.flush_interval_ms == 0 {
            return Err(StoreError::Config {
                key: "flush_interval_ms",
                reason: "must be at least 1".into(),
            });
        }
        if self.max_message_size == 0 || self.max_message_size > 6 * 1024 * 1024 {
            return Err(StoreError::Config {
                key: "max_message_size",
                reason: format!("{} is outside [1, 6 MiB]", self.max_message_size),
            });
        }
        Ok(())
    }
}

/// What opening the store found.
#[derive(Debug, Clone)]
pub struct OpenReport {
    pub commitlog: RecoveryReport,
    pub checkpoint: CheckpointLoad,
    pub cq_cut_units: u64,
    pub redispatched_from: u64,
    pub confirm_offset: u64,
    /// The persisted confirm offset before clamping into [min, end], when it was clamped.
    pub confirm_clamped_from: Option<u64>,
}

/// Result of a consume-queue read (the store side of PULL_MESSAGE).
pub struct GetResult {
    pub records: Vec<RecordBuf>,
    pub next_offset: u64,
    pub min_offset: u64,
    pub max_offset: u64,
}

struct Inner {
    log: CommitLog,
    cqs: HashMap<(String, i32), ConsumeQueue>,
    state: DispatchState,
    last_store_ts: i64,
    closed: bool,
}

struct FlushReq {
    requested: u64,
    stop: bool,
}

struct Core {
    cfg: StoreConfig,
    inner: Mutex<Inner>,
    shared: Arc<Shared>,
    confirm: AtomicU64,
    dispatched: AtomicU64,
    req: Mutex<FlushReq>,
    cv: Condvar,
    notify_r: OwnedFd,
    notify_w: OwnedFd,
    flush_error: Mutex<Option<String>>,
    /// Set when a consume-queue sync failed: no checkpoint may be written after that.
    ckpt_broken: Mutex<Option<String>>,
    /// Serialises checkpoint writers (the flush thread, `checkpoint()`, truncation, close).
    ckpt_lock: Mutex<()>,
    ckpt_file: CheckpointFile,
    closed: AtomicBool,
}

/// The store handle. Dropping it stops the flush thread after a final flush and checkpoint.
pub struct Store {
    core: Arc<Core>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn make_pipe() -> Result<(OwnedFd, OwnedFd)> {
    let mut fds: [RawFd; 2] = [-1, -1];
    // SAFETY: pipe2 writes two fds into the array we pass, which is valid for two c_ints.
    let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) };
    if rc != 0 {
        return Err(StoreError::Io {
            path: PathBuf::from("<flush notify pipe>"),
            source: std::io::Error::last_os_error(),
        });
    }
    // SAFETY: pipe2 succeeded, so both fds are open and owned by nobody else.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    Ok((r, w))
}

impl Core {
    fn inner(&self) -> Result<MutexGuard<'_, Inner>> {
        let g = lock(&self.inner);
        if g.closed {
            return Err(StoreError::Closed);
        }
        Ok(g)
    }

    fn cq<'a>(
        cfg: &StoreConfig,
        cqs: &'a mut HashMap<(String, i32), ConsumeQueue>,
        topic: &str,
        qid: i32,
    ) -> Result<&'a mut ConsumeQueue> {
        let key = (topic.to_string(), qid);
        if !cqs.contains_key(&key) {
            let dir = cfg
                .root
                .join("consumequeue")
                .join(topic)
                .join(qid.to_string());
            let (cq, _) = ConsumeQueue::open(&dir, cfg.cq_units_per_file)?;
            cqs.insert(key.clone(), cq);
        }
        cqs.get_mut(&key).ok_or(StoreError::Closed)
    }

    /// Dispatches committed records into consume queues up to the confirm offset: the queued
    /// units of recent appends, plus a commitlog scan for any range they do not cover.
    fn dispatch(&self, inner: &mut Inner) -> Result<u64> {
        let max = inner.log.max_offset();
        let target = if self.cfg.confirm_follows_max {
            max
        } else {
            self.confirm.load(Ordering::Acquire).min(max)
        };
        let from = self.dispatched.load(Ordering::Acquire);
        if from >= target {
            return Ok(from);
        }
        let Inner {
            log, cqs, state, ..
        } = inner;
        let mut units: Vec<PendingUnit> = Vec::new();
        if from < state.pending_from {
            let to = state.pending_from.min(target);
            log.scan(from, to, false, &mut |off, r: &RecordView<'_>| {
                if let Some(u) = Self::unit_of(state, off, r)? {
                    units.push(u);
                }
                Ok(())
            })?;
        }
        state.take_until(target, &mut units);
        // One consume-queue write per queue per call.
        let mut groups: HashMap<QueueKey, Vec<(u64, CqUnit)>> = HashMap::new();
        for u in units {
            groups.entry(u.key).or_default().push((u.index, u.unit));
        }
        for ((topic, qid), units) in groups {
            let q = Self::cq(&self.cfg, cqs, &topic, qid)?;
            // Units already in the queue (a replay after a crash that left them) must point at
            // the very same records; skip those and append the rest.
            let mut skip = 0;
            for &(index, unit) in &units {
                if index >= q.max_offset() || q.get(index)?.phys_offset != unit.phys_offset {
                    break;
                }
                skip += 1;
            }
            q.append_batch(&units[skip..])?;
        }
        self.dispatched.store(target, Ordering::Release);
        Ok(target)
    }

    /// The consume-queue unit of a record, or None when it is not dispatched (prepared or
    /// rolled-back transaction halves).
    fn unit_of(
        state: &mut DispatchState,
        off: u64,
        r: &RecordView<'_>,
    ) -> Result<Option<PendingUnit>> {
        if !is_dispatchable(r.sys_flag) {
            return Ok(None);
        }
        let topic = check_topic(r.topic).map_err(|reason| StoreError::CorruptRecord {
            offset: off,
            reason,
        })?;
        let index = u64::try_from(r.queue_offset).map_err(|_| StoreError::CorruptRecord {
            offset: off,
            reason: format!("negative queue offset {}", r.queue_offset),
        })?;
        Ok(Some(PendingUnit {
            key: (state.intern(topic), r.queue_id),
            index,
            unit: CqUnit {
                phys_offset: off,
                size: r.total_size() as u32,
                tag_code: tag_code(r.properties),
            },
        }))
    }

    /// Raises next queue offsets from the records in `[from, to)`.
    fn note_queue_offsets(
        log: &CommitLog,
        state: &mut DispatchState,
        from: u64,
        to: u64,
    ) -> Result<()> {
        log.scan(from, to, false, &mut |off, r| {
            if let Some(u) = Self::unit_of(state, off, r)? {
                state.raise_next(&u.key.0, u.key.1, r.queue_offset + 1);
            }
            Ok(())
        })?;
        Ok(())
    }

    /// Syncs the consume queues and writes the checkpoint. Only the snapshot is taken under the
    /// store lock; the fsyncs run outside it so appends are not stalled. The dispatched offset
    /// written is the one snapshotted before the consume-queue files were synced, so the
    /// checkpoint never claims more than is durable. After a failed sync checkpoints stop (the
    /// dirty marks are gone), which costs a longer replay on restart but never loses data.
    fn checkpoint_now(&self) -> Result<Checkpoint> {
        if let Some(e) = lock(&self.ckpt_broken).clone() {
            return Err(StoreError::Io {
                path: self.cfg.root.join("checkpoint"),
                source: std::io::Error::other(format!("checkpoints stopped after: {e}")),
            });
        }
        let _one_at_a_time = lock(&self.ckpt_lock);
        let (files, dirs, dispatched, confirm, ts) = {
            let mut inner = self.inner()?;
            let mut files = Vec::new();
            let mut dirs = Vec::new();
            for q in inner.cqs.values_mut() {
                let (f, d) = q.take_dirty()?;
                files.extend(f);
                dirs.extend(d);
            }
            (
                files,
                dirs,
                self.dispatched.load(Ordering::Acquire),
                self.effective_confirm(),
                inner.last_store_ts,
            )
        };
        let synced = files
            .iter()
            .try_for_each(|(f, p)| f.sync_data().at(p))
            .and_then(|_| dirs.iter().try_for_each(|d| crate::fsutil::sync_dir(d)));
        if let Err(e) = synced {
            *lock(&self.ckpt_broken) = Some(e.to_string());
            return Err(e);
        }
        let flushed = self.shared.flushed_offset();
        let c = Checkpoint {
            physic_msg_timestamp: ts,
            logics_msg_timestamp: ts,
            index_msg_timestamp: 0,
            master_flushed_offset: flushed as i64,
            confirm_offset: confirm as i64,
            dispatched_offset: dispatched.min(flushed) as i64,
            flushed_offset: flushed as i64,
        };
        self.ckpt_file.store(&c)?;
        Ok(c)
    }

    fn effective_confirm(&self) -> u64 {
        if self.cfg.confirm_follows_max {
            self.shared.max_offset()
        } else {
            self.confirm.load(Ordering::Acquire)
        }
    }

    fn notify(&self) {
        let b = [1u8];
        // SAFETY: writes one byte from a live stack buffer to a pipe fd we own. A full pipe
        // (EAGAIN) is fine: the reader has wake-ups pending already.
        unsafe {
            libc::write(self.notify_w.as_raw_fd(), b.as_ptr().cast(), 1);
        }
        self.cv.notify_all();
    }

    fn flush_once(&self) {
        match self.shared.flush() {
            Ok(_) => {}
            Err(e) => {
                *lock(&self.flush_error) = Some(e.to_string());
            }
        }
        self.notify();
    }
}

fn flush_loop(weak: Weak<Core>) {
    let mut last_ckpt = Instant::now();
    loop {
        let Some(core) = weak.upgrade() else { return };
        let interval = Duration::from_millis(core.cfg.flush_interval_ms);
        let ckpt_every = Duration::from_millis(core.cfg.checkpoint_interval_ms.max(1));
        let deadline = Instant::now() + interval;
        let stop = {
            let mut g = lock(&core.req);
            loop {
                if g.stop || g.requested > core.shared.flushed_offset() {
                    break;
                }
                let now = Instant::now();
                if now >= deadline {
                    break;
                }
                g = core
                    .cv
                    .wait_timeout(g, deadline - now)
                    .map(|(g, _)| g)
                    .unwrap_or_else(|e| e.into_inner().0);
            }
            g.stop
        };
        if core.shared.max_offset() > core.shared.flushed_offset() {
            core.flush_once();
        }
        if stop {
            return;
        }
        if last_ckpt.elapsed() >= ckpt_every {
            last_ckpt = Instant::now();
            if let Err(e) = core.checkpoint_now() {
                if !matches!(e, StoreError::Closed) {
                    *lock(&core.flush_error) = Some(e.to_string());
                }
            }
        }
    }
}

impl Store {
    pub fn open(cfg: StoreConfig) -> Result<(Store, OpenReport)> {
        cfg.validate()?;
        std::fs::create_dir_all(&cfg.root).at(&cfg.root)?;
        let ckpt_file = CheckpointFile::new(&cfg.root);
        let (ckpt, ckpt_load) = ckpt_file.load()?;
        let trusted = matches!(ckpt_load, CheckpointLoad::Loaded);
        let dispatched_ckpt = if trusted {
            ckpt.dispatched_offset.max(0) as u64
        } else {
            0
        };
        let recover_from = if trusted {
            dispatched_ckpt.min(ckpt.flushed_offset.max(0) as u64)
        } else {
            0
        };
        let (log, cl_report) = CommitLog::open(
            CommitLogConfig {
                dir: cfg.root.join("commitlog"),
                segment_size: cfg.segment_size,
                store_host: cfg.store_host,
            },
            recover_from,
        )?;
        let min = log.min_offset();
        let end = log.max_offset();
        // Redispatch from the checkpoint's dispatch point, but never from before the part that
        // recovery validated (records before it were synced before the checkpoint was written).
        // The dispatch point must be a record boundary; a checkpoint that says otherwise (from
        // an older version, or damaged in a way its CRC missed) falls back to the start of the
        // segment recovery validated, which only means more redispatching.
        let dispatch_start = dispatched_ckpt.clamp(min, end);
        let dispatch_start = if log.is_boundary(dispatch_start) {
            dispatch_start
        } else {
            cl_report.scanned_from.clamp(min, end)
        };

        // Consume queues: open every one on disk, cut units past the dispatch point.
        let mut cqs = HashMap::new();
        let mut cq_cut = 0u64;
        let cq_root = cfg.root.join("consumequeue");
        if cq_root.exists() {
            for t in std::fs::read_dir(&cq_root).at(&cq_root)? {
                let t = t.at(&cq_root)?;
                let Some(topic) = t.file_name().to_str().map(str::to_string) else {
                    continue;
                };
                if check_topic(topic.as_bytes()).is_err() || !t.path().is_dir() {
                    continue;
                }
                for q in std::fs::read_dir(t.path()).at(&t.path())? {
                    let q = q.at(&t.path())?;
                    let Some(qid) = q.file_name().to_str().and_then(|s| s.parse::<i32>().ok())
                    else {
                        continue;
                    };
                    let (mut cq, rec) = ConsumeQueue::open(&q.path(), cfg.cq_units_per_file)?;
                    cq_cut += rec.cut_units;
                    cq_cut += cq.truncate_by_phys_offset(dispatch_start)?;
                    cq.delete_before_phys(min)?;
                    cqs.insert((topic.clone(), qid), cq);
                }
            }
        }
        let mut state = DispatchState::new(end);
        for ((topic, qid), q) in &cqs {
            state.raise_next(topic, *qid, q.max_offset() as i64);
        }
        Core::note_queue_offsets(&log, &mut state, dispatch_start, end)?;

        let persisted_confirm = if trusted {
            ckpt.confirm_offset.max(0) as u64
        } else {
            dispatch_start
        };
        let confirm = persisted_confirm.clamp(min, end);
        let confirm_clamped_from = (confirm != persisted_confirm).then_some(persisted_confirm);
        let (notify_r, notify_w) = make_pipe()?;
        let shared = log.shared().clone();
        let core = Arc::new(Core {
            inner: Mutex::new(Inner {
                log,
                cqs,
                state,
                last_store_ts: ckpt.physic_msg_timestamp,
                closed: false,
            }),
            shared,
            confirm: AtomicU64::new(confirm),
            dispatched: AtomicU64::new(dispatch_start),
            req: Mutex::new(FlushReq {
                requested: 0,
                stop: false,
            }),
            cv: Condvar::new(),
            notify_r,
            notify_w,
            flush_error: Mutex::new(None),
            ckpt_broken: Mutex::new(None),
            ckpt_lock: Mutex::new(()),
            ckpt_file,
            closed: AtomicBool::new(false),
            cfg,
        });
        {
            let mut inner = core.inner()?;
            core.dispatch(&mut inner)?;
        }
        core.checkpoint_now()?;
        let weak = Arc::downgrade(&core);
        let thread = std::thread::Builder::new()
            .name("rmq-store-flush".into())
            .spawn(move || flush_loop(weak))
            .at(Path::new("<flush thread>"))?;
        let report = OpenReport {
            commitlog: cl_report,
            checkpoint: ckpt_load,
            cq_cut_units: cq_cut,
            redispatched_from: dispatch_start,
            confirm_offset: confirm,
            confirm_clamped_from,
        };
        Ok((
            Store {
                core,
                thread: Mutex::new(Some(thread)),
            },
            report,
        ))
    }

    pub fn config(&self) -> &StoreConfig {
        &self.core.cfg
    }

    /// Appends a batch; returns where each message went. Dispatches at once when the confirm
    /// offset follows the max offset.
    pub fn append_batch(&self, msgs: &[MessageIn<'_>]) -> Result<Vec<Placement>> {
        for m in msgs {
            check_topic(m.topic).map_err(StoreError::MessageIllegal)?;
            if m.body.len() > self.core.cfg.max_message_size {
                return Err(StoreError::MessageIllegal(format!(
                    "body of {} bytes exceeds max_message_size {}",
                    m.body.len(),
                    self.core.cfg.max_message_size
                )));
            }
            if m.queue_id < 0 {
                return Err(StoreError::MessageIllegal(format!(
                    "negative queue id {}",
                    m.queue_id
                )));
            }
        }
        let mut inner = self.core.inner()?;
        // Store timestamps never go backwards, even if the wall clock does: search by
        // timestamp relies on them being ordered.
        let ts = now_ms().max(inner.last_store_ts);
        let Inner { log, state, .. } = &mut *inner;
        // Offsets are taken in a scratch list (batches touch few queues) and published only
        // after the write succeeded, so a failed write leaves no gap in any queue.
        let mut taken: Vec<(&[u8], i32, i64)> = Vec::new();
        let placements = log.append_batch(msgs, ts, &mut |i| {
            let m = &msgs[i];
            if !is_dispatchable(m.sys_flag) {
                return 0;
            }
            if let Some(t) = taken
                .iter_mut()
                .find(|t| t.1 == m.queue_id && t.0 == m.topic)
            {
                t.2 += 1;
                return t.2 - 1;
            }
            // check_topic above guarantees UTF-8.
            let topic = std::str::from_utf8(m.topic).unwrap_or_default();
            let next = state.next_offset(topic, m.queue_id);
            taken.push((m.topic, m.queue_id, next + 1));
            next
        })?;
        for (t, qid, next) in taken {
            state.raise_next(std::str::from_utf8(t).unwrap_or_default(), qid, next);
        }
        let mut last_topic: Option<(&[u8], Arc<str>)> = None;
        for (m, p) in msgs.iter().zip(&placements) {
            if is_dispatchable(m.sys_flag) {
                // Batches usually carry one topic: intern it once, not once per message.
                let topic = match &last_topic {
                    Some((raw, t)) if *raw == m.topic => t.clone(),
                    _ => {
                        let t = state.intern(std::str::from_utf8(m.topic).unwrap_or_default());
                        last_topic = Some((m.topic, t.clone()));
                        t
                    }
                };
                state.push(
                    (topic, m.queue_id),
                    p.queue_offset as u64,
                    CqUnit {
                        phys_offset: p.physical_offset,
                        size: p.size,
                        tag_code: tag_code(m.properties),
                    },
                );
            }
        }
        state.bound(log.max_offset());
        inner.last_store_ts = ts;
        self.core.dispatch(&mut inner)?;
        Ok(placements)
    }

    /// Appends replicated bytes at `offset` (see [`CommitLog::append_raw`]).
    pub fn append_raw(&self, offset: u64, data: &[u8]) -> Result<usize> {
        let mut inner = self.core.inner()?;
        let Inner { log, state, .. } = &mut *inner;
        let mut units: Vec<(PendingUnit, i64)> = Vec::new();
        let n = log.append_raw(offset, data, &mut |off, r| {
            if let Some(u) = Core::unit_of(state, off, r)? {
                units.push((u, r.queue_offset));
            }
            Ok(())
        })?;
        for (u, qo) in units {
            state.raise_next(&u.key.0, u.key.1, qo + 1);
            state.push(u.key, u.index, u.unit);
        }
        state.bound(log.max_offset());
        self.core.dispatch(&mut inner)?;
        Ok(n)
    }

    /// Moves the confirm offset (clamped to the max offset) and dispatches up to it. The
    /// offset must be a record boundary (replicas ack whole records): a confirm offset inside a
    /// record would expose part of it and is refused.
    pub fn set_confirm_offset(&self, offset: u64) -> Result<u64> {
        let mut inner = self.core.inner()?;
        let c = offset.min(inner.log.max_offset());
        if !inner.log.is_boundary(c) {
            return Err(StoreError::InvalidArgument(format!(
                "confirm offset {c} is not a record boundary"
            )));
        }
        self.core.confirm.store(c, Ordering::Release);
        self.core.dispatch(&mut inner)?;
        Ok(c)
    }

    pub fn confirm_offset(&self) -> u64 {
        self.core.effective_confirm()
    }
    pub fn dispatched_offset(&self) -> u64 {
        self.core.dispatched.load(Ordering::Acquire)
    }
    pub fn max_offset(&self) -> u64 {
        self.core.shared.max_offset()
    }
    pub fn min_offset(&self) -> u64 {
        self.core.shared.min_offset()
    }
    pub fn flushed_offset(&self) -> u64 {
        self.core.shared.flushed_offset()
    }
    /// Written to the files (page cache). With pwrite there is no separate commit stage, so
    /// this equals the max offset; it is reported for parity with RocketMQ.
    pub fn committed_offset(&self) -> u64 {
        self.core.shared.max_offset()
    }
    /// The sticky error of the background flusher, if a flush failed.
    pub fn flush_error(&self) -> Option<String> {
        lock(&self.core.flush_error).clone()
    }

    pub fn read_record(&self, offset: u64) -> Result<RecordBuf> {
        self.core.inner()?.log.read_record(offset)
    }

    pub fn read_range(&self, offset: u64, max_bytes: usize, limit: u64) -> Result<RecordBuf> {
        self.core.inner()?.log.read_range(offset, max_bytes, limit)
    }

    /// Reads up to `max_count` messages / `max_bytes` from a queue starting at `queue_offset`.
    /// With `tag_codes`, only units whose tag code is in the list are returned (RocketMQ's
    /// broker-side tag filter: consumers re-check the tag string); skipped units still advance
    /// `next_offset`, and at most `MAX_FILTER_SCAN` units are looked at per call.
    pub fn get_messages(
        &self,
        topic: &str,
        queue_id: i32,
        queue_offset: u64,
        max_count: usize,
        max_bytes: usize,
        tag_codes: Option<&[i64]>,
    ) -> Result<GetResult> {
        let mut inner = self.core.inner()?;
        let Inner { log, cqs, .. } = &mut *inner;
        let key = (topic.to_string(), queue_id);
        let Some(q) = cqs.get(&key) else {
            return Ok(GetResult {
                records: Vec::new(),
                next_offset: 0,
                min_offset: 0,
                max_offset: 0,
            });
        };
        let (min, max) = (q.min_offset(), q.max_offset());
        if queue_offset < min || queue_offset >= max {
            return Err(StoreError::OffsetOutOfRange {
                offset: queue_offset,
                min,
                max,
            });
        }
        let mut records = Vec::new();
        let mut bytes = 0usize;
        let mut next = queue_offset;
        let mut scanned = 0usize;
        'scan: while next < max && records.len() < max_count && scanned < MAX_FILTER_SCAN {
            let chunk = if tag_codes.is_some() { 256 } else { max_count };
            let units = q.get_range(next, chunk.min(max_count.max(1) * 4).max(1))?;
            if units.is_empty() {
                break;
            }
            for u in units {
                if records.len() >= max_count {
                    break 'scan;
                }
                scanned += 1;
                let deleted = u.phys_offset < log.min_offset(); // retention: skip
                let filtered = tag_codes.is_some_and(|t| !t.contains(&u.tag_code));
                if deleted || filtered {
                    next += 1;
                    continue;
                }
                if !records.is_empty() && bytes + u.size as usize > max_bytes {
                    break 'scan;
                }
                let r = log.read_record(u.phys_offset)?;
                if r.len() != u.size as usize {
                    return Err(StoreError::CorruptRecord {
                        offset: u.phys_offset,
                        reason: format!(
                            "consume queue says {} bytes, record has {}",
                            u.size,
                            r.len()
                        ),
                    });
                }
                bytes += r.len();
                records.push(r);
                next += 1;
            }
        }
        Ok(GetResult {
            records,
            next_offset: next,
            min_offset: min,
            max_offset: max,
        })
    }

    fn with_cq<T>(
        &self,
        topic: &str,
        queue_id: i32,
        f: impl FnOnce(&ConsumeQueue, &CommitLog) -> Result<T>,
        absent: T,
    ) -> Result<T> {
        let inner = self.core.inner()?;
        match inner.cqs.get(&(topic.to_string(), queue_id)) {
            Some(q) => f(q, &inner.log),
            None => Ok(absent),
        }
    }

    pub fn queue_min_offset(&self, topic: &str, queue_id: i32) -> Result<u64> {
        self.with_cq(topic, queue_id, |q, _| Ok(q.min_offset()), 0)
    }
    pub fn queue_max_offset(&self, topic: &str, queue_id: i32) -> Result<u64> {
        self.with_cq(topic, queue_id, |q, _| Ok(q.max_offset()), 0)
    }
    pub fn queue_unit(&self, topic: &str, queue_id: i32, index: u64) -> Result<CqUnit> {
        let inner = self.core.inner()?;
        match inner.cqs.get(&(topic.to_string(), queue_id)) {
            Some(q) => q.get(index),
            None => Err(StoreError::OffsetOutOfRange {
                offset: index,
                min: 0,
                max: 0,
            }),
        }
    }

    /// The next queue offset a new message to this queue would get (dispatched or not).
    pub fn next_queue_offset(&self, topic: &str, queue_id: i32) -> Result<i64> {
        Ok(self.core.inner()?.state.next_offset(topic, queue_id))
    }

    /// SEARCH_OFFSET_BY_TIMESTAMP: the first queue offset whose store time is >= `ts_ms`.
    pub fn search_offset_by_timestamp(
        &self,
        topic: &str,
        queue_id: i32,
        ts_ms: i64,
    ) -> Result<u64> {
        self.with_cq(
            topic,
            queue_id,
            |q, log| {
                Ok(q.search_by_timestamp(ts_ms, &mut |u: &CqUnit| {
                    log.with_record(u.phys_offset, |r| r.store_timestamp).ok()
                }))
            },
            0,
        )
    }

    /// Store timestamp of the earliest message still in a queue.
    pub fn earliest_store_time(&self, topic: &str, queue_id: i32) -> Result<Option<i64>> {
        self.with_cq(
            topic,
            queue_id,
            |q, log| {
                if q.min_offset() >= q.max_offset() {
                    return Ok(None);
                }
                let u = q.get(q.min_offset())?;
                Ok(Some(log.with_record(u.phys_offset, |r| r.store_timestamp)?))
            },
            None,
        )
    }

    /// Cuts the commitlog and consume queues back to `offset` durably, lowers the confirm and
    /// dispatch offsets, rebuilds the queue-offset table and writes the checkpoint before
    /// returning.
    pub fn truncate_to(&self, offset: u64) -> Result<()> {
        {
            let mut inner = self.core.inner()?;
            inner.log.truncate_to(offset)?;
            for q in inner.cqs.values_mut() {
                q.truncate_by_phys_offset(offset)?;
            }
            self.core.confirm.fetch_min(offset, Ordering::AcqRel);
            self.core.dispatched.fetch_min(offset, Ordering::AcqRel);
            let dispatched = self.core.dispatched.load(Ordering::Acquire);
            let Inner {
                log, cqs, state, ..
            } = &mut *inner;
            state.truncate(offset);
            state.clear_next();
            for ((topic, qid), q) in cqs.iter() {
                state.raise_next(topic, *qid, q.max_offset() as i64);
            }
            Core::note_queue_offsets(log, state, dispatched, offset)?;
            self.core.dispatch(&mut inner)?;
        }
        self.core.checkpoint_now()?;
        Ok(())
    }

    /// Asks the flush thread to make everything up to `offset` durable (group commit).
    pub fn request_flush(&self, offset: u64) {
        let mut g = lock(&self.core.req);
        g.requested = g.requested.max(offset);
        drop(g);
        self.core.cv.notify_all();
    }

    /// Blocks until `offset` is durable or `timeout` passes; returns the flushed offset.
    pub fn wait_flushed(&self, offset: u64, timeout: Duration) -> Result<u64> {
        self.request_flush(offset);
        let deadline = Instant::now() + timeout;
        let mut g = lock(&self.core.req);
        loop {
            let flushed = self.core.shared.flushed_offset();
            if flushed >= offset || self.core.closed.load(Ordering::Acquire) {
                return Ok(flushed);
            }
            if let Some(e) = self.flush_error() {
                return Err(StoreError::Io {
                    path: self.core.cfg.root.join("commitlog"),
                    source: std::io::Error::other(e),
                });
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(flushed);
            }
            g = self
                .core
                .cv
                .wait_timeout(g, deadline - now)
                .map(|(g, _)| g)
                .unwrap_or_else(|e| e.into_inner().0);
        }
    }

    /// Synchronous flush of the commitlog in the calling thread.
    pub fn flush(&self) -> Result<u64> {
        let r = self.core.shared.flush();
        self.core.notify();
        r
    }

    /// The read end of a non-blocking pipe that receives a byte whenever the flushed offset
    /// advances, for event loops (trio's `wait_readable`). Owned by the store.
    pub fn flush_notify_fd(&self) -> RawFd {
        self.core.notify_r.as_raw_fd()
    }

    pub fn checkpoint(&self) -> Result<Checkpoint> {
        self.core.checkpoint_now()
    }

    /// Retention: deletes commitlog segments last written before `older_than` and wholly below
    /// min(flushed, dispatched), then consume-queue files that point only below the new min.
    pub fn delete_expired(&self, older_than: SystemTime) -> Result<Vec<String>> {
        let mut inner = self.core.inner()?;
        let names = inner
            .log
            .delete_expired(older_than, self.retention_limit())?;
        self.trim_queues(&mut inner)?;
        Ok(names)
    }

    /// Deletes whole segments that end at or below `offset` (bounded like `delete_expired`).
    pub fn delete_segments_before(&self, offset: u64) -> Result<Vec<String>> {
        let mut inner = self.core.inner()?;
        let names = inner
            .log
            .delete_segments_before(offset.min(self.retention_limit()))?;
        self.trim_queues(&mut inner)?;
        Ok(names)
    }

    /// Retention never deletes what is not yet flushed or dispatched.
    fn retention_limit(&self) -> u64 {
        self.core
            .shared
            .flushed_offset()
            .min(self.core.dispatched.load(Ordering::Acquire))
    }

    fn trim_queues(&self, inner: &mut Inner) -> Result<()> {
        let min = inner.log.min_offset();
        for q in inner.cqs.values_mut() {
            q.delete_before_phys(min)?;
        }
        Ok(())
    }

    /// Topics and queue ids that have consume queues.
    pub fn queues(&self) -> Result<Vec<(String, i32)>> {
        let inner = self.core.inner()?;
        let mut v: Vec<(String, i32)> = inner.cqs.keys().cloned().collect();
        v.sort();
        Ok(v)
    }

    pub fn segment_files(&self) -> Result<Vec<(u64, PathBuf)>> {
        Ok(self.core.inner()?.log.segment_files())
    }

    /// Final flush and checkpoint, then stops the flush thread. Idempotent.
    pub fn close(&self) -> Result<()> {
        if self.core.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        {
            let mut g = lock(&self.core.req);
            g.stop = true;
        }
        self.core.cv.notify_all();
        if let Some(t) = lock(&self.thread).take() {
            let _ = t.join();
        }
        let flushed = self.core.shared.flush();
        let ckpt = self.core.checkpoint_now();
        lock(&self.core.inner).closed = true;
        self.core.notify();
        flushed?;
        ckpt?;
        Ok(())
    }

    pub fn is_closed(&self) -> bool {
        self.core.closed.load(Ordering::Acquire)
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        let _ = self.close();
    }
}
