//! The commitlog: RocketMQ stored-message records in fixed-size segment files.
//!
//! # I/O choice
//! Segments are created at their full size as sparse files (`set_len`), written with `pwrite`
//! (one positioned write per segment touched by a batch) and read through a read-only shared
//! mapping of the whole segment. Reads are therefore zero-copy ([`RecordBuf`] keeps the mapping
//! alive) and a mapping never covers bytes past the end of its file, so no reader can fault even
//! after a truncation: truncated bytes read back as zeros. Writing through the page cache with
//! `pwrite` costs one syscall per batch instead of a page fault per 4 KiB page of a writable
//! mapping, and an I/O error comes back as an `Err` instead of a SIGBUS. docs/PERF.md records the
//! measurement behind this choice.
//!
//! # Durability rules
//! * Every segment ends with a BLANK filler (a record never fits exactly, RocketMQ's rule: a
//!   record needs 8 spare bytes or the segment is closed).
//! * Recovery validates every record (magic, sizes, CRCs, PHYSICALOFFSET == position) from a
//!   start point forward. A bad record below the *durable point* (the flushed offset of a trusted
//!   checkpoint: bytes that were fsynced, so a bad one is damage, not a torn write) is skipped
//!   when a *sync point* follows it (a valid record whose PHYSICALOFFSET equals its position, or
//!   an end-of-segment filler): its byte range is reported for quarantine and validation goes on.
//!   Without a trusted checkpoint (no durable point known) every bad record that a sync point
//!   follows is skipped the same way: a valid record after it shows it is not a torn tail.
//!   A bad record below the durable point that nothing valid follows is damage to the newest
//!   record when it is one whole record ending exactly at the durable point (the log's end when
//!   the checkpoint was written): the durable point is its sync point. Any other bad record at
//!   or past the durable point, or one that nothing valid follows, is a torn tail: the rest of
//!   that segment is zeroed and later segments are deleted, durably, before the store is used.
//!   Non-zero bytes after the valid end are cut too, so an old record can never be resurrected
//!   behind new appends.
//! * [`CommitLog::truncate_to`] is crash-safe (RocketMQ #10666): later segments are deleted and
//!   the tail is zeroed and synced before it returns.

use std::fs::{self, File, OpenOptions};
use std::net::SocketAddr;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use memmap2::{Mmap, MmapOptions};
use rmq_wire::message::{
    decode_record_checked, decode_record_structure, encode_blank, encode_record_with_crc,
    encoded_len_with_crc, peek_header, DecodeError, Decoded, MessageIn, RecordView, StoreStamp,
    BLANK_HEADER_LEN, BLANK_MAGIC, MAGIC_V1, MAGIC_V2, OFF_PHYSICAL_OFFSET,
};

use crate::error::{IoContext, Result, StoreError};
use crate::fsutil::sync_dir;

/// Default segment size, RocketMQ's mappedFileSizeCommitLog.
pub const DEFAULT_SEGMENT_SIZE: u64 = 1 << 30;

/// One segment file.
pub struct Segment {
    pub start: u64,
    pub size: u64,
    pub path: PathBuf,
    file: File,
    map: Mmap,
    /// The file lives on tmpfs, where a read fault on a hole allocates a page and, when the
    /// filesystem is full, kills the process with SIGBUS (see [`Segment::scan_end`]).
    shmem: bool,
}

impl Segment {
    fn create_or_open(dir: &Path, start: u64, size: u64) -> Result<Segment> {
        let path = dir.join(segment_name(start));
        let existed = path.exists();
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .at(&path)?;
        let len = file.metadata().at(&path)?.len();
        if len > size {
            return Err(StoreError::Config {
                key: "segment_size",
                reason: format!(
                    "{} is {len} bytes but segment_size is {size}; open the store with the size it was created with",
                    path.display()
                ),
            });
        }
        if len < size {
            // A short file (created now, or cut by something outside the store): extend it as a
            // sparse file. Bytes past the old end read as zeros, which recovery treats as the end.
            file.set_len(size).at(&path)?;
        }
        if !existed {
            sync_dir(dir)?;
        }
        // SAFETY: the mapping is read-only and covers exactly the file's length (`size`, set just
        // above). The store never shrinks a segment file (truncation zeroes bytes in place), so
        // every mapped byte stays backed by the file for the life of the mapping. Concurrent
        // writes through `pwrite` change bytes under the mapping; readers only look at ranges
        // below the published max offset, which are not written again except by truncation,
        // after which they read as zeros and fail validation instead of being misread.
        let map = unsafe { MmapOptions::new().len(size as usize).map(&file) }.at(&path)?;
        let shmem = on_tmpfs(&file);
        Ok(Segment {
            start,
            size,
            path,
            file,
            map,
            shmem,
        })
    }

    fn bytes(&self) -> &[u8] {
        &self.map[..]
    }

    /// How far from the segment's start a scan of unwritten space (recovery's walk and sync
    /// search, the search for stray bytes after the end) may read through the mapping.
    ///
    /// On tmpfs, touching a mapped page that was never written allocates it, and on a full
    /// tmpfs the kernel answers that fault with SIGBUS: a store that filled its disk died on
    /// its next open. There the scan stops at the end of the last range holding data
    /// (`SEEK_DATA`/`SEEK_HOLE`, exact on tmpfs, which has no delayed allocation); past it
    /// the file reads as zeros by definition. Elsewhere reading a hole maps zeros and cannot
    /// fail, and hole reports are not trusted (some filesystems have misreported dirty data
    /// as holes): the whole segment.
    fn scan_end(&self) -> usize {
        if self.shmem {
            if let Some(end) = data_end(&self.file, self.size) {
                return end as usize;
            }
        }
        self.size as usize
    }

    fn end(&self) -> u64 {
        self.start + self.size
    }

    /// Whether every page of `[pos, pos + len)` is in memory (reading it costs no disk I/O);
    /// true where the kernel cannot say.
    fn resident(&self, pos: usize, len: usize) -> bool {
        #[cfg(target_os = "linux")]
        {
            let page = page_size();
            let end = pos.saturating_add(len.max(1)).min(self.map.len());
            if pos >= end {
                return true;
            }
            let first = pos - pos % page;
            let pages = (end - first).div_ceil(page);
            // a record spans a few pages: no allocation on this read path for those
            let mut small = [0u8; 16];
            let mut large = Vec::new();
            let vec: &mut [u8] = if pages <= small.len() {
                &mut small[..pages]
            } else {
                large.resize(pages, 0);
                &mut large
            };
            // SAFETY: [first, first + pages * page) lies in the mapping (it starts at a page
            // boundary of the page-aligned mapping and ends on the page holding its last byte,
            // inside the mapping's last page); mincore writes one byte per page into `vec`,
            // which holds `pages` bytes.
            let rc = unsafe {
                libc::mincore(
                    self.map.as_ptr().add(first) as *mut libc::c_void,
                    end - first,
                    vec.as_mut_ptr(),
                )
            };
            rc != 0 || vec.iter().all(|&b| b & 1 == 1)
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = (pos, len);
            true
        }
    }

    /// Zeroes `[from, self.size)` (positions inside the segment) and syncs.
    fn zero_from(&self, from: u64) -> Result<()> {
        if from >= self.size {
            return Ok(());
        }
        let len = self.size - from;
        if !punch_hole(&self.file, from, len) {
            let zeros = vec![0u8; 1 << 20];
            let mut pos = from;
            // Only the part that holds data needs rewriting: find the last non-zero byte.
            let avail = self.scan_end().max(from as usize);
            let last = self.bytes()[from as usize..avail]
                .iter()
                .rposition(|&b| b != 0)
                .map(|p| from + p as u64 + 1)
                .unwrap_or(from);
            while pos < last {
                let n = ((last - pos) as usize).min(zeros.len());
                self.file.write_all_at(&zeros[..n], pos).at(&self.path)?;
                pos += n as u64;
            }
        }
        self.file.sync_data().at(&self.path)
    }
}

