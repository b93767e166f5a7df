//! The epoch file and the truncation algorithm of RIP-44.
//!
//! A broker records, for every master epoch it has seen, the commitlog offset at which that
//! epoch's records begin: a list of `(epoch, startOffset)` pairs, ascending by epoch. An
//! entry's `endOffset` is not stored: it is the next entry's `startOffset`, and the last entry's
//! end is open ([`u64::MAX`] in this API; callers substitute the current max offset when they
//! compare, as [`find_consistent_point`] does).
//!
//! # On-disk format
//!
//! A text file (by default `<storeRoot>/epochFileCheckpoint`), kept human-readable like
//! RocketMQ's:
//!
//! ```text
//! 2            <- number of entries (decimal)
//! 1234567      <- CRC32 of the entry block, masked with 0x7FFFFFFF (decimal)
//! 7-7000       <- <epoch>-<startOffset>, ascending
//! 8-8000
//! ```
//!
//! The entry block is all entry lines, each terminated by `\n`; every line of the file ends
//! with `\n`. On read, a count mismatch, a CRC mismatch, an unparsable line, epochs that are not
//! strictly increasing or start offsets that decrease make the file corrupt.
//!
//! # Durability and the backup file
//!
//! Every change rewrites the whole content: first to `<path>.bak`, then to `<path>`, each with
//! [`crate::fsutil::write_atomic`] (temp file, fsync, rename, directory fsync). A crash can
//! therefore leave at most one of the two files with the old content, never a torn file.
//! [`EpochFile::open`] reads `<path>` and falls back to `<path>.bak` when the main file is
//! missing or corrupt. If neither file exists the list is empty (a new replica); if a file
//! exists but none is valid, opening fails with [`StoreError::CorruptFile`]: a damaged epoch
//! file is never silently treated as empty, since an empty list means "new replica, truncate
//! nothing". I/O errors other than "not found" are returned as they are, without fallback.
//! A mutation whose write fails leaves the in-memory entries unchanged.
//!
//! # Deliberate differences from RocketMQ's `EpochFileCache`
//!
//! * **Re-election without writes (apache/rocketmq#9689).** RocketMQ refuses an append whose
//!   start offset equals the last entry's start, which happens when the same master is
//!   re-elected with no writes in between; the master then cannot find its current epoch when
//!   building transfer headers. Here such an append *replaces* the previous entry (and any
//!   further trailing entries with that same start): an epoch that owns no bytes carries no
//!   information for truncation, because the algorithm only compares epochs by the byte ranges
//!   they own. The new epoch must still be strictly greater than the last one, and a start
//!   offset below the last start is still refused ([`StoreError::EpochConflict`]).
//! * An empty list is written as an explicit, checksummed empty file (count 0), instead of
//!   being skipped, which in RocketMQ leaves stale entries on disk.
//! * A stored CRC of 0 has no "do not check" meaning; the CRC must always match.
//! * Both files receive the new content through atomic renames; RocketMQ copies the previous
//!   content to the backup and overwrites the main file in place.
//! * [`find_consistent_point`] with an empty local list returns `Some(0)` only when the local
//!   log is empty too; RocketMQ treats any replica without epochs as new and syncs from 0
//!   without checking its existing data.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::error::{Result, StoreError};
use crate::fsutil::{read_optional, write_atomic};

/// One epoch with its byte range `[start_offset, end_offset)` in the commitlog.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochEntry {
    pub epoch: u32,
    pub start_offset: u64,
    /// The next entry's start offset, or [`u64::MAX`] for the last entry.
    pub end_offset: u64,
}

/// What [`EpochFile::reconcile`] dropped, as `(epoch, start_offset)` pairs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EpochReconcile {
    /// Entries that started past the log's max offset.
    pub dropped_suffix: Vec<(u32, u64)>,
    /// Entries wholly below the log's min offset.
    pub dropped_prefix: Vec<(u32, u64)>,
}

/// Where [`EpochFile::open`] found the entries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EpochLoadSource {
    /// The main file was valid.
    Main,
    /// The main file was missing or corrupt; the `.bak` file was valid.
    Backup,
    /// Neither file exists: an empty list (a new replica).
    Fresh,
}

/// The epoch file of one broker: `(epoch, startOffset)` entries, ascending by epoch.
#[derive(Debug)]
pub struct EpochFile {
    path: PathBuf,
    bak_path: PathBuf,
    entries: Vec<(u32, u64)>,
}

impl EpochFile {
    /// Loads `path` (e.g. `<root>/epochFileCheckpoint`); falls back to `path` + `".bak"`.
    ///
    /// Both missing: empty list, [`EpochLoadSource::Fresh`]. Main missing or corrupt and the
    /// backup valid: the backup's entries, [`EpochLoadSource::Backup`]. Any file present but
    /// none valid: [`StoreError::CorruptFile`] naming the file(s) and the reason.
    pub fn open(path: &Path) -> Result<(EpochFile, EpochLoadSource)> {
        let bak_path = bak_path_of(path);
        let make = |entries| EpochFile {
            path: path.to_path_buf(),
            bak_path: bak_path.clone(),
            entries,
        };

        let main_err = match read_optional(path)? {
            Some(data) => match decode(&data) {
                Ok(entries) => return Ok((make(entries), EpochLoadSource::Main)),
                Err(reason) => Some(reason),
            },
            None => None,
        };
        let bak = read_optional(&bak_path)?;
        match (main_err, bak) {
            (None, None) => Ok((make(Vec::new()), EpochLoadSource::Fresh)),
            (main_err, Some(data)) => match decode(&data) {
                Ok(entries) => Ok((make(entries), EpochLoadSource::Backup)),
                Err(bak_reason) => Err(match main_err {
                    Some(main_reason) => StoreError::CorruptFile {
                        path: path.to_path_buf(),
                        reason: format!(
                            "{main_reason}; backup {} is corrupt too: {bak_reason}",
                            bak_path.display()
                        ),
                    },
                    None => StoreError::CorruptFile {
                        path: bak_path.clone(),
                        reason: format!("{bak_reason} (main file {} is missing)", path.display()),
                    },
                }),
            },
            (Some(main_reason), None) => Err(StoreError::CorruptFile {
                path: path.to_path_buf(),
                reason: format!(
                    "{main_reason}; no backup file {} to fall back to",
                    bak_path.display()
                ),
            }),
        }
    }

