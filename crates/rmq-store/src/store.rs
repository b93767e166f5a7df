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
//!
//! # Damage (issue 15)
//! Damaged records below the durable point are quarantined ([`crate::quarantine`]), never
//! served, and skipped by readers, which say which queue offsets they skipped
//! ([`Store::read_queue`]); [`Store::repair`] writes good bytes from a replica back in place.
//! Missing or damaged consume queues are rebuilt from the commitlog on open (they are checked
//! against the consume-queue manifest, [`crate::cq_manifest`], and against the log).
//!
//! # Deleted topics
//! [`Store::delete_topic`] appends a marker record (topic [`TOPIC_DELETED`], body = the deleted
//! topic's name) to the commitlog, so the deletion replicates, recovers and truncates with the
//! data around it. Dispatching the marker sets the topic's *floor* to the marker's offset: every
//! unit of the topic below it is hidden as retention hides expired ones (min offset raised,
//! whole files deleted), and queue offsets go on from where they were, never handed out twice.
//! A topic created again under the same name starts empty. Floors are kept in the consume-queue
//! manifest (entries with queue id -1) and applied again on every open and rebuild. Once a
//! deleted topic's queue holds nothing, the next checkpoint retires it: the queue is closed and
//! its files deleted after the manifest keeps its max offset (entries with queue id <= -2), so
//! topic churn holds no file descriptors or files for ever.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rmq_wire::message::{MessageIn, RecordView};

use rmq_wire::message::{
    decode_record_checked, decode_record_structure, Decoded, MAGIC_V1, MAGIC_V2,
};

use crate::checkpoint::{Checkpoint, CheckpointFile, CheckpointLoad};
use crate::commitlog::{
    unlink_segments, BadRange, CommitLog, CommitLogConfig, Placement, RecordBuf, RecoveryReport,
    Shared, DEFAULT_SEGMENT_SIZE,
};
use crate::consume_queue::{ConsumeQueue, CqUnit};
use crate::cq_manifest::{self, ManifestEntry};
use crate::dispatch::{DispatchState, PendingUnit, QueueKey};
use crate::error::{IoContext, Result, StoreError};
use crate::quarantine::{Quarantine, QuarantineEntry, QuarantineLoad, QueueRef};

/// The topic of the marker record [`Store::delete_topic`] appends; producers may not use it.
pub const TOPIC_DELETED: &str = "rmq_sys_TOPIC_DELETED";

/// The queue id of a pending unit that carries a deleted topic's floor, not a queue's unit.
const FLOOR_QID: i32 = -1;
/// Manifest entries with a queue id at or below this one are retired queues: queue
/// `RETIRED_QID_BASE - queue_id`, whose files were deleted, with the offset it goes on from.
const RETIRED_QID_BASE: i32 = -2;

/// How often the consume-queue manifest's counts are refreshed when only they changed.
const MANIFEST_REFRESH: Duration = Duration::from_secs(10);

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

/// How far the last store timestamp may run ahead of the wall clock and still be reused: a
/// clock stepped back by up to this much keeps store times ordered (search by time relies on
/// it); a larger step (a clock that was wrong, a timestamp remembered from such a run in the
/// checkpoint) follows the wall clock at once instead of freezing every timestamp until the
/// clock catches up, which stalled delayed messages and retries for as long (probe: 2 h).
pub const MAX_CLOCK_HOLD_MS: i64 = 5_000;

/// The store timestamp of the next write, from the wall clock and the last one written.
pub fn next_store_timestamp(now: i64, last: i64) -> i64 {
    if last > now && last - now <= MAX_CLOCK_HOLD_MS {
        last
    } else {
        now
    }
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
    /// How the quarantine list was loaded.
    pub quarantine_load: QuarantineLoad,
    /// Ranges quarantined while opening (recovery, consume-queue rebuild, consistency checks).
    pub quarantined: Vec<QuarantineEntry>,
    /// Quarantined ranges whose bytes are valid records again (repaired from outside).
    pub healed: Vec<QuarantineEntry>,
    /// Quarantined ranges dropped because their bytes were cut or deleted.
    pub quarantine_dropped: Vec<QuarantineEntry>,
    /// Consume queues rebuilt from the commitlog: (topic, queue id, why).
    pub cq_rebuilt: Vec<(String, i32, String)>,
    /// Units written by that rebuild.
    pub cq_rebuilt_units: u64,
    /// The consume-queue manifest failed its checks (the fallback rule was used).
    pub cq_manifest_problem: Option<String>,
    /// The checkpoint (and manifest) that ends an open could not be written because the disk
    /// is full: the store opened on the previous ones, which still hold (every count in
    /// them is a lower bound), and the flush thread writes a new one once space is freed.
    pub checkpoint_deferred: Option<String>,
}

/// A queue offset a read skipped, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedUnit {
    pub queue_offset: u64,
    /// The quarantined range (or, for a unit that matches no record, the unit's target).
    pub phys_offset: u64,
    pub size: u64,
    pub reason: String,
}

/// Result of a consume-queue read (the store side of PULL_MESSAGE).
pub struct GetResult {
    pub records: Vec<RecordBuf>,
    pub next_offset: u64,
    pub min_offset: u64,
    pub max_offset: u64,
    /// Units skipped because their record is quarantined (or the unit does not match its
    /// record); never served.
    pub skipped: Vec<SkippedUnit>,
}

impl GetResult {
    /// Bytes of the records served, back to back: the length of a pull response's body.
    pub fn body_len(&self) -> usize {
        self.records
            .iter()
            .map(|r| rmq_wire::message::client_record_len(r.as_slice()))
            .sum()
    }

    /// Copies the records served back to back, as clients get them (without the whole-record
    /// CRC trailer: `rmq_wire::message::write_client_record`), into `dst`, which must be exactly
    /// [`GetResult::body_len`] bytes long (a pull response's body, built in one buffer
    /// instead of one object per record). Returns `false`, writing nothing, on a length
    /// mismatch.
    pub fn copy_body_into(&self, dst: &mut [u8]) -> bool {
        if dst.len() != self.body_len() {
            return false;
        }
        let mut at = 0;
        for r in &self.records {
            // as clients are served a record: without the store's whole-record CRC trailer
            match rmq_wire::message::write_client_record(r.as_slice(), &mut dst[at..]) {
                Some(n) => at += n,
                None => return false, // cannot happen: dst is body_len() long
            }
        }
        at == dst.len()
    }

    /// The records served, concatenated, as a new buffer.
    pub fn body(&self) -> Vec<u8> {
        let mut out = vec![0u8; self.body_len()];
        self.copy_body_into(&mut out);
        out
    }
}

/// Counters of damage handling and retention since the store was opened.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Ranges quarantined (on open and at run time).
    pub quarantined: u64,
    /// Of those, found by reads or scrubs while running.
    pub quarantined_at_runtime: u64,
    /// Ranges repaired with good bytes.
    pub repaired: u64,
    /// Units skipped by reads because their record is quarantined.
    pub skipped_reads: u64,
    /// Units that did not match the record they point at (consume-queue damage found while
    /// running). A read rewrites such units when it finds their records between the good
    /// units around them (`cq_units_repaired`); otherwise it skips them.
    pub cq_mismatches: u64,
    /// Consume-queue units rewritten to point at their records.
    pub cq_units_repaired: u64,
    /// Consume-queue units whose tag code did not match their record's TAGS, rewritten (a
    /// wrong code would hide the message from tag-filtered reads for good).
    pub cq_tag_codes_repaired: u64,
    /// Commitlog segments deleted by retention, and their bytes.
    pub retention_segments: u64,
    pub retention_bytes: u64,
    /// Deleted topics' emptied consume queues closed and their files deleted; and deletions
    /// that failed (the files stay; the queue is closed all the same).
    pub cq_queues_retired: u64,
    pub cq_retire_failures: u64,
}

/// What a retention call deleted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RetentionResult {
    pub deleted: Vec<String>,
    pub bytes: u64,
    /// The commitlog's min offset afterwards (the epoch file's prefix follows it).
    pub min_offset: u64,
}

struct Inner {
    log: CommitLog,
    cqs: HashMap<(String, i32), ConsumeQueue>,
    state: DispatchState,
    quarantine: Quarantine,
    /// Deleted topics: every unit of the topic below this commitlog offset is gone.
    floors: HashMap<String, u64>,
    /// A deleted topic's emptied queues, closed and their files deleted (an open queue per
    /// deleted topic held file descriptors and files for ever: topic churn ran a broker out
    /// of descriptors), with the offset each goes on from if the topic comes back.
    retired: HashMap<(String, i32), u64>,
    /// Per queue, positions whose units' tag codes were checked since open ([`TagChecked`]),
    /// and tag codes found right in a unit checked against its record ([`KnownTags`]).
    tag_checked: HashMap<(String, i32), TagChecked>,
    tag_known: HashMap<(String, i32), KnownTags>,
    stats: StoreStats,
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
    /// The last checkpoint failed for lack of disk space (cleared by the next one that
    /// succeeds). Unlike `flush_error` this is not sticky and fails no durability wait: the
    /// commitlog is still flushed, and the previous checkpoint stays in force.
    ckpt_error: Mutex<Option<String>>,
    /// The last dispatch could not write a consume-queue file for lack of disk space (cleared
    /// by the next dispatch that completes). The records are in the commitlog; the dispatch
    /// point stays where it was and the flush thread retries every round.
    dispatch_error: Mutex<Option<String>>,
    /// Set when a consume-queue sync failed: no checkpoint may be written after that.
    ckpt_broken: Mutex<Option<String>>,
    /// Serialises checkpoint writers (the flush thread, `checkpoint()`, truncation, close).
    ckpt_lock: Mutex<()>,
    ckpt_file: CheckpointFile,
    /// The consume-queue manifest last written, and when.
    manifest_written: Mutex<(Vec<ManifestEntry>, Option<Instant>)>,
    closed: AtomicBool,
    /// `<root>/lock`, flocked while the store is open (released by `close`).
    root_lock: Mutex<Option<std::fs::File>>,
    /// A min offset the log is about to move to (`start_at`): checkpoints record at least
    /// this, so a crash while the files move is not taken for a lost head segment.
    announced_min: AtomicU64,
}