/// Punches a hole (deallocates, reads back as zeros) where the filesystem supports it.
fn punch_hole(file: &File, offset: u64, len: u64) -> bool {
    #[cfg(target_os = "linux")]
    {
        let (Ok(off), Ok(len)) = (libc::off_t::try_from(offset), libc::off_t::try_from(len)) else {
            return false;
        };
        // SAFETY: fallocate only reads its integer arguments; the fd is owned by `file`, which
        // outlives the call.
        let rc = unsafe {
            libc::fallocate(
                file.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                off,
                len,
            )
        };
        rc == 0
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (file, offset, len);
        false
    }
}

/// Why a valid record whose PHYSICALOFFSET is `claimed` is damage at `at`.
fn misplaced(claimed: i64, at: u64) -> String {
    format!("record claims physical offset {claimed} but sits at {at}")
}

/// The page size (sysconf), looked up once; 4096 if the kernel will not say.
#[cfg(target_os = "linux")]
fn page_size() -> usize {
    static PAGE: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *PAGE.get_or_init(|| {
        // SAFETY: sysconf only reads its argument.
        match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
            p if p > 0 => p as usize,
            _ => 4096,
        }
    })
}

/// Whether `file` lives on tmpfs (statfs magic `TMPFS_MAGIC`).
fn on_tmpfs(file: &File) -> bool {
    #[cfg(target_os = "linux")]
    {
        const TMPFS_MAGIC: i64 = 0x0102_1994;
        let mut st = std::mem::MaybeUninit::<libc::statfs>::zeroed();
        // SAFETY: fstatfs writes at most one `statfs` into the buffer, which is sized for it;
        // the fd is owned by `file`, which outlives the call.
        let rc = unsafe { libc::fstatfs(file.as_raw_fd(), st.as_mut_ptr()) };
        if rc != 0 {
            return false;
        }
        // SAFETY: fstatfs returned 0, so it filled the struct (and it was zeroed before).
        let st = unsafe { st.assume_init() };
        #[allow(clippy::unnecessary_cast)]
        let magic = st.f_type as i64;
        magic == TMPFS_MAGIC
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = file;
        false
    }
}

/// The end of the last range of `file` (of length `size`) holding data, from
/// `SEEK_DATA`/`SEEK_HOLE`; None when the filesystem cannot say.
fn data_end(file: &File, size: u64) -> Option<u64> {
    #[cfg(target_os = "linux")]
    {
        let fd = file.as_raw_fd();
        let mut pos: libc::off_t = 0;
        let mut end: u64 = 0;
        let size_off = libc::off_t::try_from(size).ok()?;
        while pos < size_off {
            // SAFETY: lseek only reads its integer arguments; the fd is owned by `file`, which
            // outlives the call. The store never uses the file position (all I/O is
            // positioned), so moving it is harmless.
            let d = unsafe { libc::lseek(fd, pos, libc::SEEK_DATA) };
            if d < 0 {
                let e = std::io::Error::last_os_error();
                return (e.raw_os_error() == Some(libc::ENXIO)).then_some(end);
            }
            // SAFETY: as above.
            let h = unsafe { libc::lseek(fd, d, libc::SEEK_HOLE) };
            if h <= d {
                return None;
            }
            end = u64::try_from(h).ok()?;
            pos = h;
        }
        Some(end.min(size))
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (file, size);
        None
    }
}

/// Why the record at `pos` of a segment whose data ends at `avail` (see
/// [`Segment::scan_end`]) cannot be decoded without reading unwritten space; None when it
/// can be decoded as usual. Past `avail` the file reads as zeros: the end of data.
fn unwritten_reason(data: &[u8], pos: usize, avail: usize) -> Option<String> {
    if avail >= data.len() {
        return None; // nothing unwritten to avoid
    }
    if pos >= avail {
        return Some(END_OF_DATA.to_string());
    }
    let head = &data[pos..avail.min(pos + 8)];
    if head.len() < 8 {
        return Some(if head.iter().all(|&b| b == 0) {
            END_OF_DATA.to_string()
        } else {
            "a record header runs into unwritten space of the segment file".to_string()
        });
    }
    match peek_header(head) {
        // a filler is decoded from its header alone
        Ok((_, BLANK_MAGIC)) => None,
        Ok((size, _)) if size > 0 && pos as u64 + size as u64 > avail as u64 => Some(format!(
            "a record of {size} bytes runs into unwritten space of the segment file"
        )),
        _ => None,
    }
}

/// File name of the segment starting at `start`: 20 digits, zero-padded, like RocketMQ.
pub fn segment_name(start: u64) -> String {
    format!("{start:020}")
}

fn parse_segment_name(name: &str) -> Option<u64> {
    if name.len() == 20 && name.bytes().all(|b| b.is_ascii_digit()) {
        name.parse().ok()
    } else {
        None
    }
}

/// A whole record (or run of records) borrowed from a segment mapping, kept alive by `Arc`.
#[derive(Clone)]
pub struct RecordBuf {
    seg: Arc<Segment>,
    from: usize,
    len: usize,
    /// Commitlog offset of the first byte.
    pub offset: u64,
}

impl RecordBuf {
    pub fn as_slice(&self) -> &[u8] {
        &self.seg.bytes()[self.from..self.from + self.len]
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Offset just past the buffer.
    pub fn end_offset(&self) -> u64 {
        self.offset + self.len as u64
    }
    /// Raw pointer to the first byte; valid while `self` lives (for the buffer protocol).
    pub fn as_ptr(&self) -> *const u8 {
        self.as_slice().as_ptr()
    }
}

/// A damaged byte range `[offset, end)` inside one segment, found by validation: it starts
/// where a record should start and ends at the next sync point.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadRange {
    pub offset: u64,
    pub end: u64,
    pub reason: String,
}

/// What recovery found and what it cut.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Where validation started.
    pub scanned_from: u64,
    /// The durable point recovery used: bad bytes below it are damage (quarantined when a
    /// valid record follows), at or past it a torn tail (cut). 0 without a trusted checkpoint.
    pub durable_offset: u64,
    /// The recovered end (new max offset).
    pub valid_end: u64,
    /// Offset of the first bad byte, if anything was cut.
    pub cut_offset: Option<u64>,
    /// End of the discarded bytes (past the last non-zero byte cut), when something was cut.
    pub cut_to: Option<u64>,
    /// Why: the decode error at `cut_offset`, or "non-zero bytes after the end".
    pub cut_reason: Option<String>,
    /// Non-zero bytes discarded in the segment holding the end.
    pub cut_bytes: u64,
    /// Later segment files deleted.
    pub cut_segments: Vec<String>,
    /// The cut started below the durable point: bytes that had been fsynced were lost (damage
    /// that no valid record follows, e.g. a zeroed or truncated end of the log).
    pub cut_below_durable: bool,
    /// `[end, durable point)` when the log ends below the durable point: bytes that had been
    /// fsynced are missing (zeroed or cut off, or a truncation newer than the checkpoint).
    pub missing_durable: Option<(u64, u64)>,
    /// Damaged ranges below the durable point that valid records follow: skipped, for the
    /// store to quarantine. Records around them are kept.
    pub quarantined: Vec<BadRange>,
    /// Segments before the last that were shorter than the segment size on disk (name,
    /// length): cut from outside, their records past that length are gone (the file is
    /// extended back with zeros; reads quarantine what is missing).
    pub short_segments: Vec<(String, u64)>,
    /// Records validated.
    pub records_scanned: u64,
}

/// What validating a range found: where it ended, and the damaged ranges it skipped.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Validation {
    /// Where validation stopped: the range's end, or the first bad record it could not skip.
    pub end: u64,
    /// The first bad record that was not skipped, and why (a torn tail in recovery).
    pub stop: Option<(u64, String)>,
    /// Damaged ranges skipped (each inside one segment).
    pub bad: Vec<BadRange>,
    /// Valid records seen.
    pub records: u64,
}