    /// The main file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// All entries with their end offsets; the last entry's end is [`u64::MAX`].
    pub fn entries(&self) -> Vec<EpochEntry> {
        (0..self.entries.len()).map(|i| self.entry_at(i)).collect()
    }

    /// The stored `(epoch, start_offset)` pairs, ascending.
    pub fn raw_entries(&self) -> &[(u32, u64)] {
        &self.entries
    }

    /// The entry with the highest epoch (end [`u64::MAX`]).
    pub fn last_entry(&self) -> Option<EpochEntry> {
        self.entries.len().checked_sub(1).map(|i| self.entry_at(i))
    }

    /// The highest epoch.
    pub fn last_epoch(&self) -> Option<u32> {
        self.entries.last().map(|&(e, _)| e)
    }

    /// The entry of `epoch`, if recorded.
    pub fn find_by_epoch(&self, epoch: u32) -> Option<EpochEntry> {
        self.entries
            .binary_search_by_key(&epoch, |&(e, _)| e)
            .ok()
            .map(|i| self.entry_at(i))
    }

    /// The entry whose range holds `offset`: `start <= offset < end`.
    pub fn find_by_offset(&self, offset: u64) -> Option<EpochEntry> {
        // Index of the first entry starting after `offset`; the candidate is the one before it.
        let after = self.entries.partition_point(|&(_, s)| s <= offset);
        let entry = self.entry_at(after.checked_sub(1)?);
        (entry.start_offset <= offset && offset < entry.end_offset).then_some(entry)
    }

    /// Appends `(epoch, start_offset)` and persists it before returning.
    ///
    /// `epoch` must be greater than the last epoch and `start_offset` not below the last start,
    /// else [`StoreError::EpochConflict`]. If `start_offset` equals the last start, the previous
    /// entry owns no bytes and is replaced (see the module docs, #9689).
    pub fn append(&mut self, epoch: u32, start_offset: u64) -> Result<()> {
        let mut next = self.entries.clone();
        if let Some(&(last_epoch, last_start)) = next.last() {
            if epoch <= last_epoch {
                return Err(StoreError::EpochConflict(format!(
                    "cannot append epoch {epoch} at {start_offset}: not greater than the last \
                     epoch {last_epoch}"
                )));
            }
            if start_offset < last_start {
                return Err(StoreError::EpochConflict(format!(
                    "cannot append epoch {epoch} at {start_offset}: below the start offset \
                     {last_start} of the last epoch {last_epoch}"
                )));
            }
        }
        while next.last().is_some_and(|&(_, s)| s == start_offset) {
            next.pop();
        }
        next.push((epoch, start_offset));
        self.commit(next)
    }

    /// Drops the entries with `epoch >= epoch` and persists.
    pub fn truncate_suffix_by_epoch(&mut self, epoch: u32) -> Result<()> {
        let keep = self.entries.partition_point(|&(e, _)| e < epoch);
        self.commit_prefix(keep)
    }

    /// Drops the entries with `start_offset >= offset` and persists; used after the commitlog
    /// is truncated at `offset`.
    pub fn truncate_suffix_by_offset(&mut self, offset: u64) -> Result<()> {
        let keep = self.entries.partition_point(|&(_, s)| s < offset);
        self.commit_prefix(keep)
    }

    /// Drops the entries whose end offset is `<= offset` (never the last entry) and persists;
    /// used when old commitlog files are deleted.
    pub fn truncate_prefix_by_offset(&mut self, offset: u64) -> Result<()> {
        // Entry i (not the last) ends at entries[i + 1].start; ends are non-decreasing, so the
        // dropped entries form a prefix: those i with entries[i + 1].start <= offset.
        let drop = self
            .entries
            .get(1..)
            .map_or(0, |rest| rest.partition_point(|&(_, s)| s <= offset));
        if drop == 0 {
            return Ok(());
        }
        self.commit(self.entries[drop..].to_vec())
    }

    /// Makes the file agree with a log that holds `[min_offset, max_offset)`, as recovery
    /// must before the broker takes any role (issue 13; RocketMQ's `changeToMaster` cuts the
    /// same entries after `truncateInvalidMsg`):
    ///
    /// * entries starting past `max_offset` describe bytes this replica no longer has (a torn
    ///   tail cut at recovery) and are dropped; an entry starting exactly at `max_offset` owns
    ///   no bytes yet and stays. The first entry is never dropped this way: a log with bytes
    ///   but no epoch would look like a new replica and skip truncation at its next handshake.
    /// * entries wholly below `min_offset` (old segments deleted by retention) are dropped from
    ///   the front, as [`EpochFile::truncate_prefix_by_offset`] does.
    ///
    /// Persists only if something changed; returns the dropped entries.
    pub fn reconcile(&mut self, min_offset: u64, max_offset: u64) -> Result<EpochReconcile> {
        let keep_end = self
            .entries
            .partition_point(|&(_, s)| s <= max_offset)
            .max(self.entries.len().min(1));
        let suffix = self.entries[keep_end..].to_vec();
        let kept = &self.entries[..keep_end];
        let drop_front = kept
            .get(1..)
            .map_or(0, |rest| rest.partition_point(|&(_, s)| s <= min_offset));
        let prefix = kept[..drop_front].to_vec();
        if !suffix.is_empty() || !prefix.is_empty() {
            self.commit(kept[drop_front..].to_vec())?;
        }
        Ok(EpochReconcile {
            dropped_suffix: suffix,
            dropped_prefix: prefix,
        })
    }