/// Takes `<root>/lock` (an exclusive `flock`): two stores open on one directory would both
/// append at the same offsets and overwrite each other's acknowledged records (RocketMQ locks
/// the same file and refuses to start).
fn lock_root(root: &Path) -> Result<std::fs::File> {
    let path = root.join("lock");
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .at(&path)?;
    // SAFETY: flock on a file descriptor this function owns (`f` outlives the call); it
    // touches no memory.
    let rc = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc != 0 {
        let e = std::io::Error::last_os_error();
        let source = if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
            std::io::Error::new(
                e.kind(),
                format!(
                    "the store {} is already open in another process or store (its lock \
                     file is held); two brokers must not share a store directory",
                    root.display()
                ),
            )
        } else {
            e
        };
        return Err(StoreError::Io { path, source });
    }
    Ok(f)
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
            log,
            cqs,
            state,
            quarantine,
            floors,
            ..
        } = inner;
        let mut units: Vec<PendingUnit> = Vec::new();
        if from < state.pending_from {
            let to = state.pending_from.min(target);
            scan_around(log, quarantine, from, to, false, &mut |item| {
                if let Some(u) = Self::unit_of_item(state, &item)? {
                    units.push(u);
                }
                Ok(())
            })?;
        }
        state.take_until(target, &mut units);
        // Units taken from the pending queue and not written are found again by the scan of
        // [from, pending_from) next time, and units already in a queue are skipped then.
        match Self::append_units(&self.cfg, cqs, quarantine, floors, units) {
            Ok(()) => {}
            Err(e) if e.is_no_space() => {
                // The records are in the commitlog whatever happens to their units: an append
                // or a confirm must not fail for it (an append answered as failed whose record
                // is kept would be delivered later). What did get into a queue is readable
                // (from memory); the rest waits for space.
                *lock(&self.dispatch_error) = Some(e.to_string());
                return Ok(from);
            }
            Err(e) => return Err(e),
        }
        self.dispatched.store(target, Ordering::Release);
        if lock(&self.dispatch_error).take().is_some() {
            self.notify(); // waiting readers see the units that were held back
        }
        Ok(target)
    }

    /// Appends units to their consume queues, one write per queue. Units already in a queue
    /// (a replay after a crash that left them) must point at the very same records and are
    /// skipped. A gap in a queue's offsets that a quarantined range of unknown records explains
    /// is filled with placeholder units pointing into that range (readers skip them as
    /// quarantined, a repair rewrites them), so later records keep their queue offsets.
    /// A deleted topic's marker raises that topic's floor once every unit is in (a unit below
    /// the marker is hidden whichever order they came in; one above it stays).
    fn append_units(
        cfg: &StoreConfig,
        cqs: &mut HashMap<(String, i32), ConsumeQueue>,
        quarantine: &Quarantine,
        floors: &mut HashMap<String, u64>,
        units: Vec<PendingUnit>,
    ) -> Result<()> {
        let mut groups: HashMap<QueueKey, Vec<(u64, CqUnit)>> = HashMap::new();
        let mut deleted: Vec<(Arc<str>, u64)> = Vec::new();
        for u in units {
            if u.key.1 == FLOOR_QID {
                deleted.push((u.key.0, u.unit.phys_offset));
                continue;
            }
            groups.entry(u.key).or_default().push((u.index, u.unit));
        }
        for ((topic, qid), units) in groups {
            let q = Self::cq(cfg, cqs, &topic, qid)?;
            let mut skip = 0;
            for &(index, unit) in &units {
                if index >= q.max_offset() || q.get(index)?.phys_offset != unit.phys_offset {
                    break;
                }
                skip += 1;
            }
            let mut next = q.max_offset();
            let mut last_phys = q.last_unit().map(|u| u.phys_offset);
            let mut batch: Vec<(u64, CqUnit)> = Vec::with_capacity(units.len() - skip);
            for &(index, unit) in &units[skip..] {
                if index > next && next > 0 {
                    let m = index - next;
                    let lo = last_phys.map_or(0, |p| p + 1);
                    if let Some(e) = quarantine.last_unknown_between(lo, unit.phys_offset) {
                        if m <= e.size {
                            for j in 0..m {
                                let phys = e.end() - m + j;
                                batch.push((
                                    next + j,
                                    CqUnit {
                                        phys_offset: phys,
                                        size: 1,
                                        tag_code: 0,
                                    },
                                ));
                            }
                        }
                    }
                }
                batch.push((index, unit));
                next = index + 1;
                last_phys = Some(unit.phys_offset);
            }
            q.append_batch(&batch)?;
        }
        for (topic, floor) in deleted {
            let f = floors.entry(topic.to_string()).or_insert(0);
            *f = (*f).max(floor);
            Self::apply_floor(cqs, &topic, *f)?;
        }
        Ok(())
    }

    /// Hides every unit of `topic`'s queues below commitlog offset `floor` (a deleted topic).
    fn apply_floor(
        cqs: &mut HashMap<(String, i32), ConsumeQueue>,
        topic: &str,
        floor: u64,
    ) -> Result<()> {
        for ((t, _), q) in cqs.iter_mut() {
            if t == topic {
                q.delete_before_phys(floor)?;
            }
        }
        Ok(())
    }

    /// The unit of a scanned item: a record's, or a quarantined record's whose queue position
    /// is known.
    fn unit_of_item(state: &mut DispatchState, item: &Item<'_, '_>) -> Result<Option<PendingUnit>> {
        match item {
            Item::Record(off, r) => Self::unit_of(state, *off, r),
            Item::Quarantined(e) => {
                Ok(e.record
                    .as_ref()
                    .filter(|r| r.topic != TOPIC_DELETED)
                    .map(|r| PendingUnit {
                        key: (state.intern(&r.topic), r.queue_id),
                        index: r.queue_offset,
                        unit: CqUnit {
                            phys_offset: e.offset,
                            size: u32::try_from(e.size).unwrap_or(u32::MAX),
                            tag_code: 0,
                        },
                    }))
            }
        }
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
        if topic == TOPIC_DELETED {
            // a deleted topic's marker: its floor, not a unit (a body that names no topic
            // deletes nothing)
            return Ok(check_topic(r.body).ok().map(|t| PendingUnit {
                key: (state.intern(t), FLOOR_QID),
                index: 0,
                unit: CqUnit {
                    phys_offset: off,
                    size: r.total_size() as u32,
                    tag_code: 0,
                },
            }));
        }
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

    /// Raises next queue offsets from the records in `[from, to)` (and the quarantined records
    /// there whose queue position is known).
    fn note_queue_offsets(
        log: &CommitLog,
        quarantine: &Quarantine,
        state: &mut DispatchState,
        from: u64,
        to: u64,
    ) -> Result<()> {
        scan_around(log, quarantine, from, to, false, &mut |item| {
            if let Some(u) = Self::unit_of_item(state, &item)? {
                if u.key.1 != FLOOR_QID {
                    state.raise_next(&u.key.0, u.key.1, u.index as i64 + 1);
                }
            }
            Ok(())
        })
    }

    /// Syncs the consume queues and writes the checkpoint. Only the snapshot is taken under the
    /// store lock; the fsyncs run outside it so appends are not stalled. The dispatched offset
    /// written is the one snapshotted before the consume-queue files were synced, so the
    /// checkpoint never claims more than is durable. After a failed sync checkpoints stop (the
    /// dirty marks are gone), which costs a longer replay on restart but never loses data.
    fn checkpoint_now(&self) -> Result<Checkpoint> {
        self.checkpoint_with(false)
    }

    /// [`Core::checkpoint_now`]; `exact_manifest` rewrites the consume-queue manifest whenever
    /// it changed (open, close, truncation), not only when the set of queues did.
    fn checkpoint_with(&self, exact_manifest: bool) -> Result<Checkpoint> {
        let r = self.write_checkpoint(exact_manifest);
        match &r {
            Ok(_) => *lock(&self.ckpt_error) = None,
            Err(e) if e.is_no_space() => *lock(&self.ckpt_error) = Some(e.to_string()),
            Err(_) => {}
        }
        r
    }

    /// Closes the queues of deleted topics that hold nothing (every unit below the topic's
    /// floor) and keeps only the offset each goes on from; a retired queue that came back (its
    /// topic created again and written) is live again. Returns the directories to delete
    /// once the manifest listing them as retired is durable.
    fn retire_dead_queues(inner: &mut Inner) -> Vec<PathBuf> {
        let Inner {
            cqs,
            floors,
            retired,
            tag_checked,
            tag_known,
            ..
        } = inner;
        retired.retain(|k, _| !cqs.contains_key(k));
        let dead: Vec<(String, i32)> = cqs
            .iter()
            .filter(|((t, _), q)| {
                floors.contains_key(t.as_str()) && q.min_offset() == q.max_offset()
            })
            .map(|(k, _)| k.clone())
            .collect();
        let mut dirs = Vec::with_capacity(dead.len());
        for key in dead {
            if let Some(q) = cqs.remove(&key) {
                dirs.push(q.dir().to_path_buf());
                tag_checked.remove(&key);
                tag_known.remove(&key);
                retired.insert(key, q.max_offset());
            } // the queue's files are closed here
        }
        dirs
    }

    fn write_checkpoint(&self, exact_manifest: bool) -> Result<Checkpoint> {
        if let Some(e) = lock(&self.ckpt_broken).clone() {
            return Err(StoreError::Io {
                path: self.cfg.root.join("checkpoint"),
                source: std::io::Error::other(format!("checkpoints stopped after: {e}")),
            });
        }
        let _one_at_a_time = lock(&self.ckpt_lock);
        let ((files, retired_dirs), dirs, dispatched, confirm, ts, manifest, log_min) = {
            let mut inner = self.inner()?;
            let mut files = Vec::new();
            let mut dirs = Vec::new();
            let retired_dirs = Self::retire_dead_queues(&mut inner);
            let mut manifest = Vec::with_capacity(inner.cqs.len() + inner.retired.len());
            for ((topic, qid), &max) in &inner.retired {
                manifest.push(ManifestEntry {
                    topic: topic.clone(),
                    queue_id: RETIRED_QID_BASE - *qid,
                    max_offset: max,
                });
            }
            for ((topic, qid), q) in inner.cqs.iter_mut() {
                let (f, d) = q.take_dirty()?;
                files.extend(f);
                dirs.extend(d);
                manifest.push(ManifestEntry {
                    topic: topic.clone(),
                    queue_id: *qid,
                    max_offset: q.max_offset(),
                });
            }
            // deleted topics' floors (kept: one entry per deleted name, and they keep a
            // deleted topic's emptied queues out of `queues()`)
            for (topic, &floor) in &inner.floors {
                manifest.push(ManifestEntry {
                    topic: topic.clone(),
                    queue_id: FLOOR_QID,
                    max_offset: floor,
                });
            }
            manifest.sort_by(|a, b| (&a.topic, a.queue_id).cmp(&(&b.topic, b.queue_id)));
            (
                (files, retired_dirs),
                dirs,
                self.dispatched.load(Ordering::Acquire),
                self.effective_confirm(),
                inner.last_store_ts,
                manifest,
                inner
                    .log
                    .min_offset()
                    .max(self.announced_min.load(Ordering::Acquire)),
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
        // Every count in the manifest is durable now. It is written before the checkpoint
        // whenever the set of queues changed or a count went down (truncation), so every queue
        // with units below a checkpoint's dispatch point is listed and no count is too high;
        // counts that only grew are refreshed at most every MANIFEST_REFRESH (a lower count is
        // still a valid lower bound), which keeps its fsyncs off the busy path.
        {
            let mut written = lock(&self.manifest_written);
            let (old, at) = &*written;
            let same_set = old.len() == manifest.len()
                && old
                    .iter()
                    .zip(&manifest)
                    .all(|(a, b)| a.topic == b.topic && a.queue_id == b.queue_id);
            let lowered = same_set
                && old
                    .iter()
                    .zip(&manifest)
                    .any(|(a, b)| b.max_offset < a.max_offset);
            let due = at.map_or(true, |t| t.elapsed() >= MANIFEST_REFRESH) && *old != manifest;
            // a deleted topic's floor must be durable before a checkpoint passes its marker
            let floors_of = |m: &[ManifestEntry]| -> Vec<(String, u64)> {
                m.iter()
                    .filter(|e| e.queue_id == FLOOR_QID)
                    .map(|e| (e.topic.clone(), e.max_offset))
                    .collect()
            };
            let floors_moved = floors_of(old) != floors_of(&manifest);
            if !same_set || lowered || due || floors_moved || (exact_manifest && *old != manifest) {
                cq_manifest::store(&self.cfg.root, &cq_manifest::encode(&manifest, dispatched))?;
                *written = (manifest, Some(Instant::now()));
            }
        }
        // Retired queues' files go only once the manifest that lists them as retired is
        // durable (it was rewritten above: the set of entries changed). A crash before this
        // leaves an empty queue directory, opened as a live queue and retired again.
        if !retired_dirs.is_empty() {
            let failed = retired_dirs
                .iter()
                .filter(|d| remove_queue_dir(d).is_err())
                .count() as u64;
            let mut inner = self.inner()?;
            inner.stats.cq_queues_retired += retired_dirs.len() as u64;
            inner.stats.cq_retire_failures += failed;
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
            log_min_offset: Some(log_min),
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
        if lock(&core.dispatch_error).is_some() {
            // a dispatch stopped for lack of space: retried until it completes
            if let Ok(mut inner) = core.inner() {
                if let Err(e) = core.dispatch(&mut inner) {
                    if !matches!(e, StoreError::Closed) {
                        *lock(&core.dispatch_error) = Some(e.to_string());
                    }
                }
            }
        }
        if last_ckpt.elapsed() >= ckpt_every {
            last_ckpt = Instant::now();
            if let Err(e) = core.checkpoint_now() {
                // no space: kept in ckpt_error and tried again next round
                if !matches!(e, StoreError::Closed) && !e.is_no_space() {
                    *lock(&core.flush_error) = Some(e.to_string());
                }
            }
        }
    }
}

/// How many unreadable records at a queue's head `earliest_store_time` passes over.
pub const EARLIEST_SCAN: u64 = 4096;

impl Store {
    pub fn open(cfg: StoreConfig) -> Result<(Store, OpenReport)> {
        cfg.validate()?;
        std::fs::create_dir_all(&cfg.root).at(&cfg.root)?;
        let root_lock = lock_root(&cfg.root)?;
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
        // The durable point: everything below the flushed offset of a trusted checkpoint was
        // fsynced before that checkpoint was written, so a bad record there is damage, not a
        // torn write. Without a trusted checkpoint nothing is known to be durable (None: then
        // a bad record is cut as a torn tail only when no valid record follows it).
        let durable = trusted.then(|| ckpt.flushed_offset.max(0) as u64);
        let (mut quarantine, quarantine_load) = Quarantine::open(&cfg.root)?;
        let (log, cl_report) = CommitLog::open(
            CommitLogConfig {
                dir: cfg.root.join("commitlog"),
                segment_size: cfg.segment_size,
                store_host: cfg.store_host,
                expected_min: if trusted { ckpt.log_min_offset } else { None },
            },
            recover_from,
            durable,
            &quarantine.ranges(),
        )?;
        let min = log.min_offset();
        let end = log.max_offset();
        // Quarantined bytes that were cut or deleted are gone.
        let quarantine_dropped = quarantine.retain(|e| e.offset >= min && e.end() <= end)?;
        // Redispatch from the checkpoint's dispatch point, but never from before the part that
        // recovery validated (records before it were synced before the checkpoint was written).
        // The dispatch point must be a record boundary; a checkpoint that says otherwise (from
        // an older version, or damaged in a way its CRC missed) falls back to the start of the
        // segment recovery validated, which only means more redispatching.
        let dispatch_start = dispatched_ckpt.clamp(min, end);
        let dispatch_start = if log.is_boundary(dispatch_start)
            || quarantine.starting_at(dispatch_start).is_some()
        {
            dispatch_start
        } else {
            cl_report.scanned_from.clamp(min, end)
        };

        // Consume queues: open every one on disk; a queue whose files cannot be read as a
        // queue is rebuilt.
        let mut cqs = HashMap::new();
        let mut cq_cut = 0u64;
        let mut rebuild: std::collections::BTreeMap<(String, i32), String> = Default::default();
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
                    let key = (topic.clone(), qid);
                    let cq = match ConsumeQueue::open(&q.path(), cfg.cq_units_per_file) {
                        Ok((cq, rec)) => {
                            cq_cut += rec.cut_units;
                            if let Some(d) = rec.damage {
                                rebuild.insert(key.clone(), d);
                            }
                            cq
                        }
                        Err(StoreError::CorruptFile { path, reason }) => {
                            rebuild.insert(
                                key.clone(),
                                format!("unreadable: {}: {reason}", path.display()),
                            );
                            wipe_queue_dir(&q.path())?;
                            ConsumeQueue::open(&q.path(), cfg.cq_units_per_file)?.0
                        }
                        Err(e) => return Err(e),
                    };
                    cqs.insert(key, cq);
                }
            }
        }
        // The manifest says which queues held how many durable units: a queue missing or
        // holding fewer is damaged. Without one (an older store), RocketMQ's rule: no consume
        // queue at all while the log has dispatched records means they were all lost.
        let mut floors: HashMap<(String, i32), u64> = HashMap::new();
        let mut topic_floors: HashMap<String, u64> = HashMap::new();
        let mut retired: HashMap<(String, i32), u64> = HashMap::new();
        let mut cq_manifest_problem = None;
        let mut rebuild_all = false;
        let mut manifest_covered = None;
        let manifest_lost = match cq_manifest::load(&cfg.root)? {
            Some(Ok(m)) => {
                manifest_covered = m.covered;
                for e in m.entries {
                    if e.queue_id == FLOOR_QID {
                        topic_floors.insert(e.topic, e.max_offset);
                        continue;
                    }
                    if e.queue_id <= RETIRED_QID_BASE {
                        retired.insert((e.topic, RETIRED_QID_BASE - e.queue_id), e.max_offset);
                        continue;
                    }
                    let key = (e.topic.clone(), e.queue_id);
                    match cqs.get(&key) {
                        None if e.max_offset > 0 => {
                            rebuild.insert(
                                key.clone(),
                                format!(
                                    "consume queue directory missing (it held {} units)",
                                    e.max_offset
                                ),
                            );
                        }
                        Some(q) if q.max_offset() < e.max_offset => {
                            rebuild.entry(key.clone()).or_insert(format!(
                                "holds {} units, {} were durable",
                                q.max_offset(),
                                e.max_offset
                            ));
                        }
                        _ => {}
                    }
                    floors.insert(key, e.max_offset);
                }
                None
            }
            Some(Err(why)) => {
                let what = format!("the consume-queue manifest is unreadable ({why})");
                cq_manifest_problem = Some(why);
                Some(what)
            }
            None => Some("the consume-queue manifest is missing".to_string()),
        };
        // The manifest's counts were taken at `covered` (refreshed at most every
        // MANIFEST_REFRESH), so the records dispatched after it, up to the checkpoint's dispatch
        // point, are read from the log: their units must be in their queues too. A queue that
        // holds fewer lost tail units below the dispatch point (a shortened or zeroed
        // consume-queue file after a crash): the redispatch from the dispatch point would not
        // find those records, and their offsets would be given out again.
        if let Some(covered) = manifest_covered {
            let from = covered.max(min);
            if from < dispatch_start {
                let mut scratch = DispatchState::new(end);
                let mut expect: HashMap<(String, i32), u64> = HashMap::new();
                let mut deleted: std::collections::HashSet<String> = Default::default();
                let scanned = scan_around(
                    &log,
                    &quarantine,
                    from,
                    dispatch_start,
                    false,
                    &mut |item| {
                        if let Some(u) = Core::unit_of_item(&mut scratch, &item)? {
                            if u.key.1 == FLOOR_QID {
                                deleted.insert(u.key.0.to_string());
                            } else {
                                let n = expect.entry((u.key.0.to_string(), u.key.1)).or_insert(0);
                                *n = (*n).max(u.index + 1);
                            }
                        }
                        Ok(())
                    },
                );
                match scanned {
                    // damage in between (quarantined below): the records before it are checked
                    Ok(()) | Err(StoreError::CorruptRecord { .. }) => {}
                    Err(e) => return Err(e),
                }
                // a deleted topic's queues lose their files below its floor on purpose
                expect.retain(|(t, _), _| !deleted.contains(t) && !topic_floors.contains_key(t));
                for (key, n) in expect {
                    let why = match cqs.get(&key).map(|q| q.max_offset()) {
                        None => Some(format!(
                            "consume queue directory missing (the commitlog holds its record at \
                             queue offset {} below the dispatch point)",
                            n - 1
                        )),
                        Some(held) if held < n => Some(format!(
                            "holds {held} units, but the commitlog holds its records up to queue \
                             offset {} below the dispatch point",
                            n - 1
                        )),
                        Some(_) => None,
                    };
                    if let Some(why) = why {
                        rebuild.entry(key.clone()).or_insert(why);
                    }
                    let floor = floors.entry(key).or_insert(0);
                    *floor = (*floor).max(n);
                }
            }
        }
        // Without a readable manifest no queue's count can be checked: with records dispatched,
        // every queue is rebuilt from the commitlog (a damaged queue would otherwise hide
        // records and give their offsets out again). A store written before the manifest
        // existed pays this once.
        if let Some(what) = manifest_lost {
            rebuild_all = min < dispatch_start;
            if rebuild_all {
                for key in cqs.keys() {
                    rebuild
                        .entry(key.clone())
                        .or_insert(format!("{what}: every queue is rebuilt"));
                }
            }
        }
        for key in rebuild.keys() {
            if let Some(q) = cqs.get_mut(key) {
                q.clear()?;
            }
        }
        // What recovery found damaged below the durable point, with the records the consume
        // queues say were there (read before the queues are cut to the dispatch point: units
        // past it may still name the record).
        let bad = cl_report.quarantined.clone();
        let now = now_ms();
        let mut new_entries = entries_for(&bad, &cqs, now)?;
        for (key, q) in cqs.iter_mut() {
            if rebuild.contains_key(key) {
                continue;
            }
            let past_end = q
                .last_unit()
                .is_some_and(|u| u.phys_offset + u64::from(u.size) > end);
            cq_cut += q.truncate_by_phys_offset(dispatch_start)?;
            q.delete_before_phys(min)?;
            // A unit past the end of a log that lost nothing, below the count the manifest
            // says was durable: a damaged unit, whose record may sit below the dispatch point
            // where the redispatch will not find it. Rebuilt instead of cut, so the record is
            // not lost and its queue offset not given out again. (When recovery cut the log,
            // units past the new end are explained by that cut.)
            let log_whole = cl_report.cut_offset.is_none() && cl_report.missing_durable.is_none();
            if let (Some(&durable), true) = (floors.get(key), past_end && log_whole) {
                if q.max_offset() < durable {
                    rebuild.insert(
                        key.clone(),
                        format!(
                            "a unit pointed past the end of the commitlog; recovery cut it to \
                             {} units, below the {durable} the manifest says were durable",
                            q.max_offset()
                        ),
                    );
                    continue;
                }
            }
            // A log that still starts at 0 has every record a queue ever held, and retention
            // removes consume-queue files only after the log's head: a queue starting past
            // unit 0 then lost its first files (a deleted topic's queue excepted, whose floor
            // removed them).
            if min == 0 && q.min_offset() > 0 && !topic_floors.contains_key(&key.0) {
                rebuild.insert(
                    key.clone(),
                    format!(
                        "it starts at unit {} while the commitlog starts at 0: its first files \
                         are missing",
                        q.min_offset()
                    ),
                );
            }
        }
        let mut opened_quarantined = quarantine.add(std::mem::take(&mut new_entries))?;
        // Entries whose bytes validate again were repaired from outside: drop them.
        let healed = {
            let ranges = quarantine.ranges();
            let ok: Vec<u64> = ranges
                .iter()
                .filter(|&&(a, b)| {
                    let v = log.validate_range(a, b, &[]);
                    v.bad.is_empty() && v.stop.is_none() && v.end == b
                })
                .map(|&(a, _)| a)
                .collect();
            let mut out = Vec::new();
            for a in ok {
                if let Some(e) = quarantine.remove(a)? {
                    out.push(e);
                }
            }
            out
        };
        // The first and last unit of every queue must point at a record of that queue.
        for (key, q) in cqs.iter() {
            if rebuild.contains_key(key) || q.min_offset() >= q.max_offset() {
                continue;
            }
            for index in [q.min_offset(), q.max_offset() - 1] {
                let unit = q.get(index)?;
                let why = unit_mismatch(
                    &log,
                    &mut quarantine,
                    &cqs,
                    key,
                    index,
                    &unit,
                    &mut opened_quarantined,
                )?;
                if let Some(why) = why {
                    rebuild.insert(key.clone(), why);
                    break;
                }
            }
        }
        for key in rebuild.keys() {
            if let Some(q) = cqs.get_mut(key) {
                q.clear()?;
            }
        }

        let mut state = DispatchState::new(end);
        let mut cq_rebuilt = Vec::new();
        let mut empty_rebuilt: Vec<((String, i32), u64)> = Vec::new();
        let mut cq_rebuilt_units = 0u64;
        if rebuild_all || !rebuild.is_empty() {
            // Rebuild from the commitlog's min offset. The part recovery did not validate is
            // validated now (a damaged record is quarantined like in recovery).
            let v = log.validate_range(min, cl_report.scanned_from, &quarantine.ranges());
            let found = entries_for(&v.bad, &cqs, now)?;
            opened_quarantined.extend(quarantine.add(found)?);
            let existing: std::collections::HashSet<(String, i32)> = cqs
                .keys()
                .filter(|k| !rebuild.contains_key(*k))
                .cloned()
                .collect();
            let wanted = |topic: &str, qid: i32| -> bool {
                let key = (topic.to_string(), qid);
                rebuild.contains_key(&key) || (rebuild_all && !existing.contains(&key))
            };
            let mut units = Vec::new();
            let mut seen: std::collections::BTreeSet<(String, i32)> = Default::default();
            scan_around(&log, &quarantine, min, dispatch_start, false, &mut |item| {
                if let Some(u) = Core::unit_of_item(&mut state, &item)? {
                    if u.key.1 == FLOOR_QID {
                        units.push(u); // a deleted topic's marker: its floor
                    } else if wanted(&u.key.0, u.key.1) {
                        seen.insert((u.key.0.to_string(), u.key.1));
                        units.push(u);
                    }
                }
                Ok(())
            })?;
            cq_rebuilt_units = units.iter().filter(|u| u.key.1 != FLOOR_QID).count() as u64;
            Core::append_units(&cfg, &mut cqs, &quarantine, &mut topic_floors, units)?;
            for (key, why) in &rebuild {
                cq_rebuilt.push((key.0.clone(), key.1, why.clone()));
            }
            if rebuild_all {
                for key in seen.iter().filter(|k| !rebuild.contains_key(*k)) {
                    cq_rebuilt.push((
                        key.0.clone(),
                        key.1,
                        "every consume queue was missing".to_string(),
                    ));
                }
            }
            for (key, why) in cq_rebuilt.iter_mut().map(|(t, q, w)| ((t.clone(), *q), w)) {
                // Offsets a rebuilt queue had handed out are not handed out again when every
                // record of it is gone from the log's head (retention): the queue, empty, goes
                // on at the manifest's count (decided below, once the records past the
                // dispatch point are counted too). A queue the log still holds records of goes
                // on from them (units are contiguous: it cannot jump past its last one), so
                // records gone from the log's tail (never flushed) give their offsets out
                // again, as they do for a queue that was not rebuilt. A log that still starts
                // at 0 lost nothing at its head: an empty queue there lost its records at the
                // tail and starts again at 0 (it went on at the manifest's count, past a unit
                // that was never there: a hole at its first offset; found by the property
                // test of tail damage).
                let Some(&floor) = floors.get(&key) else {
                    continue;
                };
                let held = cqs.get(&key).map_or(0, |q| q.max_offset());
                if held == 0 && min > 0 {
                    empty_rebuilt.push((key, floor));
                } else if held < floor {
                    why.push_str(&format!(
                        "; units {held}..{floor} are gone from the log and are given out again"
                    ));
                }
            }
        }
        // deleted topics stay deleted: their queues hide what is below the floor again (a
        // queue's min offset is not kept on disk)
        for (topic, &floor) in &topic_floors {
            Core::apply_floor(&mut cqs, topic, floor)?;
        }
        // A retired queue's directory still there (a crash between the manifest and the
        // deletion) holds nothing past the floor: its deletion is finished now. One that
        // holds units (the topic written again) is a live queue.
        let stale: Vec<(String, i32)> = retired
            .keys()
            .filter(|k| {
                cqs.get(*k)
                    .is_some_and(|q| q.min_offset() == q.max_offset())
            })
            .cloned()
            .collect();
        for key in stale {
            if let Some(q) = cqs.remove(&key) {
                let (d, max) = (q.dir().to_path_buf(), q.max_offset());
                drop(q);
                let _ = remove_queue_dir(&d); // left there, it is retired again at next open
                if let Some(r) = retired.get_mut(&key) {
                    *r = (*r).max(max);
                }
            }
        }
        retired.retain(|k, _| !cqs.contains_key(k));
        for ((topic, qid), q) in &cqs {
            state.raise_next(topic, *qid, q.max_offset() as i64);
        }
        for ((topic, qid), &max) in &retired {
            state.raise_next(topic, *qid, max as i64);
        }
        Core::note_queue_offsets(&log, &quarantine, &mut state, dispatch_start, end)?;
        for ((topic, qid), floor) in empty_rebuilt {
            if state.next_offset(&topic, qid) == 0 {
                state.raise_next(&topic, qid, floor as i64);
            }
        }

        let persisted_confirm = if trusted {
            ckpt.confirm_offset.max(0) as u64
        } else {
            dispatch_start
        };
        let confirm = persisted_confirm.clamp(min, end);
        let confirm_clamped_from = (confirm != persisted_confirm).then_some(persisted_confirm);
        let (notify_r, notify_w) = make_pipe()?;
        let shared = log.shared().clone();
        let stats = StoreStats {
            quarantined: opened_quarantined.len() as u64,
            ..StoreStats::default()
        };
        let core = Arc::new(Core {
            inner: Mutex::new(Inner {
                log,
                cqs,
                state,
                quarantine,
                floors: topic_floors,
                retired,
                tag_checked: HashMap::new(),
                tag_known: HashMap::new(),
                stats,
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
            ckpt_error: Mutex::new(None),
            dispatch_error: Mutex::new(None),
            ckpt_broken: Mutex::new(None),
            announced_min: AtomicU64::new(0),
            ckpt_lock: Mutex::new(()),
            ckpt_file,
            manifest_written: Mutex::new((Vec::new(), None)),
            closed: AtomicBool::new(false),
            root_lock: Mutex::new(Some(root_lock)),
            cfg,
        });
        {
            let mut inner = core.inner()?;
            core.dispatch(&mut inner)?;
        }
        // A full disk must not keep the store from opening: it can then serve reads, refuse
        // writes (ENOSPC), and free space by retention. The checkpoint is retried by the flush
        // thread; until then the files from before this open stay in force.
        let checkpoint_deferred = match core.checkpoint_with(true) {
            Ok(_) => None,
            Err(e) if e.is_no_space() => Some(e.to_string()),
            Err(e) => return Err(e),
        };
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
            quarantine_load,
            quarantined: opened_quarantined,
            healed,
            quarantine_dropped,
            cq_rebuilt,
            cq_rebuilt_units,
            cq_manifest_problem,
            checkpoint_deferred,
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
            if m.topic == TOPIC_DELETED.as_bytes() {
                return Err(StoreError::MessageIllegal(format!(
                    "topic {TOPIC_DELETED} is reserved for the store's topic deletions"
                )));
            }
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
        // Store timestamps do not go backwards when the wall clock steps back a little:
        // search by timestamp relies on them being ordered (next_store_timestamp).
        let ts = next_store_timestamp(now_ms(), inner.last_store_ts);
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

    /// Deletes `topic`'s messages from its consume queues: appends the marker record (see
    /// "Deleted topics" above) and returns its commitlog offset. The queues are emptied when
    /// the marker is dispatched: at once when the confirm offset follows the max offset,
    /// otherwise when the confirm offset passes it (as a message becomes visible). Queue
    /// offsets go on from where they were; the records stay in the commitlog until retention.
    pub fn delete_topic(&self, topic: &str) -> Result<u64> {
        check_topic(topic.as_bytes()).map_err(StoreError::MessageIllegal)?;
        if topic == TOPIC_DELETED {
            return Err(StoreError::MessageIllegal(format!(
                "topic {TOPIC_DELETED} is the store's own"
            )));
        }
        let mut inner = self.core.inner()?;
        let ts = next_store_timestamp(now_ms(), inner.last_store_ts);
        let Inner { log, state, .. } = &mut *inner;
        let marker = MessageIn {
            topic: TOPIC_DELETED.as_bytes(),
            queue_id: 0,
            flag: 0,
            sys_flag: 0,
            body: topic.as_bytes(),
            properties: b"",
            born_timestamp: ts,
            born_host: self.core.cfg.store_host,
            reconsume_times: 0,
            prepared_txn_offset: 0,
        };
        let placed = log.append_batch(std::slice::from_ref(&marker), ts, &mut |_| 0)?;
        let p = placed.first().ok_or_else(|| {
            StoreError::InvalidArgument("the deletion marker was not appended".into())
        })?;
        let phys = p.physical_offset;
        let key = (state.intern(topic), FLOOR_QID);
        state.push(
            key,
            0,
            CqUnit {
                phys_offset: phys,
                size: p.size,
                tag_code: 0,
            },
        );
        state.bound(log.max_offset());
        inner.last_store_ts = ts;
        self.core.dispatch(&mut inner)?;
        Ok(phys)
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
            if u.key.1 != FLOOR_QID {
                state.raise_next(&u.key.0, u.key.1, qo + 1);
            }
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
        let quarantine_edge = inner.quarantine.starting_at(c).is_some()
            || inner
                .quarantine
                .containing(c.saturating_sub(1))
                .is_some_and(|e| e.end() == c);
        if !inner.log.is_boundary(c) && !quarantine_edge {
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

    /// The validated record at `offset`; a quarantined one is an error (`Quarantined`).
    pub fn read_record(&self, offset: u64) -> Result<RecordBuf> {
        let inner = self.core.inner()?;
        if let Some(e) = inner.quarantine.containing(offset) {
            return Err(quarantined_error(e));
        }
        inner.log.read_record(offset)
    }

    /// Whole records from `offset` (see [`CommitLog::read_range`]), stopping before a
    /// quarantined range; starting inside one is an error (`Quarantined`): a replica cannot be
    /// sent bytes this store does not have.
    pub fn read_range(&self, offset: u64, max_bytes: usize, limit: u64) -> Result<RecordBuf> {
        let read = {
            let inner = self.core.inner()?;
            if let Some(e) = inner.quarantine.containing(offset) {
                return Err(quarantined_error(e));
            }
            let limit = match inner.quarantine.starting_in(offset, limit).first() {
                Some(e) => e.offset,
                None => limit,
            };
            inner.log.read_range(offset, max_bytes, limit)
        };
        match read {
            // Damage the HA transfer met first (a segment recovery did not scan; the caller's
            // offset is where the replica's log ends, a record boundary): quarantined like a
            // read or scrub finds it, so the master holds the replica there and repairs it
            // from another, instead of failing every transfer at this offset.
            Err(StoreError::CorruptRecord {
                offset: bad,
                reason,
            }) if bad == offset => {
                self.quarantine_from(offset)?;
                let inner = self.core.inner()?;
                Err(match inner.quarantine.containing(offset) {
                    Some(e) => quarantined_error(e),
                    None => StoreError::CorruptRecord { offset, reason },
                })
            }
            r => r,
        }
    }

    /// Reads up to `max_count` messages / `max_bytes` from a queue starting at `queue_offset`,
    /// like [`Store::read_queue`], but stops before the first unit it would skip: when that is
    /// the first unit, it fails (`Quarantined`, or `CorruptRecord` for a unit that does not
    /// match its record). For callers that do not handle skipped offsets.
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
        let r = read_queue_locked(
            &mut inner,
            topic,
            queue_id,
            queue_offset,
            max_count,
            max_bytes,
            tag_codes,
            true,
            self.core.dispatched.load(Ordering::Acquire),
        )?;
        if let Some(first) = r.skipped.first() {
            if r.records.is_empty() {
                return Err(match inner.quarantine.containing(first.phys_offset) {
                    Some(e) => quarantined_error(e),
                    None => StoreError::CorruptRecord {
                        offset: first.phys_offset,
                        reason: first.reason.clone(),
                    },
                });
            }
        }
        Ok(r)
    }

    /// Reads up to `max_count` messages / `max_bytes` from a queue starting at `queue_offset`.
    /// With `tag_codes`, only units whose tag code is in the list are returned (RocketMQ's
    /// broker-side tag filter: consumers re-check the tag string); skipped units still advance
    /// `next_offset`, and at most `MAX_FILTER_SCAN` units are looked at per call.
    ///
    /// A unit whose record is quarantined is never served: it is skipped and listed in
    /// `skipped` (a record found damaged here is quarantined first). So is a unit that does
    /// not point at its queue's record (consume-queue damage).
    pub fn read_queue(
        &self,
        topic: &str,
        queue_id: i32,
        queue_offset: u64,
        max_count: usize,
        max_bytes: usize,
        tag_codes: Option<&[i64]>,
    ) -> Result<GetResult> {
        let mut inner = self.core.inner()?;
        read_queue_locked(
            &mut inner,
            topic,
            queue_id,
            queue_offset,
            max_count,
            max_bytes,
            tag_codes,
            false,
            self.core.dispatched.load(Ordering::Acquire),
        )
    }

    /// The quarantined ranges, ascending.
    pub fn quarantined(&self) -> Result<Vec<QuarantineEntry>> {
        Ok(self.core.inner()?.quarantine.entries())
    }

    /// Counters since the store was opened, plus the quarantine's size.
    pub fn stats(&self) -> Result<(StoreStats, usize, u64)> {
        let inner = self.core.inner()?;
        Ok((
            inner.stats.clone(),
            inner.quarantine.len(),
            inner.quarantine.total_bytes(),
        ))
    }

    /// Repairs the quarantined range starting at `offset` with `data`, the good bytes of that
    /// range from a replica: whole records (and an end-of-segment filler when the range ends
    /// its segment), each with a valid whole-record CRC and PHYSICALOFFSET equal to its
    /// position, covering exactly the range; when the entry names its record, `data` must be
    /// that one record (same topic, queue id and queue offset). Consume-queue units of the
    /// records must point at them (or be placeholders inside the range, which are rewritten).
    /// The bytes are written in place and synced, then the range leaves the quarantine.
    /// Returns the queue positions made readable again. Nothing changes on a refusal.
    pub fn repair(&self, offset: u64, data: &[u8]) -> Result<Vec<QueueRef>> {
        let mut guard = self.core.inner()?;
        let inner = &mut *guard;
        let Some(entry) = inner.quarantine.starting_at(offset).cloned() else {
            return Err(StoreError::InvalidArgument(format!(
                "no quarantined range starts at {offset}"
            )));
        };
        if data.len() as u64 != entry.size {
            return Err(StoreError::InvalidArgument(format!(
                "the quarantined range at {offset} is {} bytes, got {}",
                entry.size,
                data.len()
            )));
        }
        let seg_end = offset - offset % inner.log.segment_size() + inner.log.segment_size();
        let mut records: Vec<(u64, u32, Option<QueueRef>, i64)> = Vec::new();
        let mut pos = 0usize;
        while pos < data.len() {
            let at = offset + pos as u64;
            let rest = &data[pos..];
            match decode_record_checked(rest, true) {
                Ok(Decoded::Record(r)) => {
                    if r.physical_offset != at as i64 {
                        return Err(StoreError::InvalidArgument(format!(
                            "record at {at} claims physical offset {}",
                            r.physical_offset
                        )));
                    }
                    let qref = if is_dispatchable(r.sys_flag) {
                        let topic = check_topic(r.topic).map_err(StoreError::InvalidArgument)?;
                        Some(QueueRef {
                            topic: topic.to_string(),
                            queue_id: r.queue_id,
                            queue_offset: u64::try_from(r.queue_offset).map_err(|_| {
                                StoreError::InvalidArgument(format!(
                                    "negative queue offset {}",
                                    r.queue_offset
                                ))
                            })?,
                        })
                    } else {
                        None
                    };
                    records.push((at, r.total_size() as u32, qref, tag_code(r.properties)));
                    pos += r.total_size();
                }
                Ok(Decoded::Blank(n)) if offset + data.len() as u64 == seg_end => pos += n,
                Ok(Decoded::Blank(_)) => {
                    return Err(StoreError::InvalidArgument(format!(
                        "a filler at {at} that does not end the segment"
                    )))
                }
                Err(e) => {
                    return Err(StoreError::InvalidArgument(format!(
                        "bytes at {at} are not a valid record: {e}"
                    )))
                }
            }
        }
        if let Some(want) = &entry.record {
            let ok = records.len() == 1 && records[0].2.as_ref() == Some(want);
            if !ok {
                return Err(StoreError::InvalidArgument(format!(
                    "the bytes are not record {}/{}/{} that the consume queue names",
                    want.topic, want.queue_id, want.queue_offset
                )));
            }
        }
        // Plan the consume-queue changes before writing anything.
        let mut rewrites: Vec<((String, i32), u64, CqUnit)> = Vec::new();
        for (at, size, qref, tag) in &records {
            let Some(r) = qref else { continue };
            let key = (r.topic.clone(), r.queue_id);
            let Some(q) = inner.cqs.get(&key) else {
                continue;
            };
            if r.queue_offset < q.min_offset() || r.queue_offset >= q.max_offset() {
                continue; // not dispatched yet (or deleted): nothing to fix
            }
            let u = q.get(r.queue_offset)?;
            let want = CqUnit {
                phys_offset: *at,
                size: *size,
                tag_code: *tag,
            };
            if u == want {
                continue;
            }
            let placeholder = u.phys_offset >= entry.offset && u.phys_offset < entry.end();
            if !placeholder {
                return Err(StoreError::InvalidArgument(format!(
                    "the consume queue puts {}/{}/{} at {} ({} bytes), not at {at} ({size} bytes)",
                    r.topic, r.queue_id, r.queue_offset, u.phys_offset, u.size
                )));
            }
            rewrites.push((key, r.queue_offset, want));
        }
        inner.log.overwrite(offset, data)?;
        for (key, index, unit) in rewrites {
            if let Some(q) = inner.cqs.get_mut(&key) {
                q.rewrite_run(index, &[unit])?;
            }
        }
        inner.quarantine.remove(offset)?;
        inner.stats.repaired += 1;
        Ok(records.into_iter().filter_map(|r| r.2).collect())
    }

    /// Validates the records of the segment holding `offset` from `offset` (a record boundary:
    /// a segment start, the min offset, or the end of a record or quarantined range) to the
    /// segment's end or the max offset, quarantining every damaged record found (as recovery
    /// does below the durable point). The CRC work runs outside the store lock. Returns where
    /// the next call should start and the ranges newly quarantined.
    pub fn scrub(&self, offset: u64) -> Result<(u64, Vec<QuarantineEntry>)> {
        {
            let inner = self.core.inner()?;
            let min = inner.log.min_offset();
            let max = inner.log.max_offset();
            if offset < min || offset > max {
                return Err(StoreError::OffsetOutOfRange {
                    offset,
                    min,
                    max: max + 1,
                });
            }
            let at_edge = inner.quarantine.starting_at(offset).is_some()
                || inner
                    .quarantine
                    .containing(offset.saturating_sub(1))
                    .is_some_and(|e| e.end() == offset);
            if !inner.log.is_sync_point(offset) && !at_edge {
                return Err(StoreError::InvalidArgument(format!(
                    "{offset} is not a record boundary"
                )));
            }
        }
        self.quarantine_from(offset)
    }

    /// Validates from `offset` (taken as a record boundary) to the end of its segment (or the
    /// max offset) and quarantines what is damaged; (where validation ended, new ranges).
    fn quarantine_from(&self, offset: u64) -> Result<(u64, Vec<QuarantineEntry>)> {
        let (segs_end, known) = {
            let inner = self.core.inner()?;
            let max = inner.log.max_offset();
            let seg = inner.log.segment_size();
            (
                (offset - offset % seg + seg).min(max),
                inner.quarantine.ranges(),
            )
        };
        let v = self.core.shared.validate_range(offset, segs_end, &known);
        let mut inner = self.core.inner()?;
        // The log may have been cut meanwhile: keep what is still below its end.
        let max = inner.log.max_offset();
        let bad: Vec<BadRange> = v.bad.into_iter().filter(|b| b.end <= max).collect();
        let entries = entries_for(&bad, &inner.cqs, now_ms())?;
        let added = inner.quarantine.add(entries)?;
        inner.stats.quarantined += added.len() as u64;
        inner.stats.quarantined_at_runtime += added.len() as u64;
        Ok((v.end.max(segs_end.min(max)), added))
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

    /// A queue's min offset; a retired queue (a deleted topic's, emptied and closed) is empty
    /// at the offset it goes on from, as it was before its files went.
    pub fn queue_min_offset(&self, topic: &str, queue_id: i32) -> Result<u64> {
        let retired = self.retired_at(topic, queue_id)?;
        self.with_cq(topic, queue_id, |q, _| Ok(q.min_offset()), retired)
    }
    pub fn queue_max_offset(&self, topic: &str, queue_id: i32) -> Result<u64> {
        let retired = self.retired_at(topic, queue_id)?;
        self.with_cq(topic, queue_id, |q, _| Ok(q.max_offset()), retired)
    }
    fn retired_at(&self, topic: &str, queue_id: i32) -> Result<u64> {
        let inner = self.core.inner()?;
        Ok(inner
            .retired
            .get(&(topic.to_string(), queue_id))
            .copied()
            .unwrap_or(0))
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
                let log_min = log.min_offset();
                Ok(q.search_by_timestamp(ts_ms, &mut |u: &CqUnit| {
                    if u.phys_offset < log_min {
                        return Some(i64::MIN); // gone to retention: older than anything
                    }
                    // None: damaged (quarantined), its time unknown
                    log.with_record(u.phys_offset, |r| r.store_timestamp).ok()
                }))
            },
            0,
        )
    }

    /// Store timestamp of the earliest readable message still in a queue: damaged
    /// (quarantined) records at its head are passed over, up to [`EARLIEST_SCAN`] of them.
    pub fn earliest_store_time(&self, topic: &str, queue_id: i32) -> Result<Option<i64>> {
        self.with_cq(
            topic,
            queue_id,
            |q, log| {
                let (min, max) = (q.min_offset(), q.max_offset());
                let mut first_err = None;
                for off in min..max.min(min.saturating_add(EARLIEST_SCAN)) {
                    let u = q.get(off)?;
                    match log.with_record(u.phys_offset, |r| r.store_timestamp) {
                        Ok(t) => return Ok(Some(t)),
                        Err(e) => {
                            first_err.get_or_insert(e);
                        }
                    }
                }
                match first_err {
                    Some(e) => Err(e),
                    None => Ok(None),
                }
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
            if let Some(e) = inner.quarantine.containing(offset) {
                if e.offset != offset {
                    return Err(StoreError::InvalidArgument(format!(
                        "{offset} is inside the quarantined range [{}, {})",
                        e.offset,
                        e.end()
                    )));
                }
            }
            let known = inner.quarantine.starting_at(offset).is_some();
            inner.log.truncate_to_checked(offset, known)?;
            inner.quarantine.retain(|e| e.end() <= offset)?;
            for q in inner.cqs.values_mut() {
                q.truncate_by_phys_offset(offset)?;
            }
            self.core.confirm.fetch_min(offset, Ordering::AcqRel);
            self.core.dispatched.fetch_min(offset, Ordering::AcqRel);
            let dispatched = self.core.dispatched.load(Ordering::Acquire);
            let Inner {
                log,
                cqs,
                state,
                quarantine,
                retired,
                ..
            } = &mut *inner;
            state.truncate(offset);
            state.clear_next();
            for ((topic, qid), q) in cqs.iter() {
                state.raise_next(topic, *qid, q.max_offset() as i64);
            }
            for ((topic, qid), &max) in retired.iter() {
                state.raise_next(topic, *qid, max as i64);
            }
            Core::note_queue_offsets(log, quarantine, state, dispatched, offset)?;
            self.core.dispatch(&mut inner)?;
        }
        self.core.checkpoint_with(true)?;
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

    /// Why consume-queue units are held back for lack of disk space, until a dispatch
    /// completes (the flush thread retries every round).
    pub fn dispatch_error(&self) -> Option<String> {
        lock(&self.core.dispatch_error).clone()
    }

    /// Why the last checkpoint could not be written for lack of disk space, until one is.
    pub fn checkpoint_error(&self) -> Option<String> {
        lock(&self.core.ckpt_error).clone()
    }

    pub fn checkpoint(&self) -> Result<Checkpoint> {
        self.core.checkpoint_with(true)
    }

    /// Retention (RocketMQ's `deleteExpiredFile`): deletes, oldest first, commitlog segments
    /// last written before `older_than` (any age with `clean_immediately`: the disk is too
    /// full), at most `max_files`, only wholly below min(flushed, dispatched) and never the last
    /// one; consume-queue files wholly below the new min offset follow, queue min offsets move
    /// and quarantined ranges in deleted segments are dropped. Files are unlinked after the
    /// store lock is released.
    pub fn delete_expired(
        &self,
        older_than: SystemTime,
        clean_immediately: bool,
        max_files: usize,
    ) -> Result<RetentionResult> {
        self.delete_expired_keeping(older_than, clean_immediately, max_files, u64::MAX)
    }

    /// `delete_expired` that also keeps every segment not wholly below `keep_from` (what
    /// replication still needs: a lagging slave's position, the HA master's start offset).
    pub fn delete_expired_keeping(
        &self,
        older_than: SystemTime,
        clean_immediately: bool,
        max_files: usize,
        keep_from: u64,
    ) -> Result<RetentionResult> {
        let (detached, queues) = {
            let mut inner = self.core.inner()?;
            let limit = self.retention_limit().min(keep_from);
            let d = inner
                .log
                .delete_expired(older_than, limit, clean_immediately, max_files)?;
            let q = self.after_retention(&mut inner, &d);
            (d, q)
        };
        // The segments are detached from the log: their files go even when a queue could not
        // follow (they would otherwise stay on disk, unreachable, until a restart).
        let done = self.finish_retention(detached)?;
        queues.map(|()| done)
    }

    /// Deletes whole segments that end at or below `offset` (bounded like `delete_expired`).
    pub fn delete_segments_before(&self, offset: u64) -> Result<RetentionResult> {
        let (detached, queues) = {
            let mut inner = self.core.inner()?;
            let d = inner
                .log
                .delete_segments_before(offset.min(self.retention_limit()));
            let q = self.after_retention(&mut inner, &d);
            (d, q)
        };
        let done = self.finish_retention(detached)?;
        queues.map(|()| done)
    }

    fn after_retention(
        &self,
        inner: &mut Inner,
        detached: &[Arc<crate::commitlog::Segment>],
    ) -> Result<()> {
        if detached.is_empty() {
            return Ok(());
        }
        let min = inner.log.min_offset();
        inner.stats.retention_segments += detached.len() as u64;
        inner.stats.retention_bytes += detached.iter().map(|s| s.size).sum::<u64>();
        // every queue follows, whatever one of them (or the quarantine list) fails with: the
        // first error is returned once all were tried
        let mut first: Option<StoreError> = None;
        for q in inner.cqs.values_mut() {
            if let Err(e) = q.delete_before_phys(min) {
                first.get_or_insert(e);
            }
        }
        if let Err(e) = inner.quarantine.retain(|e| e.offset >= min) {
            first.get_or_insert(e);
        }
        first.map_or(Ok(()), Err)
    }

    fn finish_retention(
        &self,
        detached: Vec<Arc<crate::commitlog::Segment>>,
    ) -> Result<RetentionResult> {
        let bytes = detached.iter().map(|s| s.size).sum();
        if !detached.is_empty() {
            // The new min offset is durable before the files go: a head segment missing on
            // the next open is then known not to be retention's. Written in place, under the
            // checkpoint writers' lock: it must work on a full disk and after a failed sync
            // stopped full checkpoints.
            let _one_at_a_time = lock(&self.core.ckpt_lock);
            self.core.ckpt_file.raise_min_in_place(self.min_offset())?;
        }
        let dir = self.core.cfg.root.join("commitlog");
        let deleted = unlink_segments(&dir, &detached)?;
        Ok(RetentionResult {
            deleted,
            bytes,
            min_offset: self.min_offset(),
        })
    }

    /// Retention never deletes what is not yet flushed or dispatched.
    fn retention_limit(&self) -> u64 {
        self.core
            .shared
            .flushed_offset()
            .min(self.core.dispatched.load(Ordering::Acquire))
    }

    /// Starts an EMPTY store at `offset`, a segment boundary: its min and max offsets become
    /// `offset` (a slave with syncFromLastFile joining a master whose log starts later). Empty
    /// consume queues are cleared, the checkpoint is rewritten.
    pub fn start_at(&self, offset: u64) -> Result<()> {
        // The new min offset reaches the checkpoint before the files move: a crash between
        // leaves an old, empty head, which the next open accepts (a head segment missing
        // below the checkpoint's min would be refused).
        self.core.inner()?.log.check_start_at(offset)?;
        let before = self.core.announced_min.fetch_max(offset, Ordering::AcqRel);
        let moved = self.core.checkpoint_with(true).and_then(|_| {
            let mut guard = self.core.inner()?;
            guard.log.start_at(offset)
        });
        if let Err(e) = moved {
            self.core.announced_min.store(before, Ordering::Release);
            return Err(e);
        }
        {
            let mut guard = self.core.inner()?;
            let inner = &mut *guard;
            for q in inner.cqs.values_mut() {
                q.clear()?;
            }
            inner.quarantine.retain(|_| false)?;
            inner.state = DispatchState::new(offset);
            self.core.dispatched.store(offset, Ordering::Release);
            self.core.confirm.store(offset, Ordering::Release);
        }
        self.core.checkpoint_with(true)?;
        Ok(())
    }

    /// Topics and queue ids that have consume queues.
    pub fn queues(&self) -> Result<Vec<(String, i32)>> {
        let inner = self.core.inner()?;
        // a deleted topic's queues are kept (their max offset goes on) but not listed while
        // they hold nothing: a deleted topic is not adopted back from the log
        let mut v: Vec<(String, i32)> = inner
            .cqs
            .iter()
            .filter(|((t, _), q)| {
                !inner.floors.contains_key(t.as_str()) || q.min_offset() < q.max_offset()
            })
            .map(|(k, _)| k.clone())
            .collect();
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
        let ckpt = self.core.checkpoint_with(true);
        lock(&self.core.inner).closed = true;
        self.core.notify();
        // nothing writes any more: another store may open the directory
        drop(lock(&self.core.root_lock).take());
        flushed?;
        match ckpt {
            // the disk is full: the previous checkpoint stays in force, as after a crash now
            Err(e) if e.is_no_space() => Ok(()),
            r => r.map(|_| ()),
        }
    }

    /// Lets go of the store as a crash would (for tests): no flush, no checkpoint, nothing
    /// written any more; the directory's lock is released so it can be opened again.
    #[doc(hidden)]
    pub fn abandon(self) {
        lock(&self.core.inner).closed = true;
        drop(lock(&self.core.root_lock).take());
        std::mem::forget(self);
    }

    pub fn is_closed(&self) -> bool {
        self.core.closed.load(Ordering::Acquire)
    }
}

fn quarantined_error(e: &QuarantineEntry) -> StoreError {
    StoreError::Quarantined {
        offset: e.offset,
        size: e.size,
        reason: e.reason.clone(),
    }
}

/// The body of [`Store::read_queue`]; `stop_at_skip` ends the read at the first skipped unit
/// (for [`Store::get_messages`]).
#[allow(clippy::too_many_arguments)]
fn read_queue_locked(
    inner: &mut Inner,
    topic: &str,
    queue_id: i32,
    queue_offset: u64,
    max_count: usize,
    max_bytes: usize,
    tag_codes: Option<&[i64]>,
    stop_at_skip: bool,
    dispatched: u64,
) -> Result<GetResult> {
    let key = (topic.to_string(), queue_id);
    let Some(q) = inner.cqs.get(&key) else {
        return Ok(GetResult {
            records: Vec::new(),
            next_offset: 0,
            min_offset: 0,
            max_offset: 0,
            skipped: Vec::new(),
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
    let mut skipped = Vec::new();
    let mut bytes = 0usize;
    let mut next = queue_offset;
    let mut scanned = 0usize;
    // The last position whose damaged unit was relocated, and the positions below which a
    // relocation already failed in this call (not tried again for each of them).
    let mut relocated_at: Option<u64> = None;
    let mut no_relocation_below = 0u64;
    // The queue's tag-check caches, taken out for the call (one map lookup, not one per unit;
    // an error part-way drops them, and the units are checked again later).
    let (mut checked, mut known) = if tag_codes.is_some() {
        (
            inner.tag_checked.remove(&key).unwrap_or_default(),
            inner.tag_known.remove(&key).unwrap_or_default(),
        )
    } else {
        Default::default()
    };
    'scan: while next < max && records.len() < max_count && scanned < MAX_FILTER_SCAN {
        let chunk = if tag_codes.is_some() { 256 } else { max_count };
        let units = match inner.cqs.get(&key) {
            Some(q) => q.get_range_lenient(next, chunk.min(max_count.max(1) * 4).max(1))?,
            None => break,
        };
        if units.is_empty() {
            break;
        }
        for (u, shape) in units {
            if records.len() >= max_count {
                break 'scan;
            }
            scanned += 1;
            let mut u = u;
            // A unit no dispatch writes (consume-queue damage while running) is skipped, and
            // its records looked for between the nearest good units, as for a unit that names
            // no record of its queue. Before, the whole read failed, on every pull from below
            // it until a restart rebuilt the queue (storage probe).
            let shape_skip = shape.map(|why| {
                inner.stats.cq_mismatches += 1;
                SkippedUnit {
                    queue_offset: next,
                    phys_offset: u.phys_offset,
                    size: u64::from(u.size),
                    reason: format!("damaged consume-queue unit: {why}"),
                }
            });
            if shape_skip.is_none() && u.phys_offset < inner.log.min_offset() {
                next += 1; // retention: skip
                continue;
            }
            if let Some(tags) = tag_codes.filter(|_| shape_skip.is_none()) {
                if !tags.contains(&u.tag_code) {
                    // A filtered-out unit is checked against its record, so a damaged tag code
                    // cannot hide the message from this filter for good: once per position per
                    // open (checked ranges), and never at the cost of disk I/O for a code the
                    // queue's checked units already showed to be a real tag (a record not in
                    // the page cache; a random flip is not another tag's code), so a
                    // catching-up reader of cold data reads the log only for unknown codes.
                    let trusted = checked.contains(next)
                        || (known.contains(u.tag_code)
                            && !inner.log.is_resident(u.phys_offset, u.size));
                    let filtered = trusted
                        || match check_unit_tag(inner, &key, next, &u)? {
                            TagCheck::Right => {
                                known.add(u.tag_code);
                                true
                            }
                            TagCheck::Repaired(code) => {
                                u.tag_code = code;
                                known.add(code);
                                !tags.contains(&code)
                            }
                            TagCheck::NotItsRecord => false, // judged below, as served units are
                        };
                    if filtered {
                        next += 1;
                        continue;
                    }
                }
            }
            let skip = match inner.quarantine.containing(u.phys_offset) {
                _ if shape_skip.is_some() => shape_skip,
                Some(e) => Some(skipped_for(next, e)),
                None => match inner.log.read_record(u.phys_offset) {
                    Ok(r) => match record_mismatch(&key, next, &u, &r) {
                        None => {
                            // a tag-filtered read checks the tag code of a unit it serves too
                            // (a hash of the record's TAGS), so its checked range holds no
                            // wrong code; the right code becomes known
                            let fixed_code = if tag_codes.is_some() {
                                let f = wrong_tag_code(&u, &r);
                                known.add(f.unwrap_or(u.tag_code));
                                f
                            } else {
                                None
                            };
                            if let Some(code) = fixed_code {
                                rewrite_tag_code(inner, &key, next, &u, code)?;
                                if tag_codes.is_some_and(|t| !t.contains(&code)) {
                                    next += 1;
                                    continue;
                                }
                            }
                            if !records.is_empty() && bytes + r.len() > max_bytes {
                                break 'scan;
                            }
                            bytes += r.len();
                            records.push(r);
                            next += 1;
                            continue;
                        }
                        Some(reason) => {
                            inner.stats.cq_mismatches += 1;
                            Some(SkippedUnit {
                                queue_offset: next,
                                phys_offset: u.phys_offset,
                                size: u64::from(u.size),
                                reason,
                            })
                        }
                    },
                    Err(StoreError::CorruptRecord { reason, .. }) => {
                        Some(detect_damage(inner, &key, next, &u, &reason)?)
                    }
                    Err(e) => return Err(e),
                },
            };
            if let Some(sk) = skip {
                // A unit that names no record of its queue (the log is fine there): look for
                // the right records between the nearest good units and rewrite the units.
                if !sk.reason.starts_with("quarantined")
                    && relocated_at != Some(next)
                    && next >= no_relocation_below
                {
                    match relocate_units(inner, &key, next, dispatched)? {
                        Ok(()) => {
                            relocated_at = Some(next);
                            scanned -= 1;
                            continue 'scan;
                        }
                        Err(until) => no_relocation_below = until,
                    }
                }
                if stop_at_skip {
                    if records.is_empty() {
                        skipped.push(sk);
                    }
                    break 'scan;
                }
                if sk.reason.starts_with("quarantined") {
                    inner.stats.skipped_reads += 1;
                }
                skipped.push(sk);
                next += 1;
            }
        }
    }
    if tag_codes.is_some() {
        // every unit in [queue_offset, next) was served (its code checked), filtered after a
        // check or as a known tag in cold data, or judged damaged
        checked.add(queue_offset, next);
        inner.tag_checked.insert(key.clone(), checked);
        inner.tag_known.insert(key, known);
    }
    Ok(GetResult {
        records,
        next_offset: next,
        min_offset: min,
        max_offset: max,
        skipped,
    })
}

/// The right tag code of a served record when its unit `u` carries another one.
fn wrong_tag_code(u: &CqUnit, r: &RecordBuf) -> Option<i64> {
    match decode_record_structure(r.as_slice()) {
        Ok(Decoded::Record(v)) => {
            let code = tag_code(v.properties);
            (code != u.tag_code).then_some(code)
        }
        _ => None,
    }
}

fn skipped_for(index: u64, e: &QuarantineEntry) -> SkippedUnit {
    SkippedUnit {
        queue_offset: index,
        phys_offset: e.offset,
        size: e.size,
        reason: format!("quarantined: {}", e.reason),
    }
}

/// How far a damaged consume-queue unit's record is looked for: units around it, and bytes of
/// commitlog between the good units that bound the search.
const RELOCATE_UNITS: u64 = 64;
const RELOCATE_BYTES: u64 = 32 * 1024 * 1024;

/// Whether the unit at `index` of `key` points at that queue's record (read, not quarantined).
fn unit_good(inner: &Inner, key: &(String, i32), index: u64) -> Result<Option<CqUnit>> {
    let Some(q) = inner.cqs.get(key) else {
        return Ok(None);
    };
    let u = match q.get(index) {
        Ok(u) => u,
        Err(StoreError::CorruptRecord { .. }) => return Ok(None), // a unit of impossible shape
        Err(e) => return Err(e),
    };
    if u.phys_offset < inner.log.min_offset()
        || inner.quarantine.containing(u.phys_offset).is_some()
    {
        return Ok(None);
    }
    Ok(match inner.log.read_record(u.phys_offset) {
        Ok(r) => record_mismatch(key, index, &u, &r).is_none().then_some(u),
        Err(_) => None,
    })
}

/// The unit at `index` of `key` names no record of its queue (consume-queue damage: a record
/// of another queue, or no record boundary). Finds the nearest good units around it (within
/// [`RELOCATE_UNITS`]; past the last unit, the dispatch point `dispatched`), scans the valid
/// records between them (at most [`RELOCATE_BYTES`]) for this queue's records at those
/// positions and, when every position in between has its record, rewrites those units.
/// `Ok(Err(until))`: it did not, and no position below `until` would fare better.
fn relocate_units(
    inner: &mut Inner,
    key: &(String, i32),
    index: u64,
    dispatched: u64,
) -> Result<std::result::Result<(), u64>> {
    let give_up = Err(index + 1);
    let Some(q) = inner.cqs.get(key) else {
        return Ok(give_up);
    };
    let (min, max) = (q.min_offset(), q.max_offset());
    // The good unit below (the run starts after it); the queue's first unit has none.
    let mut lo = None;
    let mut j = index;
    while j > min && index - j < RELOCATE_UNITS {
        j -= 1;
        if let Some(u) = unit_good(inner, key, j)? {
            lo = Some((j + 1, u.phys_offset + u64::from(u.size)));
            break;
        }
    }
    let Some((from, lo_phys)) = lo else {
        return Ok(give_up);
    };
    let mut hi = None;
    let mut j = index + 1;
    while j < max && j - index <= RELOCATE_UNITS {
        if let Some(u) = unit_good(inner, key, j)? {
            hi = Some((j, u.phys_offset));
            break;
        }
        j += 1;
    }
    let (to, hi_phys) = match hi {
        Some(h) => h,
        None if j >= max => (max, dispatched.min(inner.log.max_offset())),
        None => return Ok(give_up), // a later position may reach a good unit further on
    };
    let fail = Err(to);
    if hi_phys <= lo_phys || hi_phys - lo_phys > RELOCATE_BYTES {
        return Ok(fail);
    }
    let mut found: Vec<Option<CqUnit>> = vec![None; (to - from) as usize];
    let scan = scan_around(
        &inner.log,
        &inner.quarantine,
        lo_phys,
        hi_phys,
        true,
        &mut |item| {
            if let Item::Record(o, r) = item {
                let qo = u64::try_from(r.queue_offset).unwrap_or(u64::MAX);
                if r.topic == key.0.as_bytes()
                    && r.queue_id == key.1
                    && (from..to).contains(&qo)
                    && is_dispatchable(r.sys_flag)
                {
                    found[(qo - from) as usize] = Some(CqUnit {
                        phys_offset: o,
                        size: r.total_size() as u32,
                        tag_code: tag_code(r.properties),
                    });
                }
            }
            Ok(())
        },
    );
    if scan.is_err() {
        return Ok(fail); // damaged bytes in between: the scrub or a read quarantines them
    }
    let Some(units) = found.into_iter().collect::<Option<Vec<CqUnit>>>() else {
        return Ok(fail);
    };
    let Some(q) = inner.cqs.get_mut(key) else {
        return Ok(fail);
    };
    match q.rewrite_run(from, &units) {
        Ok(()) => {}
        Err(StoreError::InvalidArgument(_)) => return Ok(fail), // out of order: leave them
        Err(e) => return Err(e),
    }
    inner.stats.cq_units_repaired += units.len() as u64;
    Ok(Ok(()))
}

/// Why a valid record does not belong at queue position `index` (None: it does).
fn record_mismatch(key: &(String, i32), index: u64, u: &CqUnit, r: &RecordBuf) -> Option<String> {
    if r.len() != u.size as usize {
        return Some(format!(
            "consume queue says {} bytes, the record at {} has {}",
            u.size,
            u.phys_offset,
            r.len()
        ));
    }
    // The bytes were validated by the read: only the fields are needed.
    let (topic_ok, qid, qo) = match decode_record_structure(r.as_slice()) {
        Ok(Decoded::Record(v)) => (v.topic == key.0.as_bytes(), v.queue_id, v.queue_offset),
        _ => return None,
    };
    (!(topic_ok && qid == key.1 && qo == index as i64)).then(|| {
        format!(
            "consume queue unit {index} points at a record of another queue (queue id {qid}, \
             queue offset {qo}) at {}",
            u.phys_offset
        )
    })
}

/// Ranges `[from, to)` of queue positions whose units' tag codes were judged, at most
/// [`TagChecked::MAX`] of them (consumer groups reading at different places), merged when
/// they touch; when there are more, the lowest (the oldest data) is forgotten.
#[derive(Default)]
struct TagChecked(Vec<(u64, u64)>);

impl TagChecked {
    const MAX: usize = 8;

    fn contains(&self, index: u64) -> bool {
        self.0.iter().any(|&(a, b)| (a..b).contains(&index))
    }

    fn add(&mut self, from: u64, to: u64) {
        if from >= to {
            return;
        }
        let (mut a, mut b) = (from, to);
        self.0.retain(|&(x, y)| {
            let touches = x <= b && a <= y;
            if touches {
                a = a.min(x);
                b = b.max(y);
            }
            !touches
        });
        let at = self.0.partition_point(|&(x, _)| x < a);
        self.0.insert(at, (a, b));
        if self.0.len() > Self::MAX {
            self.0.remove(0);
        }
    }
}

/// Tag codes of a queue found right in units checked against their records, at most
/// [`KnownTags::MAX`] (a queue with more distinct tags has the rest checked on every read that
/// filters them out: correct, at the cost of a log read per unit).
#[derive(Default)]
struct KnownTags(std::collections::HashSet<i64>);

impl KnownTags {
    const MAX: usize = 1024;

    fn contains(&self, code: i64) -> bool {
        self.0.contains(&code)
    }

    fn add(&mut self, code: i64) {
        if self.0.len() < Self::MAX {
            self.0.insert(code);
        }
    }
}

/// What the record of unit `u` (queue position `index`) says about the unit's tag code.
enum TagCheck {
    /// The record is this queue's at `index` and its TAGS hash is the unit's code.
    Right,
    /// It is, but the code was wrong: the unit was rewritten with this one.
    Repaired(i64),
    /// The unit does not point at this queue's record at `index` (or it cannot be read): the
    /// unit is judged by the read path, as any damaged unit.
    NotItsRecord,
}

/// Checks the tag code of unit `u` against its record (structure only, no CRC: the read path
/// validates what it serves) and rewrites the unit when the code is wrong.
fn check_unit_tag(
    inner: &mut Inner,
    key: &(String, i32),
    index: u64,
    u: &CqUnit,
) -> Result<TagCheck> {
    if inner.quarantine.containing(u.phys_offset).is_some() {
        return Ok(TagCheck::NotItsRecord);
    }
    let seen = inner.log.with_record_structure(u.phys_offset, |r| {
        let its = r.topic == key.0.as_bytes()
            && r.queue_id == key.1
            && r.queue_offset == index as i64
            && r.total_size() == u.size as usize;
        its.then(|| tag_code(r.properties))
    });
    let code = match seen {
        Ok(Some(code)) => code,
        Ok(None)
        | Err(StoreError::CorruptRecord { .. })
        | Err(StoreError::OffsetOutOfRange { .. }) => return Ok(TagCheck::NotItsRecord),
        Err(e) => return Err(e),
    };
    if code == u.tag_code {
        return Ok(TagCheck::Right);
    }
    Ok(if rewrite_tag_code(inner, key, index, u, code)? {
        TagCheck::Repaired(code)
    } else {
        TagCheck::NotItsRecord
    })
}

/// Rewrites unit `u` at `index` of `key` with the right tag `code` (durably) and counts it;
/// false when the queue refuses the rewrite (the unit no longer fits there).
fn rewrite_tag_code(
    inner: &mut Inner,
    key: &(String, i32),
    index: u64,
    u: &CqUnit,
    code: i64,
) -> Result<bool> {
    let fixed = CqUnit {
        tag_code: code,
        ..*u
    };
    let Some(q) = inner.cqs.get_mut(key) else {
        return Ok(false);
    };
    match q.rewrite_run(index, std::slice::from_ref(&fixed)) {
        Ok(()) => {}
        Err(StoreError::InvalidArgument(_)) => return Ok(false),
        Err(e) => return Err(e),
    }
    inner.stats.cq_tag_codes_repaired += 1;
    Ok(true)
}

/// A read found the record of unit `u` (queue position `index`) damaged: quarantine it (see
/// [`quarantine_for_unit`]) and count it. Returns what the read reports for the unit.
fn detect_damage(
    inner: &mut Inner,
    key: &(String, i32),
    index: u64,
    u: &CqUnit,
    reason: &str,
) -> Result<SkippedUnit> {
    let added = quarantine_for_unit(
        &inner.log,
        &mut inner.quarantine,
        &inner.cqs,
        key,
        index,
        u,
        reason,
    )?;
    inner.stats.quarantined += added.len() as u64;
    inner.stats.quarantined_at_runtime += added.len() as u64;
    Ok(match inner.quarantine.containing(u.phys_offset) {
        Some(e) => skipped_for(index, e),
        None => {
            inner.stats.cq_mismatches += 1;
            SkippedUnit {
                queue_offset: index,
                phys_offset: u.phys_offset,
                size: u64::from(u.size),
                reason: format!("consume queue unit {index} points at no valid record ({reason})"),
            }
        }
    })
}

/// The record of unit `u` (queue position `index` of `key`) failed validation: quarantine the
/// damaged bytes. When the record's header still says it sits here with the unit's size and
/// a sync point follows, the range is exactly the unit's (and names it); otherwise the segment
/// is validated from its start to find the damaged ranges exactly. Afterwards the unit's
/// offset is inside a quarantined range, unless the unit points at no record boundary at all
/// (consume-queue damage). Returns the entries added.
fn quarantine_for_unit(
    log: &CommitLog,
    quarantine: &mut Quarantine,
    cqs: &HashMap<(String, i32), ConsumeQueue>,
    key: &(String, i32),
    index: u64,
    u: &CqUnit,
    reason: &str,
) -> Result<Vec<QuarantineEntry>> {
    let end = u.phys_offset + u64::from(u.size);
    let header_ok = log
        .raw_header(u.phys_offset)
        .is_some_and(|(size, magic, phys)| {
            (magic == MAGIC_V1 || magic == MAGIC_V2)
                && size == i64::from(u.size)
                && phys == u.phys_offset as i64
        });
    let end_ok = log.is_sync_point(end) || quarantine.starting_at(end).is_some();
    let now = now_ms();
    if header_ok && end_ok {
        return quarantine.add(vec![QuarantineEntry {
            offset: u.phys_offset,
            size: u64::from(u.size),
            detected_ms: now,
            reason: reason.to_string(),
            record: Some(QueueRef {
                topic: key.0.clone(),
                queue_id: key.1,
                queue_offset: index,
            }),
        }]);
    }
    let seg = log.segment_size();
    let from = (u.phys_offset - u.phys_offset % seg).max(log.min_offset());
    let to = (from - from % seg + seg).min(log.max_offset());
    let v = log.validate_range(from, to, &quarantine.ranges());
    let entries = entries_for(&v.bad, cqs, now)?;
    quarantine.add(entries)
}

/// An item of [`scan_around`]: a valid record, or a quarantined range.
enum Item<'a, 'b> {
    Record(u64, &'a RecordView<'b>),
    Quarantined(&'a QuarantineEntry),
}

/// Scans `[from, to)` like [`CommitLog::scan`], stepping over quarantined ranges (handed to
/// `f` as such) instead of reading them.
fn scan_around(
    log: &CommitLog,
    quarantine: &Quarantine,
    from: u64,
    to: u64,
    verify: bool,
    f: &mut dyn FnMut(Item<'_, '_>) -> Result<()>,
) -> Result<()> {
    let mut off = from;
    if let Some(e) = quarantine.containing(off) {
        if e.offset < off {
            off = e.end();
        }
    }
    for e in quarantine.starting_in(off, to) {
        if e.offset > off {
            log.scan(off, e.offset, verify, &mut |o, r| f(Item::Record(o, r)))?;
        }
        f(Item::Quarantined(&e))?;
        off = off.max(e.end());
    }
    if off < to {
        log.scan(off, to, verify, &mut |o, r| f(Item::Record(o, r)))?;
    }
    Ok(())
}

/// Quarantine entries for damaged ranges, split where consume-queue units say records were:
/// each unit that fits inside a range becomes an entry naming its record; the bytes between
/// them become entries of unknown records.
fn entries_for(
    bad: &[BadRange],
    cqs: &HashMap<(String, i32), ConsumeQueue>,
    now: i64,
) -> Result<Vec<QuarantineEntry>> {
    let mut out = Vec::new();
    for r in bad {
        let mut units: Vec<(u64, u32, QueueRef)> = Vec::new();
        for ((topic, qid), q) in cqs {
            for (index, u) in q.units_in_phys_range(r.offset, r.end)? {
                units.push((
                    u.phys_offset,
                    u.size,
                    QueueRef {
                        topic: topic.clone(),
                        queue_id: *qid,
                        queue_offset: index,
                    },
                ));
            }
        }
        units.sort_by_key(|u| u.0);
        let mut cursor = r.offset;
        let mut push = |offset: u64, size: u64, record: Option<QueueRef>| {
            out.push(QuarantineEntry {
                offset,
                size,
                detected_ms: now,
                reason: r.reason.clone(),
                record,
            });
        };
        for (phys, size, rec) in units {
            let end = phys + u64::from(size);
            if phys < cursor || end > r.end {
                continue; // does not tile the range: not a record boundary we can trust
            }
            if phys > cursor {
                push(cursor, phys - cursor, None);
            }
            push(phys, u64::from(size), Some(rec));
            cursor = end;
        }
        if cursor < r.end {
            push(cursor, r.end - cursor, None);
        }
    }
    Ok(out)
}

/// Why the unit at `index` of queue `key` does not point at that queue's record (None: it
/// does). A record that fails validation there is the log's damage, not the queue's: it is
/// quarantined (entries added to `found`) and the unit counts as fine.
fn unit_mismatch(
    log: &CommitLog,
    quarantine: &mut Quarantine,
    cqs: &HashMap<(String, i32), ConsumeQueue>,
    key: &(String, i32),
    index: u64,
    u: &CqUnit,
    found: &mut Vec<QuarantineEntry>,
) -> Result<Option<String>> {
    if u.phys_offset < log.min_offset() {
        return Ok(None); // deleted by retention
    }
    if u.phys_offset + u64::from(u.size) > log.max_offset() {
        return Ok(Some(format!(
            "unit {index} points past the end of the log ({} + {} > {})",
            u.phys_offset,
            u.size,
            log.max_offset()
        )));
    }
    if let Some(e) = quarantine.containing(u.phys_offset) {
        return Ok(match &e.record {
            Some(r)
                if e.offset == u.phys_offset
                    && (r.topic != key.0 || r.queue_id != key.1 || r.queue_offset != index) =>
            {
                Some(format!(
                    "unit {index} points at quarantined record {}/{}/{}",
                    r.topic, r.queue_id, r.queue_offset
                ))
            }
            _ => None,
        });
    }
    match log.read_record(u.phys_offset) {
        Ok(r) => Ok(record_mismatch(key, index, u, &r)),
        Err(StoreError::CorruptRecord { reason, .. }) => {
            found.extend(quarantine_for_unit(
                log, quarantine, cqs, key, index, u, &reason,
            )?);
            Ok(quarantine.containing(u.phys_offset).is_none().then(|| {
                format!(
                    "unit {index} points at no record (physical offset {}): {reason}",
                    u.phys_offset
                )
            }))
        }
        Err(e) => Err(e),
    }
}

/// Deletes the consume-queue files (20-digit names) of a queue directory.
/// Deletes a retired queue's directory (and its topic's, once empty), durably.
fn remove_queue_dir(dir: &Path) -> Result<()> {
    wipe_queue_dir(dir)?;
    std::fs::remove_dir(dir).at(dir)?;
    if let Some(topic_dir) = dir.parent() {
        // another queue of the topic may still be there: then the topic directory stays
        if std::fs::remove_dir(topic_dir).is_ok() {
            if let Some(root) = topic_dir.parent() {
                crate::fsutil::sync_dir(root)?;
            }
        } else {
            crate::fsutil::sync_dir(topic_dir)?;
        }
    }
    Ok(())
}

fn wipe_queue_dir(dir: &Path) -> Result<()> {
    for e in std::fs::read_dir(dir).at(dir)? {
        let e = e.at(dir)?;
        let name = e.file_name();
        let is_file = name
            .to_str()
            .is_some_and(|n| n.len() == 20 && n.bytes().all(|b| b.is_ascii_digit()));
        if is_file {
            std::fs::remove_file(e.path()).at(&e.path())?;
        }
    }
    crate::fsutil::sync_dir(dir)
}

impl Drop for Store {
    fn drop(&mut self) {
        let _ = self.close();
    }
}

#[cfg(test)]
mod clock_tests {
    use super::{next_store_timestamp, MAX_CLOCK_HOLD_MS};

    #[test]
    fn a_small_step_back_keeps_store_times_ordered() {
        assert_eq!(next_store_timestamp(1_000_000, 999_000), 1_000_000);
        assert_eq!(next_store_timestamp(1_000_000, 1_002_000), 1_002_000);
        let edge = 1_000_000 + MAX_CLOCK_HOLD_MS;
        assert_eq!(next_store_timestamp(1_000_000, edge), edge);
    }

    #[test]
    fn a_large_step_back_follows_the_wall_clock() {
        let two_hours = 7_200_000;
        assert_eq!(
            next_store_timestamp(1_000_000, 1_000_000 + two_hours),
            1_000_000
        );
        let past_edge = 1_000_000 + MAX_CLOCK_HOLD_MS + 1;
        assert_eq!(next_store_timestamp(1_000_000, past_edge), 1_000_000);
    }
}
