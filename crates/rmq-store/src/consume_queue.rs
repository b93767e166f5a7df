//! Consume queue of one (topic, queue id): 20-byte big-endian units
//! `[commitlog physical offset i64][message size i32][tag code i64]` (RocketMQ
//! `ConsumeQueue`, `CQ_STORE_UNIT_SIZE = 20`), kept in fixed-size segment files.
//!
//! * Files are named by their 20-digit zero-padded start *byte* offset (unit index * 20) and
//!   always start at a multiple of `units_per_file`, like RocketMQ. They are created at full
//!   size with `set_len` (sparse); an all-zero unit (size 0) means "not written".
//! * A queue that starts mid-stream (first index not a multiple of `units_per_file`) leaves
//!   blank units at the start of its first file; recovery skips such leading blanks.
//! * Units are written with positioned writes and read with `pread` (`FileExt::read_exact_at`),
//!   not a memory map: files are shortened with `set_len` on truncation (and may be found
//!   short after a crash), and touching a mapped page past the end of a file raises SIGBUS,
//!   whereas `pread` just reports a short read. It also needs no `unsafe`.
//! * Every unit in `[base, max)` is physically present and valid, with strictly increasing
//!   physical offsets. `base <= min`: retention raises `min` without rewriting files, and
//!   truncation covers `[base, max)` so no unit can come back on reopen.

use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::error::{IoContext, Result, StoreError};
use crate::fsutil;

/// Size of one consume-queue unit in bytes.
pub const CQ_UNIT_SIZE: u64 = 20;
/// Largest message size a unit may carry; larger sizes mark a unit as corrupt.
pub const CQ_MAX_MESSAGE_SIZE: u32 = 64 * 1024 * 1024;

/// Units read per `pread` while recovering.
const RECOVERY_CHUNK_UNITS: u64 = 4096;
/// File names are the start byte offset in 20 zero-padded decimal digits.
const FILE_NAME_DIGITS: usize = 20;
/// Largest accepted unit index, so that byte offsets always fit in an i64.
const MAX_INDEX: u64 = (i64::MAX as u64) / CQ_UNIT_SIZE / 2;

/// One consume-queue entry.
/// Duplicated handles of files written since the last sync, and a directory to sync.
pub type DirtyFiles = (Vec<(File, PathBuf)>, Option<PathBuf>);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CqUnit {
    pub phys_offset: u64,
    pub size: u32,
    pub tag_code: i64,
}

impl CqUnit {
    fn encode(&self) -> [u8; CQ_UNIT_SIZE as usize] {
        let mut b = [0u8; CQ_UNIT_SIZE as usize];
        b[0..8].copy_from_slice(&self.phys_offset.to_be_bytes());
        b[8..12].copy_from_slice(&self.size.to_be_bytes());
        b[12..20].copy_from_slice(&self.tag_code.to_be_bytes());
        b
    }

    /// Decodes the first 20 bytes of `b` (callers pass exact 20-byte chunks).
    fn decode(b: &[u8]) -> CqUnit {
        let mut phys = [0u8; 8];
        let mut size = [0u8; 4];
        let mut tag = [0u8; 8];
        phys.copy_from_slice(&b[0..8]);
        size.copy_from_slice(&b[8..12]);
        tag.copy_from_slice(&b[12..20]);
        CqUnit {
            phys_offset: u64::from_be_bytes(phys),
            size: u32::from_be_bytes(size),
            tag_code: i64::from_be_bytes(tag),
        }
    }

    /// Shape check: size in (0, 64 MiB] and a non-negative i64 physical offset.
    fn shape_error(&self) -> Option<String> {
        if self.size == 0 || self.size > CQ_MAX_MESSAGE_SIZE {
            Some(format!(
                "message size {} outside (0, {CQ_MAX_MESSAGE_SIZE}]",
                self.size
            ))
        } else if self.phys_offset > i64::MAX as u64 {
            Some(format!("physical offset {} exceeds i64", self.phys_offset))
        } else {
            None
        }
    }
}

impl From<CqUnit> for (CqUnit, Option<String>) {
    fn from(u: CqUnit) -> Self {
        (u, None)
    }
}

/// What `ConsumeQueue::open` had to discard.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CqRecovery {
    /// How many non-empty units recovery discarded.
    pub cut_units: u64,
    /// Files that cannot be the result of a crash: a missing file between two others, or a
    /// file shorter than its full size that is not the last one. The store rebuilds such a
    /// queue from the commitlog.
    pub damage: Option<String>,
}

#[derive(Debug)]
struct Segment {
    /// Index of the file's first unit (a multiple of `units_per_file`).
    start: u64,
    path: PathBuf,
    file: File,
    /// Written since the last fdatasync.
    dirty: bool,
}

impl Segment {
    /// Fills `buf` with the units from the file's unit `first` on. A file found shorter than
    /// the units it must hold (cut under the running store: damage) is reported as such,
    /// naming the file and what heals it, instead of as a bare short read; nothing is made up
    /// for the missing units (a reader must not skip records the commitlog still holds).
    fn read_units(&self, buf: &mut [u8], first: u64) -> Result<()> {
        let pos = first * CQ_UNIT_SIZE;
        match self.file.read_exact_at(buf, pos) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                let len = self.file.metadata().map(|m| m.len()).unwrap_or(0);
                Err(StoreError::CorruptFile {
                    path: self.path.clone(),
                    reason: format!(
                        "the file is {len} bytes, shorter than the units it holds (bytes {pos} \
                         to {}): it was cut while the store ran; the records are still in the \
                         commitlog, and a restart of the store rebuilds the queue from them",
                        pos + buf.len() as u64
                    ),
                })
            }
            Err(e) => Err(e).at(&self.path),
        }
    }
}

/// The consume queue of one (topic, queue id).
#[derive(Debug)]
pub struct ConsumeQueue {
    dir: PathBuf,
    units_per_file: u64,
    file_bytes: u64,
    /// Contiguous segments, ascending by start.
    segments: Vec<Segment>,
    /// First physically valid unit; `base <= min <= max`.
    base: u64,
    min: u64,
    max: u64,
    /// The unit at `max - 1` when `base < max`.
    last: Option<CqUnit>,
    /// A file was created in `dir` since the last flush.
    dir_dirty: bool,
    /// Write-behind buffer: encoded units `[wbuf_start, max)`, all in the last file, not yet
    /// written to it. Readers are served from it; it is written when full, before any other
    /// file operation, and by `flush`/`take_dirty`, so a checkpoint only ever counts units
    /// that reached the file.
    wbuf: Vec<u8>,
    wbuf_start: u64,
}

/// Bytes a queue buffers before writing (about 200 units): one write per buffer instead of one
/// per dispatch call, with bounded memory per queue.
const WBUF_BYTES: usize = 4096;

impl Drop for ConsumeQueue {
    fn drop(&mut self) {
        // Best effort: units not written are redispatched from the checkpoint on reopen.
        let _ = self.write_buffer();
    }
}

fn file_name(start_index: u64) -> String {
    format!(
        "{:0width$}",
        start_index * CQ_UNIT_SIZE,
        width = FILE_NAME_DIGITS
    )
}

fn is_zero(b: &[u8]) -> bool {
    b.iter().all(|&x| x == 0)
}

/// Grows or shrinks `file` to exactly `len` bytes.
fn set_len(seg_path: &Path, file: &File, len: u64) -> Result<()> {
    file.set_len(len).at(seg_path)
}