    fn entry_at(&self, i: usize) -> EpochEntry {
        let (epoch, start_offset) = self.entries[i];
        let end_offset = self.entries.get(i + 1).map_or(u64::MAX, |&(_, s)| s);
        EpochEntry {
            epoch,
            start_offset,
            end_offset,
        }
    }

    fn commit_prefix(&mut self, keep: usize) -> Result<()> {
        if keep == self.entries.len() {
            return Ok(());
        }
        self.commit(self.entries[..keep].to_vec())
    }

    /// Persists `next` to the backup, then to the main file, and only then adopts it.
    fn commit(&mut self, next: Vec<(u32, u64)>) -> Result<()> {
        let data = encode(&next);
        write_atomic(&self.bak_path, &data)?;
        write_atomic(&self.path, &data)?;
        self.entries = next;
        Ok(())
    }
}

fn bak_path_of(path: &Path) -> PathBuf {
    let mut s: OsString = path.as_os_str().to_os_string();
    s.push(".bak");
    PathBuf::from(s)
}

fn entry_block(entries: &[(u32, u64)]) -> String {
    entries.iter().map(|(e, s)| format!("{e}-{s}\n")).collect()
}

fn masked_crc(block: &[u8]) -> u32 {
    crc32fast::hash(block) & 0x7FFF_FFFF
}

fn encode(entries: &[(u32, u64)]) -> Vec<u8> {
    let block = entry_block(entries);
    format!(
        "{}\n{}\n{block}",
        entries.len(),
        masked_crc(block.as_bytes())
    )
    .into_bytes()
}

/// Parses a non-empty run of ASCII digits (no sign, no spaces).
fn parse_decimal<T: std::str::FromStr>(s: &str) -> Option<T> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// Decodes and validates a file's content; the error is the reason it is corrupt.
fn decode(data: &[u8]) -> std::result::Result<Vec<(u32, u64)>, String> {
    if data.is_empty() {
        return Err("file is empty".into());
    }
    let text = std::str::from_utf8(data).map_err(|e| format!("not UTF-8 text: {e}"))?;
    let body = text
        .strip_suffix('\n')
        .ok_or("last line is not terminated by a newline (truncated file?)")?;
    let mut lines = body.split('\n');
    let count_line = lines.next().unwrap_or_default();
    let count: u64 =
        parse_decimal(count_line).ok_or_else(|| format!("bad entry count line {count_line:?}"))?;
    let crc_line = lines.next().ok_or("missing CRC line")?;
    let stored_crc: u32 =
        parse_decimal(crc_line).ok_or_else(|| format!("bad CRC line {crc_line:?}"))?;

    // The entry block is everything after the second newline.
    let header_len = count_line.len() + 1 + crc_line.len() + 1;
    let block = text.get(header_len..).unwrap_or_default();
    let actual_crc = masked_crc(block.as_bytes());
    let entry_lines: Vec<&str> = lines.collect();
    if entry_lines.len() as u64 != count {
        return Err(format!(
            "entry count mismatch: header says {count}, file has {} entry lines",
            entry_lines.len()
        ));
    }
    if stored_crc != actual_crc {
        return Err(format!(
            "CRC mismatch: stored {stored_crc}, computed {actual_crc}"
        ));
    }

    let mut entries: Vec<(u32, u64)> = Vec::with_capacity(entry_lines.len());
    for (i, line) in entry_lines.iter().enumerate() {
        let parsed = line
            .split_once('-')
            .and_then(|(e, s)| Some((parse_decimal::<u32>(e)?, parse_decimal::<u64>(s)?)));
        let (epoch, start) = parsed
            .ok_or_else(|| format!("entry line {} is not <epoch>-<offset>: {line:?}", i + 1))?;
        if let Some(&(prev_epoch, prev_start)) = entries.last() {
            if epoch <= prev_epoch {
                return Err(format!(
                    "entry line {}: epoch {epoch} is not greater than the previous epoch \
                     {prev_epoch}",
                    i + 1
                ));
            }
            if start < prev_start {
                return Err(format!(
                    "entry line {}: start offset {start} is below the previous start {prev_start}",
                    i + 1
                ));
            }
        }
        entries.push((epoch, start));
    }
    Ok(entries)
}

