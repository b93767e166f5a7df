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
//! * Recovery validates every record (magic, sizes, body CRC, PHYSICALOFFSET == position) from a
//!   start point forward; at the first invalid record it cuts: the rest of that segment is zeroed
//!   and later segments are deleted, durably, before the store is used. Non-zero bytes after the
//!   valid end are cut too, so an old record can never be resurrected behind new appends.
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
    BLANK_HEADER_LEN, BLANK_MAGIC,
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
        Ok(Segment {
            start,
            size,
            path,
            file,
            map,
        })
    }

    fn bytes(&self) -> &[u8] {
        &self.map[..]
    }

    fn end(&self) -> u64 {
        self.start + self.size
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
            let last = self.bytes()[from as usize..]
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

/// What recovery found and what it cut.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Where validation started.
    pub scanned_from: u64,
    /// The recovered end (new max offset).
    pub valid_end: u64,
    /// Offset of the first bad byte, if anything was cut.
    pub cut_offset: Option<u64>,
    /// Why: the decode error at `cut_offset`, or "non-zero bytes after the end".
    pub cut_reason: Option<String>,
    /// Non-zero bytes discarded in the segment holding the end.
    pub cut_bytes: u64,
    /// Later segment files deleted.
    pub cut_segments: Vec<String>,
    /// Records validated.
    pub records_scanned: u64,
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
    /// holds `recover_from` (clamped into the existing segments) to the end.
    pub fn open(cfg: CommitLogConfig, recover_from: u64) -> Result<(CommitLog, RecoveryReport)> {
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
        // Segments must be contiguous and aligned; anything after a gap is unreachable.
        let mut segments: Vec<Arc<Segment>> = Vec::new();
        for (i, &start) in starts.iter().enumerate() {
            let aligned = start % cfg.segment_size == 0;
            let contiguous = segments
                .last()
                .map_or(true, |p: &Arc<Segment>| p.end() == start);
            if !aligned || !contiguous {
                for &later in &starts[i..] {
                    let p = cfg.dir.join(segment_name(later));
                    fs::remove_file(&p).at(&p)?;
                    report.cut_segments.push(segment_name(later));
                }
                sync_dir(&cfg.dir)?;
                report.cut_reason = Some(format!(
                    "segment {} is not contiguous with the previous one",
                    segment_name(start)
                ));
                break;
            }
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
        log.recover(recover_from, &mut report)?;
        Ok((log, report))
    }

    /// Refuses, before anything is changed on disk, a directory whose files do not fit the
    /// configured segment size: a misconfigured reopen must not be mistaken for damage and
    /// "repaired" by deleting segments.
    fn check_layout(cfg: &CommitLogConfig, starts: &[u64]) -> Result<()> {
        let mismatch = |why: String| StoreError::Config {
            key: "segment_size",
            reason: format!(
                "{why}; the commitlog in {} was written with another segment size",
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

    fn recover(&mut self, recover_from: u64, report: &mut RecoveryReport) -> Result<()> {
        let segs: Vec<Arc<Segment>> = self.shared.segments().clone();
        let Some(first) = segs.first() else {
            return Ok(());
        };
        let last_start = segs.last().map_or(first.start, |s| s.start);
        let from = recover_from.clamp(first.start, last_start);
        let start_idx = segs.partition_point(|s| s.start <= from).saturating_sub(1);
        report.scanned_from = segs[start_idx].start;
        let mut end = segs[start_idx].start;
        let mut stop: Option<(usize, u64, String)> = None; // (segment idx, pos in seg, reason)
        'segs: for (i, seg) in segs.iter().enumerate().skip(start_idx) {
            let data = seg.bytes();
            let mut pos = 0usize;
            loop {
                let at = seg.start + pos as u64;
                match decode(&data[pos..]) {
                    Ok(Decoded::Record(r)) => {
                        if r.physical_offset != at as i64 {
                            stop = Some((
                                i,
                                pos as u64,
                                format!(
                                    "record claims physical offset {} but sits at {at}",
                                    r.physical_offset
                                ),
                            ));
                            break 'segs;
                        }
                        report.records_scanned += 1;
                        pos += r.total_size();
                        end = seg.start + pos as u64;
                    }
                    Ok(Decoded::Blank(n)) => {
                        pos += n;
                        end = seg.start + pos as u64;
                        break; // next segment
                    }
                    Err(e) => {
                        let zero_header = matches!(peek_header(&data[pos..]), Ok((0, 0)));
                        let reason = if zero_header {
                            "end of data".to_string()
                        } else {
                            e.to_string()
                        };
                        stop = Some((i, pos as u64, reason));
                        break 'segs;
                    }
                }
            }
            if i + 1 < segs.len() && end != seg.end() {
                stop = Some((i, pos as u64, "segment does not end with a filler".into()));
                break;
            }
        }
        // Cut everything after the end: the rest of the segment holding it, and later segments.
        let (cut_idx, cut_pos, reason) = match stop {
            Some(s) => s,
            None => {
                // Ran off the last segment exactly at its end (it ended with a filler).
                self.shared.max_offset.store(end, Ordering::Release);
                self.shared.flushed.store(end, Ordering::Release);
                report.valid_end = end;
                return Ok(());
            }
        };
        let seg = &segs[cut_idx];
        let tail = &seg.bytes()[cut_pos as usize..];
        let nonzero = tail
            .iter()
            .rposition(|&b| b != 0)
            .map_or(0, |p| p as u64 + 1);
        if nonzero > 0 {
            report.cut_offset = Some(seg.start + cut_pos);
            report.cut_reason = Some(if reason == "end of data" {
                "non-zero bytes after the end of data".into()
            } else {
                reason
            });
            report.cut_bytes = nonzero;
            seg.zero_from(cut_pos)?;
        }
        let later: Vec<Arc<Segment>> = segs[cut_idx + 1..].to_vec();
        if !later.is_empty() {
            if report.cut_offset.is_none() {
                report.cut_offset = Some(seg.start + cut_pos);
                report.cut_reason = Some("segments after the end of data".into());
            }
            self.remove_segments(&later, report)?;
        }
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
        for (seg, at, data) in &pending {
            seg.file.write_all_at(data, at - seg.start).at(&seg.path)?;
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
                let (_, magic) = peek_header(&window[p..]).map_err(|e| corrupt(here, &e))?;
                if magic == BLANK_MAGIC {
                    let seg_rest = room - p;
                    if window.len() - p < seg_rest {
                        return Err(StoreError::CorruptRecord {
                            offset: here,
                            reason: "partial end-of-segment filler".into(),
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
                                reason: format!(
                                    "record claims physical offset {}",
                                    r.physical_offset
                                ),
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

    /// The validated record at `offset` (zero-copy). A filler or anything invalid is an error.
    pub fn read_record(&self, offset: u64) -> Result<RecordBuf> {
        let (seg, pos, limit) = self.locate(offset, self.max_offset())?;
        let data = &seg.bytes()[pos..limit];
        match decode(data) {
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
        if offset < max && !at_segment_start {
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

    /// Deletes whole segments that end at or below `offset`, never the one holding the max
    /// offset. Returns the names deleted; the min offset moves to the first remaining segment.
    pub fn delete_segments_before(&mut self, offset: u64) -> Result<Vec<String>> {
        let max = self.max_offset();
        let doomed: Vec<Arc<Segment>> = self
            .shared
            .segments()
            .iter()
            .filter(|s| s.end() <= offset && s.end() <= max && !(s.start <= max && max < s.end()))
            .cloned()
            .collect();
        self.delete_front(&doomed)
    }

    /// Deletes segments whose files were last modified before `older_than` (retention), only
    /// below `limit` (callers pass min(flushed, dispatched)), never the active one.
    pub fn delete_expired(
        &mut self,
        older_than: std::time::SystemTime,
        limit: u64,
    ) -> Result<Vec<String>> {
        let mut doomed = Vec::new();
        for s in self.shared.segments().iter() {
            if s.end() > limit || s.end() > self.max_offset() {
                break;
            }
            let mtime = s.file.metadata().at(&s.path)?.modified().at(&s.path)?;
            if mtime >= older_than {
                break;
            }
            doomed.push(s.clone());
        }
        self.delete_front(&doomed)
    }

    fn delete_front(&mut self, doomed: &[Arc<Segment>]) -> Result<Vec<String>> {
        // The last segment is never deleted: it carries the log's position, and without it a
        // reopen would restart offsets at 0 and hand them out twice.
        let last = self.shared.segments().last().map(|s| s.start);
        let doomed: Vec<&Arc<Segment>> = doomed.iter().filter(|s| Some(s.start) != last).collect();
        let mut names = Vec::new();
        for s in &doomed {
            fs::remove_file(&s.path).at(&s.path)?;
            names.push(segment_name(s.start));
        }
        if doomed.is_empty() {
            return Ok(names);
        }
        sync_dir(&self.cfg.dir)?;
        let mut segs = self.shared.segments_mut();
        segs.retain(|s| !doomed.iter().any(|d| d.start == s.start));
        let new_min = segs.first().map_or(self.max_offset(), |s| s.start);
        self.shared.min_offset.store(new_min, Ordering::Release);
        Ok(names)
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