impl ConsumeQueue {
    /// Opens (creating the dir if needed) and recovers: max = one past the last valid unit.
    ///
    /// Valid units: size > 0 and <= 64 MiB, phys_offset strictly increasing across the queue.
    /// Blank units at the start of the first file (a queue that started mid-stream) are
    /// skipped. Scanning stops at the first empty or invalid unit, at the end of a short file,
    /// or at a missing file; every non-zero unit after that point is cut durably (zeroed +
    /// fsync, later files deleted + dir fsync) and counted. min = the first valid unit, which is
    /// the first file's start unless that file begins with blanks.
    pub fn open(dir: &Path, units_per_file: u64) -> Result<(ConsumeQueue, CqRecovery)> {
        if units_per_file == 0 || units_per_file > MAX_INDEX {
            return Err(StoreError::Config {
                key: "units_per_file",
                reason: format!("{units_per_file} is not in [1, {MAX_INDEX}]"),
            });
        }
        let file_bytes = units_per_file * CQ_UNIT_SIZE;
        if !dir.is_dir() {
            fs::create_dir_all(dir).at(dir)?;
            if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
                fsutil::sync_dir(parent)?;
            }
        }
        let segments = list_segments(dir, units_per_file)?;
        let mut cq = ConsumeQueue {
            dir: dir.to_path_buf(),
            units_per_file,
            file_bytes,
            segments,
            base: 0,
            min: 0,
            max: 0,
            last: None,
            dir_dirty: false,
            wbuf: Vec::new(),
            wbuf_start: 0,
        };
        let recovery = cq.recover()?;
        Ok((cq, recovery))
    }

    /// Lowest readable index.
    pub fn min_offset(&self) -> u64 {
        self.min
    }

    /// One past the highest readable index: the next index to write.
    pub fn max_offset(&self) -> u64 {
        self.max
    }

    /// The unit at `max_offset() - 1`, or None when the queue is empty.
    pub fn last_unit(&self) -> Option<CqUnit> {
        if self.min < self.max {
            self.last
        } else {
            None
        }
    }

    /// The directory holding the segment files.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Appends `unit` at `index`.
    ///
    /// `index` must equal `max_offset()`, except when the queue is empty: then any index is
    /// accepted and becomes min = max = index (existing files are deleted first when the index
    /// or physical offset does not continue them). Otherwise
    /// `OffsetOutOfRange { offset: index, min, max }`. The physical offset must exceed the
    /// last unit's and the size must be in (0, 64 MiB], else `CorruptRecord` (offset = index).
    pub fn append(&mut self, index: u64, unit: CqUnit) -> Result<()> {
        self.append_batch(&[(index, unit)])
    }

    /// Appends many units with one positioned write per run of contiguous units in a file (the
    /// dispatcher's path). Each unit is checked as by [`ConsumeQueue::append`]; on an error the
    /// units before it are kept.
    pub fn append_batch(&mut self, units: &[(u64, CqUnit)]) -> Result<()> {
        let mut i = 0;
        while i < units.len() {
            let (index, unit) = units[i];
            self.check_append(index, &unit)?;
            let k = self.segment_for_write(index)?;
            let seg_start = self.segments[k].start;
            let seg_end = seg_start + self.units_per_file;
            if !self.wbuf.is_empty() && self.wbuf_start < seg_start {
                self.write_buffer()?; // the buffer belongs to the previous file
            }
            if self.wbuf.is_empty() {
                self.wbuf_start = index;
            }
            let mut buf = std::mem::take(&mut self.wbuf);
            buf.extend_from_slice(&unit.encode());
            let mut last = unit;
            let mut next = index + 1;
            i += 1;
            // Extend the run while the next unit continues it in the same file; anything else
            // goes through the full checks on the next turn of the outer loop.
            while i < units.len()
                && units[i].0 == next
                && next < seg_end
                && units[i].1.shape_error().is_none()
                && units[i].1.phys_offset > last.phys_offset
            {
                last = units[i].1;
                buf.extend_from_slice(&last.encode());
                next += 1;
                i += 1;
            }
            self.wbuf = buf;
            self.max = next;
            self.last = Some(last);
            if self.wbuf.len() >= WBUF_BYTES {
                self.write_buffer()?;
            }
        }
        Ok(())
    }

    /// Writes the buffered units to their file.
    fn write_buffer(&mut self) -> Result<()> {
        if self.wbuf.is_empty() {
            return Ok(());
        }
        let start = self.wbuf_start;
        let seg = self
            .segments
            .iter_mut()
            .rev()
            .find(|s| s.start <= start)
            .ok_or_else(|| StoreError::CorruptFile {
                path: self.dir.clone(),
                reason: format!("no file for buffered consume-queue index {start}"),
            })?;
        seg.file
            .write_all_at(&self.wbuf, (start - seg.start) * CQ_UNIT_SIZE)
            .at(&seg.path)?;
        seg.dirty = true;
        self.wbuf.clear();
        Ok(())
    }

    /// The buffered unit at `index`, if it is buffered.
    fn buffered(&self, index: u64) -> Option<CqUnit> {
        if self.wbuf.is_empty() || index < self.wbuf_start {
            return None;
        }
        let at = usize::try_from((index - self.wbuf_start) * CQ_UNIT_SIZE).ok()?;
        self.wbuf
            .get(at..at + CQ_UNIT_SIZE as usize)
            .map(CqUnit::decode)
    }

    /// The checks of [`ConsumeQueue::append`]; resets an empty queue that starts elsewhere.
    fn check_append(&mut self, index: u64, unit: &CqUnit) -> Result<()> {
        if index >= MAX_INDEX {
            return Err(self.out_of_range(index));
        }
        if let Some(reason) = unit.shape_error() {
            return Err(StoreError::CorruptRecord {
                offset: index,
                reason,
            });
        }
        if self.min == self.max {
            let continues =
                index == self.max && self.last.map_or(true, |l| unit.phys_offset > l.phys_offset);
            if !continues {
                self.reset(index)?;
            }
        } else {
            if index != self.max {
                return Err(self.out_of_range(index));
            }
            if let Some(l) = self.last {
                if unit.phys_offset <= l.phys_offset {
                    return Err(StoreError::CorruptRecord {
                        offset: index,
                        reason: format!(
                            "physical offset {} not above the previous unit's {}",
                            unit.phys_offset, l.phys_offset
                        ),
                    });
                }
            }
        }
        Ok(())
    }

    /// The unit at `index`; `OffsetOutOfRange` outside `[min, max)`.
    pub fn get(&self, index: u64) -> Result<CqUnit> {
        if index < self.min || index >= self.max {
            return Err(self.out_of_range(index));
        }
        self.read_unit(index)
    }

    /// Up to `max_count` units starting at `index`, stopping at max. `index == max` gives an
    /// empty Vec; `OffsetOutOfRange` when `index < min` or `index > max`.
    pub fn get_range(&self, index: u64, max_count: usize) -> Result<Vec<CqUnit>> {
        self.range_with(index, max_count, checked_unit)
    }

    /// As [`ConsumeQueue::get_range`], but a unit whose shape is impossible (a size outside
    /// (0, 64 MiB], a physical offset past i64) comes back with the reason instead of failing
    /// the whole range: a reader skips that one unit (consume-queue damage found while
    /// running) and serves the others.
    pub fn get_range_lenient(
        &self,
        index: u64,
        max_count: usize,
    ) -> Result<Vec<(CqUnit, Option<String>)>> {
        self.range_with(index, max_count, |chunk, _| {
            let u = CqUnit::decode(chunk);
            let why = u.shape_error();
            Ok((u, why))
        })
    }

    fn range_with<T: From<CqUnit>>(
        &self,
        index: u64,
        max_count: usize,
        unit: impl Fn(&[u8], u64) -> Result<T>,
    ) -> Result<Vec<T>> {
        if index < self.min || index > self.max {
            return Err(self.out_of_range(index));
        }
        let count = (self.max - index).min(u64::try_from(max_count).unwrap_or(u64::MAX));
        let end = index + count;
        let mut out = Vec::with_capacity(usize::try_from(count).unwrap_or(0));
        let mut buf = Vec::new();
        let mut i = index;
        while i < end {
            if let Some(u) = self.buffered(i) {
                out.push(T::from(u));
                i += 1;
                continue;
            }
            let seg = self.segment_of(i)?;
            let mut file_end = (seg.start + self.units_per_file).min(end);
            if !self.wbuf.is_empty() && self.wbuf_start > i {
                file_end = file_end.min(self.wbuf_start);
            }
            let n = file_end - i;
            buf.resize(usize::try_from(n * CQ_UNIT_SIZE).unwrap_or(0), 0);
            seg.read_units(&mut buf, i - seg.start)?;
            for (j, chunk) in buf.chunks_exact(CQ_UNIT_SIZE as usize).enumerate() {
                out.push(unit(chunk, i + j as u64)?);
            }
            i += n;
        }
        Ok(out)
    }

    /// The units (with their indexes) whose physical offsets lie in `[from, to)`, in `[min, max)`.
    pub fn units_in_phys_range(&self, from: u64, to: u64) -> Result<Vec<(u64, CqUnit)>> {
        let mut out = Vec::new();
        let mut i = self.lower_bound(self.min, self.max, |u| u.phys_offset >= from)?;
        while i < self.max {
            let u = self.read_unit(i)?;
            if u.phys_offset >= to {
                break;
            }
            out.push((i, u));
            i += 1;
        }
        Ok(out)
    }

    /// Replaces the units `[from, from + units.len())` (all in `[min, max)`) in place: the
    /// repair of damaged units with the records found for them. The new units must be in
    /// strictly increasing physical order and fit between the units around the run. Nothing
    /// is written on a refusal.
    pub fn rewrite_run(&mut self, from: u64, units: &[CqUnit]) -> Result<()> {
        let to = from + units.len() as u64;
        if units.is_empty() {
            return Ok(());
        }
        if from < self.min || to > self.max {
            return Err(self.out_of_range(if from < self.min { from } else { to - 1 }));
        }
        if let Some(reason) = units.iter().find_map(|u| u.shape_error()) {
            return Err(StoreError::CorruptRecord {
                offset: from,
                reason,
            });
        }
        let below = if from > self.base {
            Some(self.read_unit(from - 1)?)
        } else {
            None
        };
        let above = if to < self.max {
            Some(self.read_unit(to)?)
        } else {
            None
        };
        let ordered = units
            .windows(2)
            .all(|w| w[0].phys_offset < w[1].phys_offset)
            && below.map_or(true, |b| b.phys_offset < units[0].phys_offset)
            && above.map_or(true, |a| units[units.len() - 1].phys_offset < a.phys_offset);
        if !ordered {
            return Err(StoreError::InvalidArgument(format!(
                "units {from}..{to} would break the physical order of the queue"
            )));
        }
        self.write_buffer()?;
        for (k, unit) in units.iter().enumerate() {
            let index = from + k as u64;
            let seg = self.segment_of(index)?;
            seg.file
                .write_all_at(&unit.encode(), (index - seg.start) * CQ_UNIT_SIZE)
                .at(&seg.path)?;
        }
        let mut index = from;
        while index < to {
            let seg = self.segment_of(index)?;
            seg.file.sync_data().at(&seg.path)?;
            index = seg.start + self.units_per_file;
        }
        if to == self.max {
            self.last = units.last().copied();
        }
        Ok(())
    }

    /// Deletes every file: the queue becomes empty and accepts any first index (a rebuild
    /// from the commitlog).
    pub fn clear(&mut self) -> Result<()> {
        self.reset(0)
    }

    /// Drops every unit with `phys_offset >= phys`, durably: the memory state first (readers
    /// never see dropped units), then the partial file's tail is cut (set_len down and back up,
    /// fsync), files wholly beyond the cut are deleted and the directory is fsynced.
    /// Physically present units below `min` (hidden by retention) are cut too.
    /// Returns how many readable units (in `[min, max)`) were dropped.
    pub fn truncate_by_phys_offset(&mut self, phys: u64) -> Result<u64> {
        self.write_buffer()?;
        let cut = self.lower_bound(self.base, self.max, |u| u.phys_offset >= phys)?;
        if cut >= self.max {
            return Ok(0);
        }
        let dropped = self.max - cut.max(self.min);
        let new_last = if cut > self.base {
            Some(self.read_unit(cut - 1)?)
        } else {
            None
        };
        self.max = cut;
        self.min = self.min.min(cut);
        self.last = new_last;
        self.cut_from(cut)?;
        Ok(dropped)
    }

    /// Smallest index in `[min, max)` whose store timestamp is `>= ts`, by binary search
    /// (timestamps are treated as non-decreasing). A unit whose timestamp is not known (it
    /// cannot be read, or `store_ts_of` returns None: a damaged record) decides nothing: the
    /// first known unit after it stands in for it, and when none is known up to the search's
    /// upper bound the search goes left, so an unreadable unit never makes the answer skip
    /// readable units before it. (A caller that knows a record is gone to retention reports
    /// it as `i64::MIN`: older than any `ts`.) Returns `max_offset()` if there is none.
    pub fn search_by_timestamp(
        &self,
        ts: i64,
        store_ts_of: &mut dyn FnMut(&CqUnit) -> Option<i64>,
    ) -> u64 {
        let (mut lo, mut hi) = (self.min, self.max);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let mut probe = mid;
            let known = loop {
                if probe >= hi {
                    break None;
                }
                match self.read_unit(probe).ok().and_then(|u| store_ts_of(&u)) {
                    Some(t) => break Some(t),
                    None => probe += 1,
                }
            };
            match known {
                Some(t) if t < ts => lo = probe + 1,
                _ => hi = mid,
            }
        }
        lo
    }

    /// Retention: raises min to the first unit with `phys_offset >= commitlog_min` (to max if
    /// none) and deletes, oldest first, whole files all of whose units are below min. The last
    /// file is never deleted (it holds max, or max - 1 when max is at a file boundary), so
    /// max survives a reopen. Returns how many files were deleted.
    ///
    /// Writes nothing: the buffered tail (always in the last file, never deleted) is read
    /// from memory, so retention works on a full disk, where it is the only way out.
    pub fn delete_before_phys(&mut self, commitlog_min: u64) -> Result<usize> {
        let new_min = self.lower_bound(self.min, self.max, |u| u.phys_offset >= commitlog_min)?;
        self.min = self.min.max(new_min);
        let mut deleted = 0;
        while self.segments.len() > 1 && self.segments[0].start + self.units_per_file <= self.min {
            let seg = self.segments.remove(0);
            fs::remove_file(&seg.path).at(&seg.path)?;
            deleted += 1;
        }
        if deleted > 0 {
            if let Some(first) = self.segments.first() {
                self.base = self.base.max(first.start);
            }
            fsutil::sync_dir(&self.dir)?;
        }
        Ok(deleted)
    }

    /// fdatasyncs the files written since the last flush (and the directory when files were
    /// created).
    pub fn flush(&mut self) -> Result<()> {
        self.write_buffer()?;
        for seg in self.segments.iter_mut().filter(|s| s.dirty) {
            seg.file.sync_data().at(&seg.path)?;
            seg.dirty = false;
        }
        if self.dir_dirty {
            fsutil::sync_dir(&self.dir)?;
            self.dir_dirty = false;
        }
        Ok(())
    }

    /// Hands out what `flush` would sync, so a caller can sync it without holding the lock
    /// that guards this queue: duplicated handles of the files written since the last call, and
    /// the directory when files were created. The dirty marks are cleared; a caller whose sync
    /// fails must treat the queue as not durable (the store stops writing checkpoints).
    pub fn take_dirty(&mut self) -> Result<DirtyFiles> {
        self.write_buffer()?;
        let mut files = Vec::new();
        for seg in self.segments.iter_mut().filter(|s| s.dirty) {
            files.push((seg.file.try_clone().at(&seg.path)?, seg.path.clone()));
            seg.dirty = false;
        }
        let dir = self.dir_dirty.then(|| self.dir.clone());
        self.dir_dirty = false;
        Ok((files, dir))
    }

    // ---- internals ----

    fn out_of_range(&self, index: u64) -> StoreError {
        StoreError::OffsetOutOfRange {
            offset: index,
            min: self.min,
            max: self.max,
        }
    }

    /// The segment holding `index`, which must be physically covered.
    fn segment_of(&self, index: u64) -> Result<&Segment> {
        let first = self.segments.first().map_or(u64::MAX, |s| s.start);
        let seg = index
            .checked_sub(first)
            .and_then(|d| usize::try_from(d / self.units_per_file).ok())
            .and_then(|k| self.segments.get(k))
            .filter(|s| s.start <= index && index < s.start + self.units_per_file);
        seg.ok_or_else(|| StoreError::CorruptFile {
            path: self
                .dir
                .join(file_name(index - index % self.units_per_file)),
            reason: format!("no segment file holds consume-queue index {index}"),
        })
    }

    /// Reads and checks one unit, without the `[min, max)` check.
    fn read_unit(&self, index: u64) -> Result<CqUnit> {
        if let Some(u) = self.buffered(index) {
            return Ok(u);
        }
        let seg = self.segment_of(index)?;
        let mut b = [0u8; CQ_UNIT_SIZE as usize];
        seg.read_units(&mut b, index - seg.start)?;
        checked_unit(&b, index)
    }

    /// First index in `[lo, hi)` whose unit satisfies `pred` (monotone), or `hi`.
    fn lower_bound(&self, lo: u64, hi: u64, pred: impl Fn(&CqUnit) -> bool) -> Result<u64> {
        let (mut lo, mut hi) = (lo, hi);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if pred(&self.read_unit(mid)?) {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        Ok(lo)
    }

    /// Returns the position in `segments` of the file for `index` (== max), creating the
    /// file at full (sparse) size when `index` starts a new one.
    fn segment_for_write(&mut self, index: u64) -> Result<usize> {
        let start = index - index % self.units_per_file;
        if let Some(last) = self.segments.last() {
            if last.start == start {
                return Ok(self.segments.len() - 1);
            }
            if last.start + self.units_per_file != start {
                return Err(StoreError::CorruptFile {
                    path: last.path.clone(),
                    reason: format!("index {index} does not follow the last segment"),
                });
            }
        }
        let path = self.dir.join(file_name(start));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .at(&path)?;
        set_len(&path, &file, self.file_bytes)?;
        self.dir_dirty = true;
        self.segments.push(Segment {
            start,
            path,
            file,
            dirty: true,
        });
        Ok(self.segments.len() - 1)
    }

    /// Deletes every file and restarts the (empty) queue at `index`.
    fn reset(&mut self, index: u64) -> Result<()> {
        self.wbuf.clear();
        self.base = index;
        self.min = index;
        self.max = index;
        self.last = None;
        let had_files = !self.segments.is_empty();
        while let Some(seg) = self.segments.pop() {
            fs::remove_file(&seg.path).at(&seg.path)?;
        }
        if had_files {
            fsutil::sync_dir(&self.dir)?;
        }
        Ok(())
    }

    /// Durably removes every unit at or after `cut`: the tail of the file holding `cut` is
    /// dropped (shrink + regrow to full size, fsync), later files are deleted newest first,
    /// then the directory is fsynced.
    fn cut_from(&mut self, cut: u64) -> Result<()> {
        let upf = self.units_per_file;
        let file_bytes = self.file_bytes;
        if let Some(seg) = self
            .segments
            .iter_mut()
            .find(|s| s.start < cut && cut < s.start + upf)
        {
            set_len(&seg.path, &seg.file, (cut - seg.start) * CQ_UNIT_SIZE)?;
            set_len(&seg.path, &seg.file, file_bytes)?;
            seg.file.sync_all().at(&seg.path)?;
            seg.dirty = false;
        }
        self.remove_files_from(cut)?;
        Ok(())
    }

    /// Deletes the files that start at or after `index`, newest first, then syncs the directory.
    fn remove_files_from(&mut self, index: u64) -> Result<()> {
        let mut deleted = false;
        while self.segments.last().is_some_and(|s| s.start >= index) {
            if let Some(seg) = self.segments.pop() {
                fs::remove_file(&seg.path).at(&seg.path)?;
                deleted = true;
            }
        }
        if deleted {
            fsutil::sync_dir(&self.dir)?;
        }
        Ok(())
    }

    /// Scans the segments, sets base/min/max/last, and durably cuts everything after the
    /// first empty or invalid unit.
    fn recover(&mut self) -> Result<CqRecovery> {
        #[derive(PartialEq)]
        enum Phase {
            Leading,
            Valid,
            Cut,
        }
        let upf = self.units_per_file;
        let Some(first_start) = self.segments.first().map(|s| s.start) else {
            return Ok(CqRecovery::default());
        };
        let mut phase = Phase::Leading;
        let mut base = first_start;
        let mut stop = first_start;
        let mut prev: Option<CqUnit> = None;
        let mut cut_units = 0u64;
        let mut damage: Option<String> = None;
        // Per segment: its length, and whether non-zero bytes lie at or after `stop` in it.
        let mut lens = Vec::with_capacity(self.segments.len());
        let mut tail_nonzero = vec![false; self.segments.len()];
        let mut buf = Vec::new();

        let mut prev_end: Option<u64> = None;
        for (k, seg) in self.segments.iter().enumerate() {
            if let Some(expected) = prev_end.filter(|_| phase != Phase::Cut) {
                if phase == Phase::Leading {
                    // The first file holds no unit at all: the queue is empty.
                    stop = first_start;
                    phase = Phase::Cut;
                } else if seg.start != expected {
                    // A missing file: the units it should hold are empty.
                    stop = expected;
                    phase = Phase::Cut;
                    damage.get_or_insert(format!("file {} is missing", file_name(expected)));
                }
            }
            prev_end = Some(seg.start + upf);
            let len = seg.file.metadata().at(&seg.path)?.len();
            lens.push(len);
            if len < self.file_bytes && k + 1 < self.segments.len() {
                damage.get_or_insert(format!(
                    "{} is {len} bytes, not {}, and is not the last file",
                    seg.path.display(),
                    self.file_bytes
                ));
            }
            let avail = len.min(self.file_bytes);
            let whole_units = avail / CQ_UNIT_SIZE;
            let mut j = 0;
            while j < whole_units {
                let n = RECOVERY_CHUNK_UNITS.min(whole_units - j);
                buf.resize(usize::try_from(n * CQ_UNIT_SIZE).unwrap_or(0), 0);
                seg.file
                    .read_exact_at(&mut buf, j * CQ_UNIT_SIZE)
                    .at(&seg.path)?;
                for (c, chunk) in buf.chunks_exact(CQ_UNIT_SIZE as usize).enumerate() {
                    let idx = seg.start + j + c as u64;
                    let zero = is_zero(chunk);
                    let unit = CqUnit::decode(chunk);
                    let valid = unit.shape_error().is_none()
                        && prev.map_or(true, |p| unit.phys_offset > p.phys_offset);
                    match phase {
                        Phase::Leading if zero => {}
                        Phase::Leading | Phase::Valid if valid && !zero => {
                            if phase == Phase::Leading {
                                base = idx;
                                phase = Phase::Valid;
                            }
                            prev = Some(unit);
                        }
                        Phase::Leading | Phase::Valid => {
                            if phase == Phase::Leading {
                                base = idx;
                            }
                            stop = idx;
                            phase = Phase::Cut;
                            if !zero {
                                cut_units += 1;
                                tail_nonzero[k] = true;
                            }
                        }
                        Phase::Cut => {
                            if !zero {
                                cut_units += 1;
                                tail_nonzero[k] = true;
                            }
                        }
                    }
                }
                j += n;
            }
            // A trailing partial unit (torn write) or a short file ends the valid run.
            let partial = avail - whole_units * CQ_UNIT_SIZE;
            if partial > 0 {
                buf.resize(usize::try_from(partial).unwrap_or(0), 0);
                seg.file
                    .read_exact_at(&mut buf, whole_units * CQ_UNIT_SIZE)
                    .at(&seg.path)?;
                let zero = is_zero(&buf);
                if phase == Phase::Valid || (phase == Phase::Leading && !zero) {
                    if phase == Phase::Leading {
                        base = seg.start + whole_units;
                    }
                    stop = seg.start + whole_units;
                    phase = Phase::Cut;
                }
                if !zero && phase == Phase::Cut {
                    cut_units += 1;
                    tail_nonzero[k] = true;
                }
            }
            if phase == Phase::Valid && whole_units < upf {
                stop = seg.start + whole_units;
                phase = Phase::Cut;
            }
            if len > self.file_bytes {
                // Bytes past the file's nominal size are not units; drop them.
                tail_nonzero[k] = true;
            }
        }
        match phase {
            Phase::Leading => stop = first_start,
            Phase::Valid => {
                if let Some(last) = self.segments.last() {
                    stop = last.start + upf;
                }
            }
            Phase::Cut => {}
        }
        if stop <= base {
            base = stop;
            prev = None;
        }

        // Durable cut: the tail of the file holding `stop`, then every later file.
        for (k, seg) in self.segments.iter().enumerate() {
            if seg.start < stop && stop < seg.start + upf {
                if tail_nonzero[k] {
                    set_len(&seg.path, &seg.file, (stop - seg.start) * CQ_UNIT_SIZE)?;
                    set_len(&seg.path, &seg.file, self.file_bytes)?;
                    seg.file.sync_all().at(&seg.path)?;
                } else if lens[k] != self.file_bytes {
                    set_len(&seg.path, &seg.file, self.file_bytes)?;
                }
            }
        }
        self.remove_files_from(stop)?;
        self.base = base;
        self.min = base;
        self.max = stop;
        self.last = prev;
        Ok(CqRecovery { cut_units, damage })
    }
}