/// Seed 002's truncation algorithm ("findConsistentPoint" of RIP-44).
///
/// `local` and `master` are `(epoch, start_offset)` lists ascending by epoch. Each entry ends at
/// the next entry's start; the last entry ends at the respective max offset (`local_max`,
/// `master_max`). Walking the local entries from the highest epoch down, the first epoch that
/// the master also has **with the same start offset** gives the point
/// `min(local end, master end)`; the log before it is identical on both sides.
///
/// Returns `None` when there is no such epoch (the caller must refuse to sync: an operator has
/// to act). An empty `local` list is the new-replica case: `Some(0)` if `local_max == 0`, and
/// `None` if the replica holds data but no epochs, since nothing proves that data matches the
/// master's.
///
/// One exception to `None`: a replica with no data past the start of its first epoch agrees
/// with any master whose log covers that offset (the empty epoch a re-elected master replaced,
/// RocketMQ #9689), and gets that start as its point.
///
/// The point is additionally capped at `min(local_max, master_max)`, which only matters for
/// inconsistent inputs (an entry starting beyond the max offset).
pub fn find_consistent_point(
    local: &[(u32, u64)],
    local_max: u64,
    master: &[(u32, u64)],
    master_max: u64,
) -> Option<u64> {
    if local.is_empty() {
        return (local_max == 0).then_some(0);
    }
    let end_of = |list: &[(u32, u64)], i: usize, max: u64| list.get(i + 1).map_or(max, |e| e.1);
    for (li, &(epoch, start)) in local.iter().enumerate().rev() {
        let Some(mi) = master.iter().position(|&(e, _)| e == epoch) else {
            continue;
        };
        if master[mi].1 != start {
            continue;
        }
        let point = end_of(local, li, local_max)
            .min(end_of(master, mi, master_max))
            .min(local_max)
            .min(master_max);
        return Some(point);
    }
    // No epoch in common. If this replica holds no byte at all past the start of its first
    // epoch, there is nothing to disagree about: a master re-elected without writing replaces
    // its empty last epoch with the new one (RocketMQ #9689), so a replica that saw only the
    // old, empty epoch finds no match, yet both logs are identical up to that start.
    let first_start = local[0].1;
    let master_first = master.first().map_or(master_max, |e| e.1);
    (local_max <= first_start && master_first <= first_start && first_start <= master_max)
        .then_some(first_start)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::fs;

    fn tmp() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("epochFileCheckpoint");
        (dir, path)
    }

    fn open_fresh(path: &Path) -> EpochFile {
        let (f, src) = EpochFile::open(path).unwrap();
        assert_eq!(src, EpochLoadSource::Fresh);
        f
    }

    fn reopen(path: &Path) -> (Vec<(u32, u64)>, EpochLoadSource) {
        let (f, src) = EpochFile::open(path).unwrap();
        (f.raw_entries().to_vec(), src)
    }

    fn assert_corrupt(path: &Path) -> String {
        match EpochFile::open(path) {
            Err(StoreError::CorruptFile { path, reason }) => {
                format!("{}: {reason}", path.display())
            }
            Err(e) => panic!("expected CorruptFile, got {e:?}"),
            Ok((f, src)) => panic!("expected CorruptFile, got {:?} from {src:?}", f.entries),
        }
    }

    // ---- Seed 002's truncation examples -------------------------------------------------
    //
    // The seed's figures are images and only their one-line captions survive, so each case
    // below is a reconstruction from its caption. A is the old master, B the new one; lists
    // are (epoch, startOffset).

    /// (1) "The endoffset of epoch0 is truncated to the minimum of 900." A wrote epoch 0 up to
    /// 1000, B (a slave that had 900) became master in epoch 1 at 900 and wrote to 1500.
    #[test]
    fn seed002_example1_old_master_cut_to_new_masters_epoch0_end() {
        let a = [(0, 0)];
        let b = [(0, 0), (1, 900)];
        assert_eq!(find_consistent_point(&a, 1000, &b, 1500), Some(900));
    }

    /// (2) "A loses 900-1000 messages due to asynchronous flush ... truncated to 900, the
    /// minimum of the two": A restarts with only 900; B took over at 1000.
    #[test]
    fn seed002_example2_old_master_lost_tail_to_async_flush_no_cut() {
        let a = [(0, 0)];
        let b = [(0, 0), (1, 1000)];
        assert_eq!(find_consistent_point(&a, 900, &b, 1300), Some(900));
    }

    /// (3) "The endoffset of epoch1 is truncated to the minimum of 1200, which does not
    /// actually need to be truncated": the slave has all of epoch 1 it holds in common.
    #[test]
    fn seed002_example3_epoch1_point_is_local_max_no_cut_needed() {
        let local = [(0, 0), (1, 1000)];
        let master = [(0, 0), (1, 1000), (2, 1500)];
        assert_eq!(
            find_consistent_point(&local, 1200, &master, 1800),
            Some(1200)
        );
    }

    /// (4) "The endoffset of epoch0 is truncated to the minimum of 900": a slave with a longer
    /// epoch-0 tail than the master that took over at 900.
    #[test]
    fn seed002_example4_slave_with_longer_epoch0_tail_cut_to_900() {
        let local = [(0, 0)];
        let master = [(0, 0), (1, 900)];
        assert_eq!(
            find_consistent_point(&local, 1000, &master, 1500),
            Some(900)
        );
    }

    /// (5) "Both B and C are truncated to 800 of epoch1": three replicas; A became master in
    /// epoch 2 at 800 while B and C kept epoch-1 data up to 1000 and 950.
    #[test]
    fn seed002_example5_three_replicas_both_cut_to_800() {
        let master_a = [(0, 0), (1, 500), (2, 800)];
        let b = [(0, 0), (1, 500)];
        let c = [(0, 0), (1, 500)];
        assert_eq!(find_consistent_point(&b, 1000, &master_a, 1100), Some(800));
        assert_eq!(find_consistent_point(&c, 950, &master_a, 1100), Some(800));
    }

    /// (6) "The endoffset of epoch0 is truncated to the minimum of 1000": the local replica
    /// has an epoch 2 the master never saw, so the walk falls back to epoch 0, which ends at
    /// 1000 locally and 1200 on the master.
    #[test]
    fn seed002_example6_unknown_local_epoch_skipped_cut_to_1000() {
        let local = [(0, 0), (2, 1000)];
        let master = [(0, 0), (1, 1200)];
        assert_eq!(
            find_consistent_point(&local, 1300, &master, 1500),
            Some(1000)
        );
    }

    /// Example 6 carried through the epoch file: truncating at the point drops epoch 2.
    #[test]
    fn seed002_example6_applied_to_epoch_file() {
        let (_d, path) = tmp();
        let mut f = open_fresh(&path);
        f.append(0, 0).unwrap();
        f.append(2, 1000).unwrap();
        let point = find_consistent_point(f.raw_entries(), 1300, &[(0, 0), (1, 1200)], 1500);
        assert_eq!(point, Some(1000));
        f.truncate_suffix_by_offset(1000).unwrap();
        assert_eq!(f.raw_entries(), &[(0, 0)]);
        assert_eq!(reopen(&path).0, vec![(0, 0)]);
    }

    #[test]
    fn same_epoch_different_start_is_skipped() {
        // Epoch 1 exists on both sides but at different starts: not the same log; walk down.
        let local = [(0, 0), (1, 700)];
        let master = [(0, 0), (1, 900)];
        assert_eq!(
            find_consistent_point(&local, 1000, &master, 1500),
            Some(700)
        );
    }

    #[test]
    fn no_common_epoch_is_none() {
        assert_eq!(find_consistent_point(&[(3, 0)], 100, &[(4, 0)], 200), None);
        assert_eq!(find_consistent_point(&[(3, 0)], 100, &[(3, 10)], 200), None);
        assert_eq!(find_consistent_point(&[(3, 0)], 100, &[], 0), None);
    }

    #[test]
    fn empty_local_new_replica() {
        assert_eq!(find_consistent_point(&[], 0, &[(1, 0)], 500), Some(0));
        assert_eq!(find_consistent_point(&[], 0, &[], 0), Some(0));
        assert_eq!(find_consistent_point(&[], 10, &[(1, 0)], 500), None);
    }

    // ---- Append rules and #9689 -----------------------------------------------------------

    #[test]
    fn issue9689_reelection_without_writes_replaces_entry() {
        let (_d, path) = tmp();
        let mut f = open_fresh(&path);
        f.append(5, 100).unwrap();
        f.append(6, 100).unwrap();
        assert_eq!(f.raw_entries(), &[(6, 100)]);
        assert_eq!(
            f.find_by_epoch(6),
            Some(EpochEntry {
                epoch: 6,
                start_offset: 100,
                end_offset: u64::MAX
            })
        );
        assert_eq!(f.find_by_epoch(5), None);
        assert_eq!(reopen(&path), (vec![(6, 100)], EpochLoadSource::Main));
    }

    #[test]
    fn issue9689_replacement_keeps_earlier_entries() {
        let (_d, path) = tmp();
        let mut f = open_fresh(&path);
        f.append(1, 0).unwrap();
        f.append(2, 500).unwrap();
        f.append(3, 500).unwrap();
        f.append(4, 800).unwrap();
        assert_eq!(f.raw_entries(), &[(1, 0), (3, 500), (4, 800)]);
    }

    #[test]
    fn append_lower_or_equal_epoch_conflicts() {
        let (_d, path) = tmp();
        let mut f = open_fresh(&path);
        f.append(5, 100).unwrap();
        assert!(matches!(
            f.append(4, 200),
            Err(StoreError::EpochConflict(_))
        ));
        assert!(matches!(
            f.append(5, 200),
            Err(StoreError::EpochConflict(_))
        ));
        assert_eq!(f.raw_entries(), &[(5, 100)]);
        assert_eq!(reopen(&path).0, vec![(5, 100)]);
    }

    #[test]
    fn append_lower_start_conflicts() {
        let (_d, path) = tmp();
        let mut f = open_fresh(&path);
        f.append(5, 100).unwrap();
        assert!(matches!(f.append(6, 99), Err(StoreError::EpochConflict(_))));
        assert_eq!(f.raw_entries(), &[(5, 100)]);
    }

    #[test]
    fn lookups() {
        let (_d, path) = tmp();
        let mut f = open_fresh(&path);
        assert_eq!(f.last_entry(), None);
        assert_eq!(f.last_epoch(), None);
        assert_eq!(f.find_by_offset(0), None);
        f.append(7, 7000).unwrap();
        f.append(8, 8000).unwrap();
        let e7 = EpochEntry {
            epoch: 7,
            start_offset: 7000,
            end_offset: 8000,
        };
        let e8 = EpochEntry {
            epoch: 8,
            start_offset: 8000,
            end_offset: u64::MAX,
        };
        assert_eq!(f.entries(), vec![e7, e8]);
        assert_eq!(f.last_entry(), Some(e8));
        assert_eq!(f.last_epoch(), Some(8));
        assert_eq!(f.find_by_epoch(7), Some(e7));
        assert_eq!(f.find_by_epoch(9), None);
        assert_eq!(f.find_by_offset(6999), None);
        assert_eq!(f.find_by_offset(7000), Some(e7));
        assert_eq!(f.find_by_offset(7999), Some(e7));
        assert_eq!(f.find_by_offset(8000), Some(e8));
        assert_eq!(f.find_by_offset(u64::MAX - 1), Some(e8));
        assert_eq!(f.find_by_offset(u64::MAX), None);
    }

    // ---- Persistence ------------------------------------------------------------------------

    #[test]
    fn format_matches_spec() {
        let (_d, path) = tmp();
        let mut f = open_fresh(&path);
        f.append(7, 7000).unwrap();
        f.append(8, 8000).unwrap();
        let crc = crc32fast::hash(b"7-7000\n8-8000\n") & 0x7FFF_FFFF;
        let want = format!("2\n{crc}\n7-7000\n8-8000\n");
        assert_eq!(fs::read_to_string(&path).unwrap(), want);
        assert_eq!(fs::read_to_string(bak_path_of(&path)).unwrap(), want);
    }

    #[test]
    fn empty_list_is_written_explicitly() {
        let (_d, path) = tmp();
        let mut f = open_fresh(&path);
        f.append(1, 0).unwrap();
        f.truncate_suffix_by_epoch(0).unwrap();
        assert!(f.raw_entries().is_empty());
        let crc = crc32fast::hash(b"") & 0x7FFF_FFFF;
        assert_eq!(fs::read_to_string(&path).unwrap(), format!("0\n{crc}\n"));
        assert_eq!(reopen(&path), (vec![], EpochLoadSource::Main));
    }

    #[test]
    fn reopen_equals() {
        let (_d, path) = tmp();
        let mut f = open_fresh(&path);
        for (e, s) in [(1, 0), (3, 40), (4, 41), (9, 1 << 40)] {
            f.append(e, s).unwrap();
        }
        let (g, src) = EpochFile::open(&path).unwrap();
        assert_eq!(src, EpochLoadSource::Main);
        assert_eq!(g.raw_entries(), f.raw_entries());
        assert_eq!(g.entries(), f.entries());
        assert_eq!(g.path(), path.as_path());
    }

    #[test]
    fn both_missing_is_fresh_and_writes_nothing() {
        let (d, path) = tmp();
        let f = open_fresh(&path);
        assert!(f.raw_entries().is_empty());
        assert_eq!(fs::read_dir(d.path()).unwrap().count(), 0);
    }

    fn two_entry_file(path: &Path) {
        let mut f = open_fresh(path);
        f.append(7, 7000).unwrap();
        f.append(8, 8000).unwrap();
    }

    fn corrupt_main_falls_back(damage: impl Fn(&str) -> Vec<u8>) {
        let (_d, path) = tmp();
        two_entry_file(&path);
        let good = fs::read_to_string(&path).unwrap();
        let bad = damage(&good);
        assert_ne!(bad, good.as_bytes());
        assert!(decode(&bad).is_err());
        fs::write(&path, &bad).unwrap();
        assert_eq!(
            reopen(&path),
            (vec![(7, 7000), (8, 8000)], EpochLoadSource::Backup)
        );
    }

    #[test]
    fn corrupt_main_flipped_entry_digit_uses_backup() {
        corrupt_main_falls_back(|s| s.replace("8-8000", "8-8001").into_bytes());
    }

    #[test]
    fn corrupt_main_flipped_count_digit_uses_backup() {
        corrupt_main_falls_back(|s| format!("3{}", &s[1..]).into_bytes());
    }

    #[test]
    fn corrupt_main_flipped_crc_digit_uses_backup() {
        corrupt_main_falls_back(|s| {
            let mut b = s.as_bytes().to_vec();
            // First digit of the CRC line (byte 2, after "2\n").
            b[2] = if b[2] == b'1' { b'2' } else { b'1' };
            b
        });
    }

    #[test]
    fn corrupt_main_truncated_uses_backup() {
        corrupt_main_falls_back(|s| s.as_bytes()[..s.len() - 3].to_vec());
        // Cut at a line boundary: the count no longer matches.
        corrupt_main_falls_back(|s| s.as_bytes()[..s.len() - "8-8000\n".len()].to_vec());
    }

    #[test]
    fn corrupt_main_garbage_uses_backup() {
        corrupt_main_falls_back(|_| b"\x00\xffnot an epoch file\n".to_vec());
        corrupt_main_falls_back(|_| b"2\n0\n7-7000\n8-8000\n".to_vec());
    }

    #[test]
    fn corrupt_main_zero_length_uses_backup() {
        corrupt_main_falls_back(|_| Vec::new());
    }

    #[test]
    fn missing_main_uses_backup() {
        let (_d, path) = tmp();
        two_entry_file(&path);
        fs::remove_file(&path).unwrap();
        assert_eq!(
            reopen(&path),
            (vec![(7, 7000), (8, 8000)], EpochLoadSource::Backup)
        );
    }

    #[test]
    fn both_corrupt_is_error_naming_both() {
        let (_d, path) = tmp();
        two_entry_file(&path);
        fs::write(&path, b"garbage").unwrap();
        fs::write(bak_path_of(&path), b"").unwrap();
        let msg = assert_corrupt(&path);
        assert!(msg.contains("epochFileCheckpoint.bak"), "{msg}");
        assert!(msg.contains("newline"), "{msg}");
        assert!(msg.contains("empty"), "{msg}");
    }

    #[test]
    fn corrupt_main_without_backup_is_error() {
        let (_d, path) = tmp();
        fs::write(&path, b"").unwrap();
        let msg = assert_corrupt(&path);
        assert!(msg.contains("no backup"), "{msg}");
    }

    #[test]
    fn missing_main_with_corrupt_backup_is_error() {
        let (_d, path) = tmp();
        fs::write(bak_path_of(&path), b"1\n5\n1-0\n").unwrap();
        let msg = assert_corrupt(&path);
        assert!(
            msg.starts_with(&bak_path_of(&path).display().to_string()),
            "{msg}"
        );
        assert!(msg.contains("CRC mismatch"), "{msg}");
    }

    #[test]
    fn decode_rejects_bad_orders_and_lines() {
        let file = |block: &str, count: usize| {
            format!("{count}\n{}\n{block}", masked_crc(block.as_bytes())).into_bytes()
        };
        assert_eq!(decode(&file("", 0)), Ok(vec![]));
        assert_eq!(decode(&file("1-5\n2-5\n", 2)), Ok(vec![(1, 5), (2, 5)]));
        assert!(decode(&file("2-0\n2-5\n", 2))
            .unwrap_err()
            .contains("epoch"));
        assert!(decode(&file("3-0\n2-5\n", 2))
            .unwrap_err()
            .contains("epoch"));
        assert!(decode(&file("1-9\n2-5\n", 2))
            .unwrap_err()
            .contains("start"));
        for bad in [
            "1_0\n",
            "-1-0\n",
            "1--0\n",
            "1-\n",
            "1- 0\n",
            "4294967296-0\n",
            "1-0\r\n",
        ] {
            assert!(decode(&file(bad, 1)).is_err(), "{bad:?}");
        }
        assert!(decode(&file("1-0\n\n", 2)).is_err());
        assert!(decode(b"0\n").is_err());
        assert!(decode(b"+0\n0\n").is_err());
    }

    // ---- Truncation helpers -----------------------------------------------------------------

    fn file_with(path: &Path, entries: &[(u32, u64)]) -> EpochFile {
        let mut f = open_fresh(path);
        for &(e, s) in entries {
            f.append(e, s).unwrap();
        }
        f
    }

    #[test]
    fn truncate_suffix_by_epoch_drops_ge_and_persists() {
        let (_d, path) = tmp();
        let mut f = file_with(&path, &[(1, 0), (3, 100), (5, 200)]);
        f.truncate_suffix_by_epoch(4).unwrap();
        assert_eq!(f.raw_entries(), &[(1, 0), (3, 100)]);
        f.truncate_suffix_by_epoch(3).unwrap();
        assert_eq!(f.raw_entries(), &[(1, 0)]);
        f.truncate_suffix_by_epoch(9).unwrap();
        assert_eq!(f.raw_entries(), &[(1, 0)]);
        assert_eq!(reopen(&path).0, vec![(1, 0)]);
        assert_eq!(f.last_entry().unwrap().end_offset, u64::MAX);
    }

    #[test]
    fn truncate_suffix_by_offset_drops_start_ge_and_persists() {
        let (_d, path) = tmp();
        let mut f = file_with(&path, &[(1, 0), (3, 100), (5, 200)]);
        f.truncate_suffix_by_offset(201).unwrap();
        assert_eq!(f.raw_entries().len(), 3);
        f.truncate_suffix_by_offset(200).unwrap();
        assert_eq!(f.raw_entries(), &[(1, 0), (3, 100)]);
        assert_eq!(f.last_entry().unwrap().end_offset, u64::MAX);
        f.truncate_suffix_by_offset(50).unwrap();
        assert_eq!(f.raw_entries(), &[(1, 0)]);
        assert_eq!(reopen(&path).0, vec![(1, 0)]);
        f.truncate_suffix_by_offset(0).unwrap();
        assert!(f.raw_entries().is_empty());
        assert_eq!(reopen(&path), (vec![], EpochLoadSource::Main));
    }

    #[test]
    fn truncate_prefix_by_offset_drops_ended_entries_never_last() {
        let (_d, path) = tmp();
        let mut f = file_with(&path, &[(1, 0), (3, 100), (5, 200)]);
        f.truncate_prefix_by_offset(99).unwrap();
        assert_eq!(f.raw_entries().len(), 3);
        f.truncate_prefix_by_offset(100).unwrap();
        assert_eq!(f.raw_entries(), &[(3, 100), (5, 200)]);
        assert_eq!(reopen(&path).0, vec![(3, 100), (5, 200)]);
        f.truncate_prefix_by_offset(u64::MAX).unwrap();
        assert_eq!(f.raw_entries(), &[(5, 200)]);
        assert_eq!(reopen(&path).0, vec![(5, 200)]);
        f.truncate_prefix_by_offset(u64::MAX).unwrap();
        assert_eq!(f.raw_entries(), &[(5, 200)]);
    }

    #[test]
    fn reconcile_cuts_entries_past_the_log_end_and_before_its_start() {
        // Issue 13: a master elected at epoch 5 (start 392889) lost its unflushed tail, and
        // recovery cut its log to 348953: epochs 5 must go, or appending epoch 6 at the log's
        // end is refused and the broker can never become master again.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("epochFileCheckpoint");
        let (mut f, _) = EpochFile::open(&path).unwrap();
        for (e, s) in [(1, 0), (3, 100_000), (5, 392_889)] {
            f.append(e, s).unwrap();
        }
        let r = f.reconcile(0, 348_953).unwrap();
        assert_eq!(r.dropped_suffix, vec![(5, 392_889)]);
        assert!(r.dropped_prefix.is_empty());
        assert_eq!(f.raw_entries(), &[(1, 0), (3, 100_000)]);
        f.append(6, 348_953).unwrap();
        let (again, _) = EpochFile::open(&path).unwrap();
        assert_eq!(again.raw_entries(), &[(1, 0), (3, 100_000), (6, 348_953)]);

        // An epoch starting exactly at the end owns no bytes yet: kept. Entries that end at or
        // below the min offset go from the front (retention), never the last one.
        let r = f.reconcile(100_000, 348_953).unwrap();
        assert_eq!(r.dropped_prefix, vec![(1, 0)]);
        assert!(r.dropped_suffix.is_empty());
        assert_eq!(f.raw_entries(), &[(3, 100_000), (6, 348_953)]);
        let r = f.reconcile(400_000, 400_000).unwrap();
        assert_eq!(r.dropped_prefix, vec![(3, 100_000)]);
        assert_eq!(f.raw_entries(), &[(6, 348_953)]);
        // Nothing to change: nothing written, nothing reported.
        assert_eq!(
            f.reconcile(400_000, 400_000).unwrap(),
            EpochReconcile::default()
        );
    }

    #[test]
    fn reconcile_keeps_the_first_entry_of_a_log_cut_below_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("epochFileCheckpoint");
        let (mut f, _) = EpochFile::open(&path).unwrap();
        f.append(2, 5_000).unwrap();
        f.append(4, 9_000).unwrap();
        let r = f.reconcile(0, 1_000).unwrap();
        assert_eq!(r.dropped_suffix, vec![(4, 9_000)]);
        assert_eq!(f.raw_entries(), &[(2, 5_000)]);
    }

    #[test]
    fn failed_write_keeps_old_entries() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("store");
        fs::create_dir(&sub).unwrap();
        let path = sub.join("epochFileCheckpoint");
        let mut f = file_with(&path, &[(1, 0), (2, 100)]);
        fs::remove_dir_all(&sub).unwrap();
        assert!(matches!(f.append(3, 200), Err(StoreError::Io { .. })));
        assert!(f.truncate_suffix_by_epoch(2).is_err());
        assert!(f.truncate_prefix_by_offset(150).is_err());
        assert_eq!(f.raw_entries(), &[(1, 0), (2, 100)]);
    }

    // ---- Properties -------------------------------------------------------------------------

    /// A valid history: strictly increasing epochs and start offsets.
    fn history(max_len: usize) -> impl Strategy<Value = Vec<(u32, u64)>> {
        (
            0u32..1000,
            0u64..1_000_000,
            prop::collection::vec((1u32..5, 1u64..10_000), 0..max_len),
        )
            .prop_map(|(e0, s0, steps)| {
                let mut out = vec![(e0, s0)];
                for (de, ds) in steps {
                    let &(e, s) = out.last().unwrap_or(&(e0, s0));
                    out.push((e + de, s + ds));
                }
                out
            })
    }

    proptest! {
        #[test]
        fn prop_encode_decode_round_trip(h in history(40)) {
            prop_assert_eq!(decode(&encode(&h)), Ok(h));
        }

        #[test]
        fn prop_decode_never_panics(data in prop::collection::vec(any::<u8>(), 0..64)) {
            let _ = decode(&data);
        }

        #[test]
        fn prop_prefix_history_point_is_local_max(
            master in history(12),
            k_seed in any::<prop::sample::Index>(),
            max_seed in any::<prop::sample::Index>(),
            tail in 0u64..10_000,
        ) {
            let master_max = master.last().map_or(0, |e| e.1) + tail;
            let k = k_seed.index(master.len()) + 1;
            let local = &master[..k];
            let start = local[k - 1].1;
            let end = master.get(k).map_or(master_max, |e| e.1);
            let local_max = start + max_seed.index((end - start + 1) as usize) as u64;
            prop_assert_eq!(
                find_consistent_point(local, local_max, &master, master_max),
                Some(local_max)
            );
        }

        #[test]
        fn prop_point_never_exceeds_either_max(
            local in history(8),
            master in history(8),
            local_tail in 0u64..10_000,
            master_tail in 0u64..10_000,
            shared in 0usize..8,
        ) {
            // Also try the master's first `shared` entries followed by the local ones that
            // keep the list valid, so that common epochs are frequent.
            let n = shared.min(master.len());
            let mut spliced = master[..n].to_vec();
            for &(e, s) in &local {
                if !matches!(spliced.last(), Some(&(le, ls)) if e <= le || s <= ls) {
                    spliced.push((e, s));
                }
            }
            let master_max = master.last().map_or(0, |e| e.1) + master_tail;
            for l in [local, spliced] {
                let local_max = l.last().map_or(0, |e| e.1) + local_tail;
                if let Some(p) = find_consistent_point(&l, local_max, &master, master_max) {
                    prop_assert!(p <= local_max.min(master_max));
                }
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(32))]

        #[test]
        fn prop_history_round_trips_through_disk(h in history(20)) {
            let (_d, path) = tmp();
            let mut f = open_fresh(&path);
            for &(e, s) in &h {
                f.append(e, s).unwrap();
            }
            prop_assert_eq!(f.raw_entries(), h.as_slice());
            let (g, src) = EpochFile::open(&path).unwrap();
            prop_assert_eq!(src, EpochLoadSource::Main);
            prop_assert_eq!(g.raw_entries(), h.as_slice());
            fs::remove_file(&path).unwrap();
            prop_assert_eq!(reopen(&path), (h, EpochLoadSource::Backup));
        }
    }

    #[test]
    fn rocketmq_9689_empty_epoch_replaced_on_the_master_still_matches() {
        // The master wrote nothing in epoch 1 and was re-elected: its file says (3, 0).
        assert_eq!(find_consistent_point(&[(1, 0)], 0, &[(3, 0)], 500), Some(0));
        // An empty last local epoch that the master replaced: the earlier epoch decides.
        assert_eq!(
            find_consistent_point(&[(1, 0), (2, 100)], 100, &[(1, 0), (3, 100)], 900),
            Some(100)
        );
        // A replica holding data in an epoch the master never had still finds no point.
        assert_eq!(find_consistent_point(&[(1, 0)], 50, &[(3, 0)], 500), None);
        // Nor when the master's log starts after the replica's first epoch.
        assert_eq!(find_consistent_point(&[(1, 0)], 0, &[(3, 10)], 500), None);
    }
}