/// Where each appended message went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    pub physical_offset: u64,
    pub size: u32,
    pub queue_offset: i64,
    pub store_timestamp: i64,
}

/// State shared with the flush thread.
pub struct Shared {
    segments: RwLock<Vec<Arc<Segment>>>,
    max_offset: AtomicU64,
    flushed: AtomicU64,
    min_offset: AtomicU64,
    /// Held by a flush cycle and by truncation, so a flush that started before a truncation can
    /// never publish a flushed offset past the new end.
    flush_lock: Mutex<()>,
}

impl Shared {
    pub fn max_offset(&self) -> u64 {
        self.max_offset.load(Ordering::Acquire)
    }
    pub fn flushed_offset(&self) -> u64 {
        self.flushed.load(Ordering::Acquire)
    }
    pub fn min_offset(&self) -> u64 {
        self.min_offset.load(Ordering::Acquire)
    }

    fn segments(&self) -> std::sync::RwLockReadGuard<'_, Vec<Arc<Segment>>> {
        // A panic while holding the lock cannot leave the Vec half-modified in a way we rely
        // on, so a poisoned lock is still usable.
        self.segments.read().unwrap_or_else(|e| e.into_inner())
    }

    fn segments_mut(&self) -> std::sync::RwLockWriteGuard<'_, Vec<Arc<Segment>>> {
        self.segments.write().unwrap_or_else(|e| e.into_inner())
    }

    /// fdatasyncs everything written so far; returns the new flushed offset. Many appends that
    /// happened since the last call share this one sync (group commit).
    pub fn flush(&self) -> Result<u64> {
        let _guard = self.flush_lock.lock().unwrap_or_else(|e| e.into_inner());
        let target = self.max_offset();
        let flushed = self.flushed_offset();
        if target <= flushed {
            return Ok(flushed);
        }
        let segs: Vec<Arc<Segment>> = self
            .segments()
            .iter()
            .filter(|s| s.end() > flushed && s.start < target)
            .cloned()
            .collect();
        for s in segs {
            s.file.sync_data().at(&s.path)?;
        }
        self.flushed.fetch_max(target, Ordering::AcqRel);
        Ok(target)
    }

    /// [`CommitLog::validate_range`] on the current segments, without the store lock (the
    /// segments are kept alive by their `Arc`s while the walk runs).
    pub fn validate_range(&self, from: u64, to: u64, known: &[(u64, u64)]) -> Validation {
        let segs = self.segments().clone();
        let to = to.min(self.max_offset());
        if from >= to {
            return Validation {
                end: from,
                ..Validation::default()
            };
        }
        walk(&segs, from, Some(to), u64::MAX, known)
    }

    fn segment_for(&self, offset: u64) -> Option<Arc<Segment>> {
        let segs = self.segments();
        let idx = segs.partition_point(|s| s.start <= offset);
        if idx == 0 {
            return None;
        }
        let s = &segs[idx - 1];
        (offset < s.end()).then(|| s.clone())
    }
}

pub struct CommitLogConfig {
    pub dir: PathBuf,
    pub segment_size: u64,
    pub store_host: SocketAddr,
    /// Where the last checkpoint says the log starts (None: unknown). A first segment on disk
    /// past it means segments were removed from the head by something other than retention.
    pub expected_min: Option<u64>,
}

/// The commitlog. Appends and truncation take `&mut self` (the store serialises them); reads
/// and flushes go through [`Shared`], which other threads may hold.
pub struct CommitLog {
    cfg: CommitLogConfig,
    shared: Arc<Shared>,
    scratch: Vec<u8>,
}

impl CommitLog {
    /// Opens the commitlog in `cfg.dir`, validating records from the start of the segment that
    /// holds `recover_from` (clamped into the existing segments) to the end. `durable` is the
    /// durable point (see the module doc); `known` lists damaged ranges quarantined earlier
    /// (sorted `(start, end)`), which validation skips without looking at them.
    pub fn open(
        cfg: CommitLogConfig,
        recover_from: u64,
        durable: Option<u64>,
        known: &[(u64, u64)],
    ) -> Result<(CommitLog, RecoveryReport)> {
        if cfg.segment_size < 4096 || cfg.segment_size > (1 << 40) {
            return Err(StoreError::Config {
                key: "segment_size",
                reason: format!("{} is outside [4096, 2^40]", cfg.segment_size),
            });
        }
        fs::create_dir_all(&cfg.dir).at(&cfg.dir)?;
        let mut starts = Vec::new();
        for entry in fs::read_dir(&cfg.dir).at(&cfg.dir)? {
            let entry = entry.at(&cfg.dir)?;
            if let Some(start) = entry.file_name().to_str().and_then(parse_segment_name) {
                starts.push(start);
            }
        }
        starts.sort_unstable();
        Self::check_layout(&cfg, &starts)?;
        let mut report = RecoveryReport::default();
        for &start in starts.iter().rev().skip(1).rev() {
            let path = cfg.dir.join(segment_name(start));
            let len = fs::metadata(&path).at(&path)?.len();
            if len < cfg.segment_size {
                report.short_segments.push((segment_name(start), len));
            }
        }
        // Segments must be contiguous (check_layout refused unaligned ones). The store never
        // leaves a gap itself (truncation deletes the highest segment first, retention the
        // lowest), so a missing segment is outside damage: refused, naming it, before anything
        // is changed. The segments after it hold records that may have been acknowledged;
        // deleting them would lose those for good.
        if let Some(w) = starts.windows(2).find(|w| w[1] - w[0] != cfg.segment_size) {
            let missing = cfg.dir.join(segment_name(w[0] + cfg.segment_size));
            let later = starts.iter().filter(|&&s| s > w[0]).count();
            return Err(StoreError::CorruptFile {
                path: missing,
                reason: format!(
                    "commitlog segment missing: the segments jump from {} to {} ({later} \
                     later segments hold records that may have been acknowledged); restore \
                     the missing file, or move the later segments out of {} to start without \
                     their records",
                    segment_name(w[0]),
                    segment_name(w[1]),
                    cfg.dir.display()
                ),
            });
        }
        // Retention writes the new min offset to the checkpoint before it unlinks segments,
        // so a log starting past the checkpoint's min lost its head some other way: refused
        // like a missing segment in the middle (the queues would otherwise skip those records
        // as if retention had deleted them, and consumers commit past them).
        if let (Some(want), Some(&first)) = (cfg.expected_min, starts.first()) {
            // (nothing durable at or past `want`: nothing was lost)
            if first > want && durable.unwrap_or(0) > want {
                return Err(StoreError::CorruptFile {
                    path: cfg.dir.join(segment_name(want - want % cfg.segment_size)),
                    reason: format!(
                        "commitlog segment missing: the log starts at {} but the checkpoint \
                         says it starts at {want}, and retention did not delete the segments \
                         in between; restore them, or delete the checkpoint file to start \
                         without their records (the whole log is then validated again with \
                         nothing known durable: a damaged record that valid records follow is \
                         quarantined, one at the end of the log is cut as a torn write)",
                        segment_name(first)
                    ),
                });
            }
        }
        let mut segments: Vec<Arc<Segment>> = Vec::new();
        for &start in &starts {
            segments.push(Arc::new(Segment::create_or_open(
                &cfg.dir,
                start,
                cfg.segment_size,
            )?));
        }
        let min = segments.first().map_or(0, |s| s.start);
        let shared = Arc::new(Shared {
            segments: RwLock::new(segments),
            max_offset: AtomicU64::new(min),
            flushed: AtomicU64::new(min),
            min_offset: AtomicU64::new(min),
            flush_lock: Mutex::new(()),
        });
        let mut log = CommitLog {
            cfg,
            shared,
            scratch: Vec::new(),
        };
        log.recover(recover_from, durable, known, &mut report)?;
        Ok((log, report))
    }