/// Decodes a unit read from `[base, max)`; an empty or malformed one means the file changed
/// under us.
fn checked_unit(chunk: &[u8], index: u64) -> Result<CqUnit> {
    let unit = CqUnit::decode(chunk);
    match unit.shape_error() {
        None => Ok(unit),
        Some(reason) => Err(StoreError::CorruptRecord {
            offset: index,
            reason,
        }),
    }
}

/// Lists the segment files of `dir`, ascending. Names that are not 20 decimal digits are
/// ignored; a start offset not aligned to the file size is an error.
fn list_segments(dir: &Path, units_per_file: u64) -> Result<Vec<Segment>> {
    let file_bytes = units_per_file * CQ_UNIT_SIZE;
    let mut found = Vec::new();
    for entry in fs::read_dir(dir).at(dir)? {
        let entry = entry.at(dir)?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.len() != FILE_NAME_DIGITS || !name.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let path = entry.path();
        if !entry.file_type().at(&path)?.is_file() {
            continue;
        }
        let offset: u64 = name.parse().map_err(|_| StoreError::CorruptFile {
            path: path.clone(),
            reason: "file name is not a u64 byte offset".to_string(),
        })?;
        if offset % file_bytes != 0 || offset / CQ_UNIT_SIZE >= MAX_INDEX {
            return Err(StoreError::CorruptFile {
                path,
                reason: format!(
                    "start offset {offset} is not a multiple of the file size {file_bytes}"
                ),
            });
        }
        found.push((offset / CQ_UNIT_SIZE, path));
    }
    found.sort_by_key(|(start, _)| *start);
    let mut segments = Vec::with_capacity(found.len());
    for (start, path) in found {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .at(&path)?;
        segments.push(Segment {
            start,
            path,
            file,
            dirty: false,
        });
    }
    Ok(segments)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    fn unit(phys: u64) -> CqUnit {
        CqUnit {
            phys_offset: phys,
            size: 100 + (phys % 7) as u32,
            tag_code: -(phys as i64) * 31,
        }
    }

    fn phys_of(i: u64) -> u64 {
        1_000 + i * 100
    }

    /// Opens `dir` with `upf` units per file and appends units `from..to` (phys_of(i)).
    fn filled(dir: &Path, upf: u64, from: u64, to: u64) -> ConsumeQueue {
        let (mut cq, rec) = ConsumeQueue::open(dir, upf).unwrap();
        assert_eq!(rec.cut_units, 0);
        for i in from..to {
            cq.append(i, unit(phys_of(i))).unwrap();
        }
        cq.flush().unwrap();
        cq
    }

    fn files(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        v.sort();
        v
    }

    fn seg_path(dir: &Path, start_index: u64) -> PathBuf {
        dir.join(file_name(start_index))
    }

    fn write_raw(dir: &Path, upf: u64, index: u64, bytes: &[u8]) {
        let start = index - index % upf;
        let f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(seg_path(dir, start))
            .unwrap();
        f.write_all_at(bytes, (index - start) * CQ_UNIT_SIZE)
            .unwrap();
    }

    fn read_raw(dir: &Path, upf: u64, index: u64) -> Vec<u8> {
        let start = index - index % upf;
        let data = fs::read(seg_path(dir, start)).unwrap();
        let pos = ((index - start) * CQ_UNIT_SIZE) as usize;
        data[pos..pos + CQ_UNIT_SIZE as usize].to_vec()
    }

    fn is_out_of_range(r: Result<impl std::fmt::Debug>) -> bool {
        matches!(r, Err(StoreError::OffsetOutOfRange { .. }))
    }

    #[test]
    fn unit_encoding_is_big_endian() {
        let u = CqUnit {
            phys_offset: 0x0102_0304_0506_0708,
            size: 0x0A0B_0C0D,
            tag_code: -1,
        };
        let b = u.encode();
        assert_eq!(&b[0..8], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(&b[8..12], &[0x0A, 0x0B, 0x0C, 0x0D]);
        assert_eq!(&b[12..20], &[0xFF; 8]);
        assert_eq!(CqUnit::decode(&b), u);
    }

    #[test]
    fn append_rollover_get_and_get_range() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("consumequeue/TopicA/0");
        let mut cq = filled(&dir, 4, 0, 11);
        assert_eq!(cq.dir(), dir.as_path());
        assert_eq!((cq.min_offset(), cq.max_offset()), (0, 11));
        assert_eq!(
            files(&dir),
            vec![
                "00000000000000000000",
                "00000000000000000080",
                "00000000000000000160"
            ]
        );
        for name in files(&dir) {
            assert_eq!(fs::metadata(dir.join(name)).unwrap().len(), 80);
        }
        for i in 0..11 {
            assert_eq!(cq.get(i).unwrap(), unit(phys_of(i)));
        }
        assert_eq!(cq.last_unit(), Some(unit(phys_of(10))));
        let r = cq.get_range(2, 7).unwrap();
        assert_eq!(r, (2..9).map(|i| unit(phys_of(i))).collect::<Vec<_>>());
        assert_eq!(cq.get_range(9, 100).unwrap().len(), 2);
        assert!(cq.get_range(11, 5).unwrap().is_empty());
        assert!(cq.get_range(3, 0).unwrap().is_empty());
        assert!(is_out_of_range(cq.get_range(12, 5)));
        assert!(is_out_of_range(cq.get(11)));

        // Wrong index, non-increasing phys, bad size.
        match cq.append(12, unit(phys_of(12))) {
            Err(StoreError::OffsetOutOfRange { offset, min, max }) => {
                assert_eq!((offset, min, max), (12, 0, 11));
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            cq.append(11, unit(phys_of(10))),
            Err(StoreError::CorruptRecord { offset: 11, .. })
        ));
        let mut bad = unit(phys_of(11));
        bad.size = 0;
        assert!(matches!(
            cq.append(11, bad),
            Err(StoreError::CorruptRecord { .. })
        ));
        bad.size = CQ_MAX_MESSAGE_SIZE + 1;
        assert!(cq.append(11, bad).is_err());
        assert_eq!(cq.max_offset(), 11);
        cq.append(11, unit(phys_of(11))).unwrap();
        assert_eq!(cq.get(11).unwrap(), unit(phys_of(11)));
    }

    #[test]
    fn units_per_file_one_and_zero() {
        let tmp = tempfile::tempdir().unwrap();
        assert!(matches!(
            ConsumeQueue::open(tmp.path(), 0),
            Err(StoreError::Config { .. })
        ));
        let cq = filled(tmp.path(), 1, 0, 5);
        assert_eq!(files(tmp.path()).len(), 5);
        assert_eq!(cq.get_range(0, 10).unwrap().len(), 5);
        drop(cq);
        let (cq, rec) = ConsumeQueue::open(tmp.path(), 1).unwrap();
        assert_eq!((cq.max_offset(), rec.cut_units), (5, 0));
    }

    #[test]
    fn reopen_recovers_min_max_last() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        drop(filled(dir, 4, 0, 10));
        let (mut cq, rec) = ConsumeQueue::open(dir, 4).unwrap();
        assert_eq!(rec, CqRecovery::default());
        assert_eq!((cq.min_offset(), cq.max_offset()), (0, 10));
        assert_eq!(cq.last_unit(), Some(unit(phys_of(9))));
        assert_eq!(cq.get(3).unwrap(), unit(phys_of(3)));
        // Fill the last file exactly: max lands on a file boundary.
        cq.append(10, unit(phys_of(10))).unwrap();
        cq.append(11, unit(phys_of(11))).unwrap();
        cq.flush().unwrap();
        drop(cq);
        let (mut cq, rec) = ConsumeQueue::open(dir, 4).unwrap();
        assert_eq!((cq.max_offset(), rec.cut_units), (12, 0));
        assert_eq!(files(dir).len(), 3);
        cq.append(12, unit(phys_of(12))).unwrap();
        assert_eq!(files(dir).len(), 4);
        // Fresh empty directory.
        let (cq, _) = ConsumeQueue::open(&dir.join("empty/0"), 4).unwrap();
        assert_eq!(
            (cq.min_offset(), cq.max_offset(), cq.last_unit()),
            (0, 0, None)
        );
    }

    #[test]
    fn truncate_is_durable_and_appends_resume() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let mut cq = filled(dir, 4, 0, 10);
        assert_eq!(cq.truncate_by_phys_offset(phys_of(20)).unwrap(), 0);
        // Cut in the middle of a file, at a phys between two units.
        assert_eq!(cq.truncate_by_phys_offset(phys_of(5) - 1).unwrap(), 5);
        assert_eq!(cq.max_offset(), 5);
        assert_eq!(cq.last_unit(), Some(unit(phys_of(4))));
        assert!(is_out_of_range(cq.get(5)));
        assert_eq!(files(dir).len(), 2);
        for i in 5..8 {
            assert_eq!(read_raw(dir, 4, i), vec![0u8; 20]);
        }
        assert_eq!(fs::metadata(seg_path(dir, 4)).unwrap().len(), 80);
        drop(cq);
        let (mut cq, rec) = ConsumeQueue::open(dir, 4).unwrap();
        assert_eq!((cq.max_offset(), rec.cut_units), (5, 0));
        assert_eq!(cq.last_unit(), Some(unit(phys_of(4))));
        // Resume with physical offsets below the dropped ones.
        cq.append(5, unit(phys_of(4) + 1)).unwrap();
        cq.append(6, unit(phys_of(4) + 2)).unwrap();
        cq.flush().unwrap();
        // Cut exactly at a file boundary: the whole second file goes.
        assert_eq!(cq.truncate_by_phys_offset(phys_of(4)).unwrap(), 3);
        assert_eq!(files(dir), vec!["00000000000000000000"]);
        drop(cq);
        let (mut cq, _) = ConsumeQueue::open(dir, 4).unwrap();
        assert_eq!(cq.max_offset(), 4);
        assert_eq!(cq.last_unit(), Some(unit(phys_of(3))));
        // Everything.
        assert_eq!(cq.truncate_by_phys_offset(0).unwrap(), 4);
        assert_eq!(
            (cq.min_offset(), cq.max_offset(), cq.last_unit()),
            (0, 0, None)
        );
        assert!(files(dir).is_empty());
        drop(cq);
        let (mut cq, _) = ConsumeQueue::open(dir, 4).unwrap();
        assert_eq!((cq.min_offset(), cq.max_offset()), (0, 0));
        cq.append(0, unit(5)).unwrap();
        assert_eq!(cq.get(0).unwrap(), unit(5));
    }

    #[test]
    fn torn_garbage_after_max_is_cut_and_counted() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        drop(filled(dir, 4, 0, 6));
        write_raw(dir, 4, 6, &[0xAB; 20]);
        let (cq, rec) = ConsumeQueue::open(dir, 4).unwrap();
        assert_eq!((cq.max_offset(), rec.cut_units), (6, 1));
        assert_eq!(read_raw(dir, 4, 6), vec![0u8; 20]);
        drop(cq);
        let (_, rec) = ConsumeQueue::open(dir, 4).unwrap();
        assert_eq!(rec.cut_units, 0);

        // Size-0 unit with junk in the other fields also counts as non-empty.
        let mut junk = unit(phys_of(6)).encode();
        junk[8..12].copy_from_slice(&[0; 4]);
        write_raw(dir, 4, 6, &junk);
        let (cq, rec) = ConsumeQueue::open(dir, 4).unwrap();
        assert_eq!((cq.max_offset(), rec.cut_units), (6, 1));
    }

    #[test]
    fn backwards_phys_and_later_files_are_cut() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        drop(filled(dir, 4, 0, 6));
        write_raw(dir, 4, 6, &unit(phys_of(2)).encode()); // goes backwards
        write_raw(dir, 4, 7, &unit(phys_of(50)).encode()); // valid-looking, after the cut
        let f = File::create(seg_path(dir, 8)).unwrap();
        f.set_len(80).unwrap();
        f.write_all_at(&unit(phys_of(60)).encode(), 20).unwrap();
        drop(f);
        let (mut cq, rec) = ConsumeQueue::open(dir, 4).unwrap();
        assert_eq!((cq.max_offset(), rec.cut_units), (6, 3));
        assert_eq!(cq.last_unit(), Some(unit(phys_of(5))));
        assert_eq!(files(dir).len(), 2);
        assert_eq!(read_raw(dir, 4, 7), vec![0u8; 20]);
        cq.append(6, unit(phys_of(6))).unwrap();

        // A gap between files: files after the gap are cut.
        drop(cq);
        let f = File::create(seg_path(dir, 12)).unwrap();
        f.set_len(80).unwrap();
        f.write_all_at(&unit(phys_of(70)).encode(), 0).unwrap();
        drop(f);
        write_raw(dir, 4, 7, &unit(phys_of(7)).encode());
        let (cq, rec) = ConsumeQueue::open(dir, 4).unwrap();
        assert_eq!((cq.max_offset(), rec.cut_units), (8, 1));
        assert_eq!(files(dir).len(), 2);
    }

    #[test]
    fn short_file_is_handled() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        drop(filled(dir, 4, 0, 10));
        // Units 4 and 5 whole, 7 bytes of unit 6 (non-zero), units 8 and 9 in the next file.
        let f = OpenOptions::new()
            .write(true)
            .open(seg_path(dir, 4))
            .unwrap();
        f.set_len(2 * 20 + 7).unwrap();
        drop(f);
        let (mut cq, rec) = ConsumeQueue::open(dir, 4).unwrap();
        assert_eq!((cq.max_offset(), rec.cut_units), (6, 3));
        assert_eq!(cq.get(5).unwrap(), unit(phys_of(5)));
        assert_eq!(fs::metadata(seg_path(dir, 4)).unwrap().len(), 80);
        assert_eq!(files(dir).len(), 2);
        cq.append(6, unit(phys_of(6))).unwrap();
        drop(cq);

        // A middle file cut to zero length: nothing past it survives.
        drop(filled(dir, 4, 7, 10));
        OpenOptions::new()
            .write(true)
            .open(seg_path(dir, 4))
            .unwrap()
            .set_len(0)
            .unwrap();
        let (cq, rec) = ConsumeQueue::open(dir, 4).unwrap();
        assert_eq!((cq.max_offset(), rec.cut_units), (4, 2));
        assert_eq!(cq.last_unit(), Some(unit(phys_of(3))));
        assert_eq!(files(dir), vec!["00000000000000000000"]);

        // A file shortened under an open queue: reads fail, no panic.
        let mut cq = cq;
        cq.append(4, unit(phys_of(4))).unwrap();
        cq.flush().unwrap(); // out of the write-behind buffer, into the file
        OpenOptions::new()
            .write(true)
            .open(seg_path(dir, 4))
            .unwrap()
            .set_len(0)
            .unwrap();
        assert!(cq.get(4).is_err());
        assert!(cq.get_range(3, 4).is_err());
    }

    #[test]
    fn buffered_units_are_readable_and_reach_the_file_on_flush() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let (mut cq, _) = ConsumeQueue::open(dir, 1000).unwrap();
        for i in 0..10 {
            cq.append(i, unit(phys_of(i))).unwrap();
        }
        // Served from memory before any write...
        assert_eq!(cq.get(9).unwrap(), unit(phys_of(9)));
        assert_eq!(cq.get_range(0, 100).unwrap().len(), 10);
        assert!(read_raw(dir, 1000, 9).iter().all(|&b| b == 0));
        // ...and in the file after flush, and counted by take_dirty.
        cq.flush().unwrap();
        assert_eq!(read_raw(dir, 1000, 9), unit(phys_of(9)).encode().to_vec());
        cq.append(10, unit(phys_of(10))).unwrap();
        let (files, _) = cq.take_dirty().unwrap();
        assert_eq!(files.len(), 1);
        assert_eq!(read_raw(dir, 1000, 10), unit(phys_of(10)).encode().to_vec());
        // A full buffer is written without a flush.
        for i in 11..400 {
            cq.append(i, unit(phys_of(i))).unwrap();
        }
        assert_eq!(
            read_raw(dir, 1000, 200),
            unit(phys_of(200)).encode().to_vec()
        );
        // Truncation sees buffered units too.
        assert_eq!(cq.truncate_by_phys_offset(phys_of(390)).unwrap(), 10);
        assert_eq!(cq.max_offset(), 390);
    }

    #[test]
    fn search_by_timestamp_cases() {
        let tmp = tempfile::tempdir().unwrap();
        let cq = filled(tmp.path(), 4, 0, 10);
        // ts(i) = 1000 + 10*i, with units 4 and 5 sharing 1040; units 0..2 are gone to
        // retention (i64::MIN).
        let mut ts: HashMap<u64, i64> = (0..10)
            .map(|i| (phys_of(i), 1000 + 10 * i as i64))
            .collect();
        ts.insert(phys_of(5), 1040);
        for i in 0..2 {
            ts.insert(phys_of(i), i64::MIN);
        }
        let mut lookup = |u: &CqUnit| ts.get(&u.phys_offset).copied();
        assert_eq!(cq.search_by_timestamp(1070, &mut lookup), 7); // exact
        assert_eq!(cq.search_by_timestamp(1040, &mut lookup), 4); // first of equal
        assert_eq!(cq.search_by_timestamp(1065, &mut lookup), 7); // between
        assert_eq!(cq.search_by_timestamp(0, &mut lookup), 2); // before all: skips gone units
        assert_eq!(cq.search_by_timestamp(5000, &mut lookup), 10); // after all: max
                                                                   // nothing known: the search never skips a unit
        assert_eq!(cq.search_by_timestamp(1, &mut |_| None), 0);
        // a damaged (unknown) unit in the middle, wherever the search meets it, never moves
        // the answer past a readable unit: every ts gives what the undamaged queue gives, or
        // the damaged unit itself when it is the one just before that answer
        for bad in 2..10u64 {
            let mut damaged = ts.clone();
            damaged.remove(&phys_of(bad));
            let mut dl = |u: &CqUnit| damaged.get(&u.phys_offset).copied();
            for t in [0, 1000, 1020, 1025, 1040, 1055, 1070, 1090, 1091, 5000] {
                let want = cq.search_by_timestamp(t, &mut lookup);
                let got = cq.search_by_timestamp(t, &mut dl);
                assert!(
                    got == want || (got == bad && want == bad + 1),
                    "damaged unit {bad}, ts {t}: {got} (undamaged {want})"
                );
            }
        }

        let (empty, _) = ConsumeQueue::open(&tmp.path().join("e"), 4).unwrap();
        assert_eq!(empty.search_by_timestamp(0, &mut lookup), 0);
    }

    #[test]
    fn delete_before_phys_raises_min_and_deletes_files() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let mut cq = filled(dir, 4, 0, 10);
        assert_eq!(cq.delete_before_phys(0).unwrap(), 0);
        assert_eq!(cq.min_offset(), 0);
        assert_eq!(cq.delete_before_phys(phys_of(5)).unwrap(), 1);
        assert_eq!((cq.min_offset(), cq.max_offset()), (5, 10));
        assert!(is_out_of_range(cq.get(4)));
        assert!(is_out_of_range(cq.get_range(4, 2)));
        assert_eq!(cq.get(5).unwrap(), unit(phys_of(5)));
        assert_eq!(files(dir).len(), 2);
        assert_eq!(cq.search_by_timestamp(0, &mut |_| Some(0)), 5);
        // Everything is below: min = max, the last file stays.
        assert_eq!(cq.delete_before_phys(u64::MAX).unwrap(), 1);
        assert_eq!(
            (cq.min_offset(), cq.max_offset(), cq.last_unit()),
            (10, 10, None)
        );
        assert_eq!(files(dir), vec!["00000000000000000160"]);
        // Appending continues at max.
        cq.append(10, unit(phys_of(10))).unwrap();
        assert_eq!((cq.min_offset(), cq.max_offset()), (10, 11));
        cq.flush().unwrap();
        drop(cq);
        // Reopen: min falls back to the first file's start; the caller raises it again.
        let (mut cq, _) = ConsumeQueue::open(dir, 4).unwrap();
        assert_eq!((cq.min_offset(), cq.max_offset()), (8, 11));
        cq.delete_before_phys(phys_of(10)).unwrap();
        assert_eq!(cq.min_offset(), 10);

        // max on a file boundary: the file holding max - 1 is kept.
        let dir2 = tmp.path().join("b");
        let mut cq = filled(&dir2, 4, 0, 8);
        assert_eq!(cq.delete_before_phys(u64::MAX).unwrap(), 1);
        drop(cq);
        let (cq, _) = ConsumeQueue::open(&dir2, 4).unwrap();
        assert_eq!((cq.min_offset(), cq.max_offset()), (4, 8));
    }

    #[test]
    fn truncate_below_retention_min_cuts_hidden_units() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let mut cq = filled(dir, 4, 0, 8);
        cq.delete_before_phys(phys_of(6)).unwrap();
        assert_eq!(cq.min_offset(), 6);
        assert_eq!(cq.truncate_by_phys_offset(phys_of(5)).unwrap(), 2);
        assert_eq!((cq.min_offset(), cq.max_offset()), (5, 5));
        drop(cq);
        let (cq, rec) = ConsumeQueue::open(dir, 4).unwrap();
        assert_eq!((cq.max_offset(), rec.cut_units), (5, 0));
        assert_eq!(cq.last_unit(), Some(unit(phys_of(4))));
    }

    #[test]
    fn rewrite_run_checks_order_and_reaches_every_file() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let mut cq = filled(dir, 2, 0, 8);
        // Units 2..6 span three files; a run whose end passes its upper neighbour is refused.
        let bad = [unit(phys_of(2) + 1), unit(phys_of(6) + 1)];
        assert!(matches!(
            cq.rewrite_run(2, &bad),
            Err(StoreError::InvalidArgument(_))
        ));
        assert!(cq.rewrite_run(7, &[unit(1), unit(2)]).is_err(), "past max");
        assert_eq!(
            cq.get(3).unwrap(),
            unit(phys_of(3)),
            "a refusal writes nothing"
        );
        let run: Vec<CqUnit> = (2..7).map(|i| unit(phys_of(i) + 1)).collect();
        cq.rewrite_run(2, &run).unwrap();
        cq.rewrite_run(7, &[unit(phys_of(7) + 1)]).unwrap();
        assert_eq!(cq.last_unit(), Some(unit(phys_of(7) + 1)));
        drop(cq);
        let (cq, rec) = ConsumeQueue::open(dir, 2).unwrap();
        assert_eq!(rec, CqRecovery::default());
        assert_eq!(cq.get_range(2, 5).unwrap(), run);
        assert_eq!(cq.last_unit(), Some(unit(phys_of(7) + 1)));
    }

    #[test]
    fn empty_queue_accepts_any_first_index() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let (mut cq, _) = ConsumeQueue::open(dir, 300).unwrap();
        cq.append(1000, unit(phys_of(1000))).unwrap();
        assert_eq!((cq.min_offset(), cq.max_offset()), (1000, 1001));
        assert!(is_out_of_range(cq.get(999)));
        assert_eq!(files(dir), vec![file_name(900)]);
        cq.append(1001, unit(phys_of(1001))).unwrap();
        assert!(is_out_of_range(cq.append(5, unit(phys_of(1002)))));
        cq.flush().unwrap();
        drop(cq);
        let (mut cq, rec) = ConsumeQueue::open(dir, 300).unwrap();
        assert_eq!(rec.cut_units, 0);
        assert_eq!((cq.min_offset(), cq.max_offset()), (1000, 1002));
        assert_eq!(cq.get_range(1000, 5).unwrap().len(), 2);

        // Emptied by truncation, then restarted elsewhere: old files go away.
        assert_eq!(cq.truncate_by_phys_offset(0).unwrap(), 2);
        cq.append(50, unit(7)).unwrap();
        assert_eq!((cq.min_offset(), cq.max_offset()), (50, 51));
        assert_eq!(files(dir), vec![file_name(0)]);
        drop(cq);
        let (cq, _) = ConsumeQueue::open(dir, 300).unwrap();
        assert_eq!((cq.min_offset(), cq.max_offset()), (50, 51));
        assert_eq!(cq.get(50).unwrap(), unit(7));
    }

    #[test]
    fn bad_file_names() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        fs::write(dir.join("notes.txt"), b"x").unwrap();
        fs::write(dir.join("0000000000000000000x"), b"x").unwrap();
        let (cq, _) = ConsumeQueue::open(dir, 4).unwrap();
        assert_eq!(cq.max_offset(), 0);
        drop(cq);
        // 20 bytes = one unit is not a multiple of the 80-byte file size.
        fs::write(dir.join(file_name(1)), [0u8; 80]).unwrap();
        assert!(matches!(
            ConsumeQueue::open(dir, 4),
            Err(StoreError::CorruptFile { .. })
        ));
    }

    #[derive(Debug, Clone)]
    enum Op {
        Append(u64, usize),
        AppendAt(u64),
        Truncate(usize, bool),
        Reopen,
        Flush,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (1u64..50, 1usize..6).prop_map(|(g, n)| Op::Append(g, n)),
            1 => (0u64..40).prop_map(Op::AppendAt),
            2 => (any::<usize>(), any::<bool>()).prop_map(|(p, b)| Op::Truncate(p, b)),
            1 => Just(Op::Reopen),
            1 => Just(Op::Flush),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn matches_vec_model(upf in 1u64..6, ops in proptest::collection::vec(op(), 1..40)) {
            let tmp = tempfile::tempdir().unwrap();
            let dir = tmp.path().join("q");
            let (mut cq, _) = ConsumeQueue::open(&dir, upf).unwrap();
            let mut model_min = 0u64;
            let mut model: Vec<CqUnit> = Vec::new();
            let mut next_phys = 1u64;
            for op in ops {
                match op {
                    Op::Append(gap, n) => {
                        for _ in 0..n {
                            next_phys += gap;
                            let idx = model_min + model.len() as u64;
                            cq.append(idx, unit(next_phys)).unwrap();
                            model.push(unit(next_phys));
                        }
                    }
                    Op::AppendAt(idx) => {
                        next_phys += 3;
                        let r = cq.append(idx, unit(next_phys));
                        if model.is_empty() {
                            r.unwrap();
                            model_min = idx;
                            model.push(unit(next_phys));
                        } else if idx == model_min + model.len() as u64 {
                            r.unwrap();
                            model.push(unit(next_phys));
                        } else {
                            prop_assert!(is_out_of_range(r));
                        }
                    }
                    Op::Truncate(pick, plus_one) => {
                        let phys = if model.is_empty() {
                            (pick % 1000) as u64
                        } else {
                            model[pick % model.len()].phys_offset + u64::from(plus_one)
                        };
                        let keep = model.iter().take_while(|u| u.phys_offset < phys).count();
                        let dropped = (model.len() - keep) as u64;
                        model.truncate(keep);
                        prop_assert_eq!(cq.truncate_by_phys_offset(phys).unwrap(), dropped);
                    }
                    Op::Reopen => {
                        drop(cq);
                        let (q, rec) = ConsumeQueue::open(&dir, upf).unwrap();
                        prop_assert_eq!(rec.cut_units, 0);
                        cq = q;
                        if model.is_empty() {
                            prop_assert_eq!(cq.min_offset(), cq.max_offset());
                            model_min = cq.min_offset();
                        }
                    }
                    Op::Flush => cq.flush().unwrap(),
                }
                let max = model_min + model.len() as u64;
                prop_assert_eq!(cq.min_offset(), model_min);
                prop_assert_eq!(cq.max_offset(), max);
                prop_assert_eq!(cq.last_unit(), model.last().copied());
                prop_assert_eq!(&cq.get_range(model_min, usize::MAX).unwrap(), &model);
            }
        }
    }
}