    /// Refuses, before anything is changed on disk, a directory whose files do not fit the
    /// configured segment size: a misconfigured reopen must not be mistaken for damage and
    /// "repaired" by deleting segments.
    fn check_layout(cfg: &CommitLogConfig, starts: &[u64]) -> Result<()> {
        let mismatch = |why: String| StoreError::Config {
            key: "segment_size",
            reason: format!(
                "{why}: the commitlog in {} was written with another segment size, or a \
                 file in it was changed from outside (extended, renamed or copied in)",
                cfg.dir.display()
            ),
        };
        for (i, &start) in starts.iter().enumerate() {
            if start % cfg.segment_size != 0 {
                return Err(mismatch(format!(
                    "segment {} does not start at a multiple of {}",
                    segment_name(start),
                    cfg.segment_size
                )));
            }
            let path = cfg.dir.join(segment_name(start));
            let len = fs::metadata(&path).at(&path)?.len();
            if len > cfg.segment_size {
                return Err(mismatch(format!(
                    "{} is {len} bytes, larger than {}",
                    path.display(),
                    cfg.segment_size
                )));
            }
            // Every segment but the last is full size: a shorter one means another size was
            // used (the last one may be short after damage, which recovery handles).
            if i + 1 < starts.len() && len != cfg.segment_size {
                let next = starts[i + 1];
                if next - start != cfg.segment_size {
                    return Err(mismatch(format!(
                        "{} is {len} bytes and the next segment starts {} bytes later",
                        path.display(),
                        next - start
                    )));
                }
            }
        }
        Ok(())
    }

    /// `durable` is None when nothing says what was fsynced (no trusted checkpoint): then
    /// nothing is known lost below a point, and a bad record is a torn tail only when no valid
    /// record follows it. A valid record after it proves the bad bytes are damage in the
    /// middle of the log (truncation zeroes what it discards, so a valid record past a torn
    /// tail cannot be an old one): they are quarantined like damage below the durable point,
    /// not cut with every later record.
    fn recover(
        &mut self,
        recover_from: u64,
        durable: Option<u64>,
        known: &[(u64, u64)],
        report: &mut RecoveryReport,
    ) -> Result<()> {
        let segs: Vec<Arc<Segment>> = self.shared.segments().clone();
        let resync_below = durable.unwrap_or(u64::MAX);
        let durable = durable.unwrap_or(0);
        report.durable_offset = durable;
        let Some(first) = segs.first() else {
            if durable > 0 {
                // every segment is gone, yet bytes had been fsynced
                report.missing_durable = Some((0, durable));
            }
            return Ok(());
        };
        let last_start = segs.last().map_or(first.start, |s| s.start);
        let from = recover_from.clamp(first.start, last_start);
        let start_idx = segs.partition_point(|s| s.start <= from).saturating_sub(1);
        report.scanned_from = segs[start_idx].start;
        let v = walk(&segs, report.scanned_from, None, resync_below, known);
        report.records_scanned = v.records;
        report.quarantined = v.bad;
        let end = v.end;
        let Some((stop_at, reason)) = v.stop else {
            // Ran off the last segment exactly at its end (it ended with a filler). Below the
            // durable point, the segments after it are gone (deleted from outside).
            if end < durable {
                report.missing_durable = Some((end, durable));
            }
            self.shared.max_offset.store(end, Ordering::Release);
            self.shared.flushed.store(end, Ordering::Release);
            report.valid_end = end;
            return Ok(());
        };
        // Cut everything after the end: the rest of the segment holding it, and later segments.
        let cut_idx = segs
            .partition_point(|s| s.start <= stop_at)
            .saturating_sub(1);
        let seg = &segs[cut_idx];
        let cut_pos = stop_at - seg.start;
        let tail = &seg.bytes()[cut_pos as usize..seg.scan_end().max(cut_pos as usize)];
        let nonzero = tail
            .iter()
            .rposition(|&b| b != 0)
            .map_or(0, |p| p as u64 + 1);
        let below = stop_at < durable;
        if nonzero > 0 {
            report.cut_offset = Some(stop_at);
            report.cut_to = Some(stop_at + nonzero);
            report.cut_reason = Some(if reason == END_OF_DATA {
                "non-zero bytes after the end of data".into()
            } else {
                reason.clone()
            });
            report.cut_bytes = nonzero;
            seg.zero_from(cut_pos)?;
        }
        let later: Vec<Arc<Segment>> = segs[cut_idx + 1..].to_vec();
        if !later.is_empty() {
            if report.cut_offset.is_none() {
                report.cut_offset = Some(stop_at);
                report.cut_reason = Some("segments after the end of data".into());
            }
            let last_data = later
                .iter()
                .rev()
                .find_map(|s| {
                    s.bytes()[..s.scan_end()]
                        .iter()
                        .rposition(|&b| b != 0)
                        .map(|p| s.start + p as u64 + 1)
                })
                .unwrap_or(stop_at);
            report.cut_to = Some(report.cut_to.unwrap_or(stop_at).max(last_data));
            self.remove_segments(&later, report)?;
        }
        if below {
            // The log ends below the durable point: bytes that had been fsynced are gone
            // (zeroed, a shortened file, or a checkpoint older than a truncation).
            report.missing_durable = Some((stop_at, durable));
        }
        report.cut_below_durable = below && report.cut_offset.is_some();
        self.shared.max_offset.store(end, Ordering::Release);
        self.shared.flushed.store(end, Ordering::Release);
        report.valid_end = end;
        Ok(())
    }

    fn remove_segments(&self, doomed: &[Arc<Segment>], report: &mut RecoveryReport) -> Result<()> {
        // Highest first, so a crash half-way leaves a contiguous prefix.
        for s in doomed.iter().rev() {
            fs::remove_file(&s.path).at(&s.path)?;
            report.cut_segments.push(segment_name(s.start));
        }
        let starts: Vec<u64> = doomed.iter().map(|s| s.start).collect();
        self.shared
            .segments_mut()
            .retain(|s| !starts.contains(&s.start));
        sync_dir(&self.cfg.dir)
    }

    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }
    pub fn segment_size(&self) -> u64 {
        self.cfg.segment_size
    }
    pub fn max_offset(&self) -> u64 {
        self.shared.max_offset()
    }
    pub fn min_offset(&self) -> u64 {
        self.shared.min_offset()
    }
    pub fn flushed_offset(&self) -> u64 {
        self.shared.flushed_offset()
    }
    pub fn store_host(&self) -> SocketAddr {
        self.cfg.store_host
    }
    pub fn dir(&self) -> &Path {
        &self.cfg.dir
    }

    fn writable_segment(&self, offset: u64) -> Result<Arc<Segment>> {
        if let Some(s) = self.shared.segment_for(offset) {
            return Ok(s);
        }
        let start = offset - offset % self.cfg.segment_size;
        let seg = Arc::new(Segment::create_or_open(
            &self.cfg.dir,
            start,
            self.cfg.segment_size,
        )?);
        let mut segs = self.shared.segments_mut();
        if segs.is_empty() {
            self.shared.min_offset.store(start, Ordering::Release);
        }
        segs.push(seg.clone());
        Ok(seg)
    }

    /// Appends a batch: assigns physical offsets, takes queue offsets from `next_queue_offset`
    /// (called once per message, with its index in `msgs`), encodes, writes. On error nothing of the
    /// batch is published (the max offset does not move).
    pub fn append_batch(
        &mut self,
        msgs: &[MessageIn<'_>],
        store_timestamp: i64,
        next_queue_offset: &mut dyn FnMut(usize) -> i64,
    ) -> Result<Vec<Placement>> {
        let seg_size = self.cfg.segment_size;
        let store_v6 = self.cfg.store_host.is_ipv6();
        let mut out = Vec::with_capacity(msgs.len());
        let mut offset = self.max_offset();
        // Pre-check sizes so a bad message fails the batch before anything is written.
        for m in msgs {
            let len = encoded_len_with_crc(m, store_v6) as u64;
            if len + BLANK_HEADER_LEN as u64 > seg_size {
                return Err(StoreError::MessageIllegal(format!(
                    "record of {len} bytes does not fit a segment of {seg_size} bytes"
                )));
            }
        }
        let mut pending: Vec<(Arc<Segment>, u64, Vec<u8>)> = Vec::new();
        let mut buf = std::mem::take(&mut self.scratch);
        buf.clear();
        let mut seg = self.writable_segment(offset)?;
        let mut chunk_start = offset;
        for (i, m) in msgs.iter().enumerate() {
            let len = encoded_len_with_crc(m, store_v6) as u64;
            if offset + len + BLANK_HEADER_LEN as u64 > seg.end() {
                encode_blank((seg.end() - offset) as usize, &mut buf);
                pending.push((seg.clone(), chunk_start, std::mem::take(&mut buf)));
                offset = seg.end();
                seg = self.writable_segment(offset)?;
                chunk_start = offset;
            }
            let qo = next_queue_offset(i);
            let stamp = StoreStamp {
                queue_offset: qo,
                physical_offset: offset as i64,
                store_timestamp,
                store_host: self.cfg.store_host,
            };
            let n = encode_record_with_crc(m, &stamp, &mut buf)
                .map_err(|e| StoreError::MessageIllegal(e.to_string()))?;
            out.push(Placement {
                physical_offset: offset,
                size: n as u32,
                queue_offset: qo,
                store_timestamp,
            });
            offset += n as u64;
        }
        pending.push((seg, chunk_start, buf));
        for (k, (seg, at, data)) in pending.iter().enumerate() {
            if let Err(e) = seg.file.write_all_at(data, at - seg.start).at(&seg.path) {
                // A write that failed part-way (ENOSPC, EIO) may have left whole, valid records
                // past the max offset. The batch is answered as failed, so they must never be
                // found by a later recovery (a definite failure that is delivered after a
                // restart): zero everything this batch wrote, which punches holes and so needs
                // no free space.
                let undo = pending[..=k]
                    .iter()
                    .try_for_each(|(s, a, _)| s.zero_from(a - s.start));
                return Err(match undo {
                    Ok(()) => e,
                    Err(u) => StoreError::Io {
                        path: seg.path.clone(),
                        source: std::io::Error::other(format!(
                            "{e}; and the part written could not be zeroed ({u}): a restart \
                             may find records of this failed batch"
                        )),
                    },
                });
            }
        }
        if let Some((_, _, last)) = pending.pop() {
            self.scratch = last;
        }
        self.shared.max_offset.store(offset, Ordering::Release);
        Ok(out)
    }

    /// Appends bytes replicated from a master at `offset` (must equal the max offset). The bytes
    /// must be whole records (and fillers) whose PHYSICALOFFSET matches their position; they are
    /// validated before anything is written; `on_record` sees each one (before the write, so a
    /// caller must only apply what it collected once this returns Ok). Returns the count.
    pub fn append_raw(
        &mut self,
        offset: u64,
        data: &[u8],
        on_record: &mut dyn FnMut(u64, &RecordView<'_>) -> Result<()>,
    ) -> Result<usize> {
        let max = self.max_offset();
        if offset != max {
            return Err(StoreError::OffsetOutOfRange {
                offset,
                min: max,
                max: max + 1,
            });
        }
        let mut pos = 0usize;
        let mut count = 0usize;
        let mut writes: Vec<(Arc<Segment>, u64, usize, usize)> = Vec::new();
        while pos < data.len() {
            let at = offset + pos as u64;
            let seg = self.writable_segment(at)?;
            let room = (seg.end() - at) as usize;
            let window = &data[pos..data.len().min(pos + room)];
            let mut p = 0usize;
            while p < window.len() {
                let here = at + p as u64;
                // A filler must cover the rest of its segment, so decode it against that length.
                let (size, magic) = peek_header(&window[p..]).map_err(|e| corrupt(here, &e))?;
                if magic == BLANK_MAGIC {
                    let seg_rest = room - p;
                    if window.len() - p < seg_rest {
                        // A whole filler that ends before this segment does: the replica that
                        // wrote it rolled its segments elsewhere (another segment size).
                        let reason = if size > 0 && (size as usize) < seg_rest {
                            format!(
                                "end-of-segment filler ending at {}, where this store's segment                                  ends at {}: the sender's commitlog uses another segment size                                  (mappedFileSizeCommitLog must be the same on every replica of                                  a group; this store's is {})",
                                here + size as u64,
                                seg.end(),
                                self.cfg.segment_size
                            )
                        } else {
                            "partial end-of-segment filler".into()
                        };
                        return Err(StoreError::CorruptRecord {
                            offset: here,
                            reason,
                        });
                    }
                    match decode(&window[p..p + seg_rest]) {
                        Ok(Decoded::Blank(n)) => p += n,
                        Ok(_) => unreachable_record(here)?,
                        Err(e) => return Err(corrupt(here, &e)),
                    }
                    continue;
                }
                match decode(&window[p..]).map_err(|e| corrupt(here, &e))? {
                    Decoded::Record(r) => {
                        if r.physical_offset != here as i64 {
                            return Err(StoreError::CorruptRecord {
                                offset: here,
                                reason: misplaced(r.physical_offset, here),
                            });
                        }
                        if p + r.total_size() + BLANK_HEADER_LEN > room {
                            return Err(StoreError::CorruptRecord {
                                offset: here,
                                reason: "record leaves no room for the segment filler".into(),
                            });
                        }
                        on_record(here, &r)?;
                        p += r.total_size();
                        count += 1;
                    }
                    Decoded::Blank(_) => unreachable_record(here)?,
                }
            }
            writes.push((seg, at, pos, pos + p));
            pos += p;
        }
        for (seg, at, from, to) in writes {
            seg.file
                .write_all_at(&data[from..to], at - seg.start)
                .at(&seg.path)?;
        }
        self.shared
            .max_offset
            .store(offset + data.len() as u64, Ordering::Release);
        Ok(count)
    }

    /// Whether the `len` bytes at `offset` are in memory (a read costs no disk I/O); true when
    /// the kernel cannot say, false outside the log.
    pub fn is_resident(&self, offset: u64, len: u32) -> bool {
        match self.shared.segment_for(offset) {
            Some(seg) => seg.resident((offset - seg.start) as usize, len as usize),
            None => false,
        }
    }

    /// The validated record at `offset` (zero-copy). A filler or anything invalid is an error.
    pub fn read_record(&self, offset: u64) -> Result<RecordBuf> {
        let (seg, pos, limit) = self.locate(offset, self.max_offset())?;
        let data = &seg.bytes()[pos..limit];
        match decode(data) {
            // valid bytes in the wrong place (copied or misdirected): damage, never served
            Ok(Decoded::Record(r)) if r.physical_offset != offset as i64 => {
                Err(StoreError::CorruptRecord {
                    offset,
                    reason: misplaced(r.physical_offset, offset),
                })
            }
            Ok(Decoded::Record(r)) => {
                let len = r.total_size();
                Ok(RecordBuf {
                    seg,
                    from: pos,
                    len,
                    offset,
                })
            }
            Ok(Decoded::Blank(_)) => Err(StoreError::CorruptRecord {
                offset,
                reason: "offset points at an end-of-segment filler, not a record".into(),
            }),
            Err(e) => Err(corrupt(offset, &e)),
        }
    }

    /// Decodes the record at `offset` and hands it to `f` (no copy, no Arc clone).
    pub fn with_record<T>(&self, offset: u64, f: impl FnOnce(&RecordView<'_>) -> T) -> Result<T> {
        let (seg, pos, limit) = self.locate(offset, self.max_offset())?;
        match decode(&seg.bytes()[pos..limit]) {
            Ok(Decoded::Record(r)) => Ok(f(&r)),
            Ok(Decoded::Blank(_)) => Err(StoreError::CorruptRecord {
                offset,
                reason: "offset points at an end-of-segment filler, not a record".into(),
            }),
            Err(e) => Err(corrupt(offset, &e)),
        }
    }

    /// Whole records from `offset` up to `max_bytes` and below `limit` (e.g. the max or confirm
    /// offset), never crossing a segment; an end-of-segment filler is included when the run
    /// reaches it (a replica must write it too). Every record is validated. The result is empty
    /// when `offset == limit`; a single record larger than `max_bytes` is still returned whole.
    pub fn read_range(&self, offset: u64, max_bytes: usize, limit: u64) -> Result<RecordBuf> {
        let limit = limit.min(self.max_offset());
        if offset == limit {
            let seg = self
                .shared
                .segment_for(offset.saturating_sub(1))
                .or_else(|| self.shared.segment_for(offset));
            if let Some(seg) = seg {
                let from = (offset - seg.start) as usize;
                return Ok(RecordBuf {
                    seg,
                    from,
                    len: 0,
                    offset,
                });
            }
        }
        let (seg, pos, seg_limit) = self.locate(offset, limit)?;
        let data = seg.bytes();
        let mut p = pos;
        while p < seg_limit {
            let here = seg.start + p as u64;
            let rest_of_segment = &data[p..];
            match decode(rest_of_segment) {
                // a valid record that is not where it says it is (bytes copied or written to
                // the wrong place): damage, as recovery judges it; a replica would refuse it
                Ok(Decoded::Record(r)) if r.physical_offset != here as i64 => {
                    if p > pos {
                        break;
                    }
                    return Err(StoreError::CorruptRecord {
                        offset: here,
                        reason: misplaced(r.physical_offset, here),
                    });
                }
                Ok(Decoded::Record(r)) => {
                    let n = r.total_size();
                    if p + n > seg_limit || (p > pos && p + n - pos > max_bytes) {
                        break;
                    }
                    p += n;
                }
                Ok(Decoded::Blank(n)) => {
                    // The filler ends the segment's run; a replica must copy it too.
                    p += n;
                    break;
                }
                // The records before a bad one are still served; the next call starting at
                // the bad one gets the error.
                Err(_) if p > pos => break,
                Err(e) => return Err(corrupt(here, &e)),
            }
        }
        Ok(RecordBuf {
            seg,
            from: pos,
            len: p - pos,
            offset,
        })
    }

    /// Finds the segment holding `offset`, checks `min <= offset < limit`; returns the segment,
    /// the position in it and the position limit in it.
    fn locate(&self, offset: u64, limit: u64) -> Result<(Arc<Segment>, usize, usize)> {
        let min = self.min_offset();
        if offset < min || offset >= limit {
            return Err(StoreError::OffsetOutOfRange {
                offset,
                min,
                max: limit,
            });
        }
        let seg = self
            .shared
            .segment_for(offset)
            .ok_or(StoreError::OffsetOutOfRange {
                offset,
                min,
                max: limit,
            })?;
        let pos = (offset - seg.start) as usize;
        let seg_limit = (limit.min(seg.end()) - seg.start) as usize;
        Ok((seg, pos, seg_limit))
    }

    /// Whether `offset` is a record boundary: the end of the log, the start of a segment, or
    /// the start of a valid record or end-of-segment filler.
    pub fn is_boundary(&self, offset: u64) -> bool {
        if offset == self.max_offset() || offset % self.cfg.segment_size == 0 {
            return offset >= self.min_offset() && offset <= self.max_offset();
        }
        match self.locate(offset, self.max_offset()) {
            Ok((seg, pos, _)) => decode(&seg.bytes()[pos..]).is_ok(),
            Err(_) => false,
        }
    }

    /// Iterates records in `[from, to)`, calling `f(offset, record)`; fillers are skipped.
    /// Stops with an error at the first invalid record. With `verify` false only the structure
    /// is checked, not the CRCs: for ranges this process validated already (appended, replicated
    /// or recovered), which is what the dispatcher scans.
    pub fn scan(
        &self,
        from: u64,
        to: u64,
        verify: bool,
        f: &mut dyn FnMut(u64, &RecordView<'_>) -> Result<()>,
    ) -> Result<u64> {
        let to = to.min(self.max_offset());
        let mut offset = from;
        while offset < to {
            let (seg, pos, limit) = self.locate(offset, to)?;
            let data = seg.bytes();
            let mut p = pos;
            while p < limit {
                let here = seg.start + p as u64;
                let decoded = if verify {
                    decode(&data[p..])
                } else {
                    decode_record_structure(&data[p..])
                };
                match decoded {
                    Ok(Decoded::Record(r)) => {
                        // Only whole records below `to`: a confirm offset inside a record
                        // must not expose it.
                        if p + r.total_size() > limit {
                            return Ok(here);
                        }
                        f(here, &r)?;
                        p += r.total_size();
                    }
                    Ok(Decoded::Blank(n)) => {
                        p += n;
                        break;
                    }
                    Err(e) => return Err(corrupt(here, &e)),
                }
            }
            offset = seg.start + p as u64;
        }
        Ok(offset)
    }

    /// Cuts the log back to `offset` (a record boundary in [min, max]) durably: later segments
    /// are deleted, the tail is zeroed and synced before this returns, so a crash right after
    /// cannot resurrect the cut records (RocketMQ #10666).
    pub fn truncate_to(&mut self, offset: u64) -> Result<()> {
        self.truncate_to_checked(offset, false)
    }

    /// [`CommitLog::truncate_to`]; `known_boundary` skips the check that a valid record starts
    /// at `offset` (the store knows it is the start of a quarantined range).
    pub fn truncate_to_checked(&mut self, offset: u64, known_boundary: bool) -> Result<()> {
        let max = self.max_offset();
        let min = self.min_offset();
        if offset > max || offset < min {
            return Err(StoreError::OffsetOutOfRange {
                offset,
                min,
                max: max + 1,
            });
        }
        let at_segment_start = offset % self.cfg.segment_size == 0;
        if offset < max && !at_segment_start && !known_boundary {
            // Refuse to cut inside a record: a valid record must begin at `offset`.
            self.with_record(offset, |_| ())?;
        }
        let _guard = self
            .shared
            .flush_lock
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let doomed: Vec<Arc<Segment>> = self
            .shared
            .segments()
            .iter()
            .filter(|s| s.start > offset || (s.start == offset && s.start > min))
            .cloned()
            .collect();
        let mut report = RecoveryReport::default();
        self.remove_segments(&doomed, &mut report)?;
        if let Some(seg) = self.shared.segment_for(offset) {
            seg.zero_from(offset - seg.start)?;
        }
        self.shared.max_offset.store(offset, Ordering::Release);
        self.shared.flushed.fetch_min(offset, Ordering::AcqRel);
        if self.shared.segments().is_empty() {
            self.shared.min_offset.store(offset, Ordering::Release);
        }
        Ok(())
    }

    /// Retention: detaches whole segments that end at or below `offset`, oldest first, never
    /// the last one (see [`CommitLog::detach_front`]).
    pub fn delete_segments_before(&mut self, offset: u64) -> Vec<Arc<Segment>> {
        let doomed: Vec<Arc<Segment>> = self
            .shared
            .segments()
            .iter()
            .take_while(|s| s.end() <= offset)
            .cloned()
            .collect();
        self.detach_front(&doomed)
    }

    /// Retention with RocketMQ's rule (`deleteExpiredFile`): walks the segments oldest first
    /// and detaches each one last modified before `older_than` (or any, with
    /// `clean_immediately`), stopping at the first that is not, at one that does not end at or
    /// below `limit` (callers pass min(flushed, dispatched)), and after `max_files`. The last
    /// segment (being written) is never deleted. Returns the detached segments for
    /// [`unlink_segments`].
    pub fn delete_expired(
        &mut self,
        older_than: std::time::SystemTime,
        limit: u64,
        clean_immediately: bool,
        max_files: usize,
    ) -> Result<Vec<Arc<Segment>>> {
        let mut doomed = Vec::new();
        let segs = self.shared.segments().clone();
        for s in segs.iter().take(segs.len().saturating_sub(1)) {
            if doomed.len() >= max_files || s.end() > limit || s.end() > self.max_offset() {
                break;
            }
            if !clean_immediately {
                let mtime = s.file.metadata().at(&s.path)?.modified().at(&s.path)?;
                if mtime >= older_than {
                    break;
                }
            }
            doomed.push(s.clone());
        }
        Ok(self.detach_front(&doomed))
    }

    /// Removes a prefix of segments from the log (memory only): the min offset moves to the
    /// first remaining one. The last segment is never removed: it carries the log's position,
    /// and without it a reopen would restart offsets at 0 and hand them out twice. The files
    /// are deleted by [`unlink_segments`], outside the store lock; readers holding buffers
    /// keep their mapping (the space is freed when the last one is dropped).
    fn detach_front(&mut self, doomed: &[Arc<Segment>]) -> Vec<Arc<Segment>> {
        let mut segs = self.shared.segments_mut();
        let keep_last = segs.len().saturating_sub(1);
        let n = doomed
            .iter()
            .zip(segs.iter().take(keep_last))
            .take_while(|(d, s)| d.start == s.start)
            .count();
        let out: Vec<Arc<Segment>> = segs.drain(..n).collect();
        let new_min = segs.first().map_or(self.max_offset(), |s| s.start);
        self.shared.min_offset.store(new_min, Ordering::Release);
        out
    }

    /// Starts an empty log at `offset`, a segment boundary: its first segment begins there and
    /// the min and max offsets are `offset` (RocketMQ's slave with syncFromLastFile, whose
    /// first replicated bytes are the master's last segment). Existing (empty) segment files
    /// are deleted first.
    pub fn start_at(&mut self, offset: u64) -> Result<()> {
        self.check_start_at(offset)?;
        let _guard = self
            .shared
            .flush_lock
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let old: Vec<Arc<Segment>> = self.shared.segments_mut().drain(..).collect();
        for s in old.iter().rev() {
            if s.start != offset {
                fs::remove_file(&s.path).at(&s.path)?;
            }
        }
        if !old.is_empty() {
            sync_dir(&self.cfg.dir)?;
        }
        self.shared.min_offset.store(offset, Ordering::Release);
        self.shared.max_offset.store(offset, Ordering::Release);
        self.shared.flushed.store(offset, Ordering::Release);
        self.writable_segment(offset)?;
        Ok(())
    }

    /// Why [`CommitLog::start_at`] would refuse `offset` (the log is not empty, or the offset
    /// is not a segment boundary), checked before anything changes.
    pub fn check_start_at(&self, offset: u64) -> Result<()> {
        if self.max_offset() != self.min_offset() {
            return Err(StoreError::InvalidArgument(format!(
                "the log is not empty (min {}, max {}): only an empty log can start elsewhere",
                self.min_offset(),
                self.max_offset()
            )));
        }
        if offset % self.cfg.segment_size != 0 {
            return Err(StoreError::InvalidArgument(format!(
                "start offset {offset} is not a segment boundary (segment size {})",
                self.cfg.segment_size
            )));
        }
        Ok(())
    }

    /// Validates records in `[from, to)` (both record boundaries) like recovery does below the
    /// durable point: a bad record is skipped up to the next sync point (`to` and the starts of
    /// `known` ranges count) and reported, never cut. For scrubbing old segments and for
    /// finding exactly which bytes a damaged record occupies.
    pub fn validate_range(&self, from: u64, to: u64, known: &[(u64, u64)]) -> Validation {
        self.shared.validate_range(from, to, known)
    }

    /// Whether `offset` is a sync point: the end of the log, the end of a segment, or where a
    /// valid record with PHYSICALOFFSET == `offset` or an exact end-of-segment filler starts.
    pub fn is_sync_point(&self, offset: u64) -> bool {
        if offset == self.max_offset() {
            return true;
        }
        if offset < self.min_offset() || offset > self.max_offset() {
            return false;
        }
        if offset % self.cfg.segment_size == 0 {
            return true;
        }
        match self.shared.segment_for(offset) {
            Some(seg) => sync_at(&seg, (offset - seg.start) as usize),
            None => false,
        }
    }

    /// (TOTALSIZE, MAGICCODE, PHYSICALOFFSET) of the bytes at `offset`, unvalidated: what a
    /// damaged record still claims about itself.
    pub fn raw_header(&self, offset: u64) -> Option<(i64, u32, i64)> {
        let seg = self.shared.segment_for(offset)?;
        let data = &seg.bytes()[(offset - seg.start) as usize..];
        let (size, magic) = peek_header(data).ok()?;
        let b = data.get(OFF_PHYSICAL_OFFSET..OFF_PHYSICAL_OFFSET + 8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Some((size, magic, i64::from_be_bytes(a)))
    }

    /// Decodes the record at `offset` checking only its structure (no CRCs), for the cheap
    /// consistency checks of consume queues against the log.
    pub fn with_record_structure<T>(
        &self,
        offset: u64,
        f: impl FnOnce(&RecordView<'_>) -> T,
    ) -> Result<T> {
        let (seg, pos, limit) = self.locate(offset, self.max_offset())?;
        match decode_record_structure(&seg.bytes()[pos..limit]) {
            Ok(Decoded::Record(r)) => Ok(f(&r)),
            Ok(Decoded::Blank(_)) => Err(StoreError::CorruptRecord {
                offset,
                reason: "offset points at an end-of-segment filler, not a record".into(),
            }),
            Err(e) => Err(corrupt(offset, &e)),
        }
    }

    /// Overwrites `[offset, offset + data.len())`, inside one segment and below the max offset,
    /// and syncs it: the repair of a quarantined range with good bytes from a replica. The
    /// caller validated the bytes.
    pub fn overwrite(&mut self, offset: u64, data: &[u8]) -> Result<()> {
        let (seg, pos, limit) = self.locate(offset, self.max_offset())?;
        if pos + data.len() > limit {
            return Err(StoreError::InvalidArgument(format!(
                "{} bytes at {offset} cross the end of the segment or the log",
                data.len()
            )));
        }
        seg.file.write_all_at(data, pos as u64).at(&seg.path)?;
        seg.file.sync_data().at(&seg.path)
    }

    /// Every segment (start, path), ascending.
    pub fn segment_files(&self) -> Vec<(u64, PathBuf)> {
        self.shared
            .segments()
            .iter()
            .map(|s| (s.start, s.path.clone()))
            .collect()
    }
}

/// Deletes the files of segments detached by retention, oldest first, then syncs the
/// directory (a crash half-way leaves a contiguous suffix of the log, which reopens fine).
/// Returns their names.
pub fn unlink_segments(dir: &Path, segs: &[Arc<Segment>]) -> Result<Vec<String>> {
    let mut names = Vec::new();
    for s in segs {
        fs::remove_file(&s.path).at(&s.path)?;
        names.push(segment_name(s.start));
    }
    if !segs.is_empty() {
        sync_dir(dir)?;
    }
    Ok(names)
}

/// The reason recovery gives for an all-zero header: the normal end of the data.
const END_OF_DATA: &str = "end of data";

/// Whether a sync point starts at `pos` of `seg`: a valid record whose PHYSICALOFFSET equals
/// its position, or an end-of-segment filler covering exactly the rest of the segment. Cheap
/// checks (magic, then the position field) come before the CRCs.
fn sync_at(seg: &Segment, pos: usize) -> bool {
    let data = seg.bytes();
    let Some(magic) = data.get(pos + 4..pos + 8) else {
        return false;
    };
    let magic = u32::from_be_bytes([magic[0], magic[1], magic[2], magic[3]]);
    match magic {
        MAGIC_V1 | MAGIC_V2 => {
            let at = pos + OFF_PHYSICAL_OFFSET;
            let Some(b) = data.get(at..at + 8) else {
                return false;
            };
            let mut a = [0u8; 8];
            a.copy_from_slice(b);
            i64::from_be_bytes(a) == (seg.start + pos as u64) as i64
                && matches!(decode(&data[pos..]), Ok(Decoded::Record(_)))
        }
        BLANK_MAGIC => matches!(decode(&data[pos..]), Ok(Decoded::Blank(_))),
        _ => false,
    }
}

/// Whether the bytes at `at` are one record, in one segment, whose header claims exactly the
/// size up to `end` and whose last 4 bytes (its CRC trailer) are not zeros: a record damaged
/// in place, not a tail zeroed or cut.
fn last_record_damaged_in_place(segs: &[Arc<Segment>], at: u64, end: u64) -> bool {
    let idx = segs.partition_point(|s| s.start <= at);
    let Some(seg) = idx.checked_sub(1).map(|i| &segs[i]) else {
        return false;
    };
    let avail = seg.scan_end() as u64;
    if end <= at + 8 || end > seg.start + avail {
        return false;
    }
    let data = seg.bytes();
    let (pos, stop) = ((at - seg.start) as usize, (end - seg.start) as usize);
    match peek_header(&data[pos..stop]) {
        Ok((size, _)) if size == (end - at) as i64 => data[stop - 4..stop].iter().any(|&b| b != 0),
        _ => false,
    }
}

/// The first sync point after `from` (exclusive) and below `bound`, searching across
/// segments; a segment start counts when a valid record or filler begins there. None when
/// there is none before `bound`.
fn find_sync(segs: &[Arc<Segment>], from: u64, bound: u64) -> Option<u64> {
    let mut idx = segs.partition_point(|s| s.start <= from).checked_sub(1)?;
    let mut pos = (from - segs[idx].start) as usize + 1;
    while idx < segs.len() {
        let seg = &segs[idx];
        if seg.start >= bound {
            return None;
        }
        let data = seg.bytes();
        let avail = seg.scan_end();
        let mut stop = (bound.min(seg.end()) - seg.start) as usize;
        if avail < data.len() {
            // a sync point needs its 8 header bytes below the end of the data: the magic
            // probe below must not touch the unwritten page after it
            stop = stop.min(avail.saturating_sub(7));
        }
        // A magic code starts with 0xDA (records) or 0xCB (fillers) at position + 4.
        let mut p = pos;
        while p < stop {
            match data.get(p + 4) {
                Some(0xDA) | Some(0xCB) => {
                    if unwritten_reason(data, p, avail).is_none() && sync_at(seg, p) {
                        return Some(seg.start + p as u64);
                    }
                }
                Some(_) => {}
                None => break,
            }
            p += 1;
        }
        idx += 1;
        pos = 0;
    }
    None
}

/// Validates records (every CRC, PHYSICALOFFSET == position) from `from`, a record boundary,
/// to `to` (a boundary; None: the end of the last segment). Ranges in `known` (sorted
/// `(start, end)`, quarantined earlier) are skipped unread. A bad record below `durable` is
/// skipped up to the next sync point (a known range's start and `to` count as sync points),
/// split at segment boundaries into [`BadRange`]s; a bad record at or past `durable`, or one
/// with no sync point after it, stops the walk (`stop`).
fn walk(
    segs: &[Arc<Segment>],
    from: u64,
    to: Option<u64>,
    durable: u64,
    known: &[(u64, u64)],
) -> Validation {
    let mut v = Validation {
        end: from,
        ..Validation::default()
    };
    let Some(last) = segs.last() else {
        return v;
    };
    let limit = to.unwrap_or(last.end()).min(last.end());
    let mut at = from;
    // (segment start, its scan end), looked up once per segment
    let mut avail: Option<(u64, usize)> = None;
    'outer: while at < limit {
        let idx = segs.partition_point(|s| s.start <= at);
        let Some(seg) = idx.checked_sub(1).map(|i| &segs[i]) else {
            break;
        };
        if at >= seg.end() {
            break; // past the last segment
        }
        if let Ok(k) = known.binary_search_by_key(&at, |&(s, _)| s) {
            if known[k].1 > at {
                at = known[k].1;
                v.end = at;
                continue;
            }
        }
        let data = seg.bytes();
        let pos = (at - seg.start) as usize;
        let seg_avail = match avail {
            Some((s, a)) if s == seg.start => a,
            _ => {
                let a = seg.scan_end();
                avail = Some((seg.start, a));
                a
            }
        };
        let reason = if let Some(r) = unwritten_reason(data, pos, seg_avail) {
            r
        } else {
            match decode(&data[pos..]) {
                Ok(Decoded::Record(r)) if r.physical_offset == at as i64 => {
                    if at + r.total_size() as u64 > limit {
                        break 'outer; // `to` was not a boundary: stop before the record
                    }
                    v.records += 1;
                    at += r.total_size() as u64;
                    v.end = at;
                    continue;
                }
                Ok(Decoded::Record(r)) => misplaced(r.physical_offset, at),
                Ok(Decoded::Blank(_)) => {
                    at = seg.end();
                    v.end = at;
                    continue;
                }
                Err(e) => {
                    if matches!(peek_header(&data[pos..]), Ok((0, 0))) {
                        END_OF_DATA.to_string()
                    } else {
                        e.to_string()
                    }
                }
            }
        };
        if at >= durable {
            v.stop = Some((at, reason));
            return v;
        }
        // Damage below the durable point: find where valid data resumes.
        let next_known = known
            .get(known.partition_point(|&(s, _)| s <= at))
            .map_or(u64::MAX, |&(s, _)| s);
        let bound = limit.min(next_known);
        let resume = match find_sync(segs, at, bound) {
            Some(q) => q,
            None if bound < u64::MAX && (to.is_some() || next_known == bound) => bound,
            // Nothing valid follows, but the bad bytes are exactly one whole record ending at
            // the durable point (the log's end when the checkpoint was written; fsynced):
            // its header claims that size and its last bytes are there. That is damage to
            // the newest record (a flipped bit), not a torn tail: quarantined with its queue
            // offset, not cut (storage probe: the cut gave its queue offset to the next send,
            // so a consumer already past it never saw that message). Zeros, a shorter file
            // or several records (a zeroed or cut tail) are still cut below.
            None if durable <= bound && last_record_damaged_in_place(segs, at, durable) => durable,
            None => {
                v.stop = Some((at, reason));
                return v;
            }
        };
        let reason = if reason == END_OF_DATA {
            "zeroed bytes where a record should start".to_string()
        } else {
            reason
        };
        // One range per segment the damage touches.
        let mut a = at;
        while a < resume {
            let i = segs.partition_point(|s| s.start <= a).saturating_sub(1);
            let e = resume.min(segs[i].end());
            v.bad.push(BadRange {
                offset: a,
                end: e,
                reason: reason.clone(),
            });
            a = e;
        }
        at = resume;
        v.end = at;
    }
    v.end = v.end.max(at.min(limit));
    v
}

/// Every record this store reads must carry a valid whole-record CRC (it writes one on every
/// append), so a flipped bit anywhere in a record is detected, not only in its body.
fn decode(buf: &[u8]) -> std::result::Result<Decoded<'_>, DecodeError> {
    decode_record_checked(buf, true)
}

fn corrupt(offset: u64, e: &DecodeError) -> StoreError {
    StoreError::CorruptRecord {
        offset,
        reason: e.to_string(),
    }
}

fn unreachable_record(offset: u64) -> Result<()> {
    Err(StoreError::CorruptRecord {
        offset,
        reason: "unexpected record kind".into(),
    })
}
