//! The quarantine list: damaged commitlog byte ranges that are never served.
//!
//! A range is what one bad record (or a run of damaged bytes) occupies, from where a record
//! should start to the next sync point. When a consume-queue unit tells which record it was,
//! the entry carries its topic, queue id and queue offset, so a reader can say which queue
//! offset it skipped and a repair can be checked against it.
//!
//! File `<root>/quarantine` (and a `.bak` copy), big-endian, rewritten atomically (temp file,
//! fsync, rename, fsync of the directory), first the backup, then the main file:
//!
//! ```text
//! "RMQQ" | version u32 (1) | count u32
//! per entry: offset u64 | size u64 | detected_ms i64 | reason_len u16 | reason (UTF-8)
//!            | has_record u8 | [topic_len u16 | topic | queue_id i32 | queue_offset u64]
//! CRC32 (IEEE) of every byte before it, u32
//! ```
//!
//! A main file that fails its checks falls back to the backup; when both fail the list starts
//! empty and the open report says so (damaged bytes are still damaged: reads find them again).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::error::Result;
use crate::fsutil::{read_optional, write_atomic};

const MAGIC: &[u8; 4] = b"RMQQ";
const VERSION: u32 = 1;
/// Reasons longer than this are cut (the list must stay small).
const MAX_REASON: usize = 512;

/// The queue position of a quarantined record, when known.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct QueueRef {
    pub topic: String,
    pub queue_id: i32,
    pub queue_offset: u64,
}

/// One quarantined range `[offset, offset + size)`, inside one segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuarantineEntry {
    pub offset: u64,
    pub size: u64,
    /// Wall-clock time of detection (ms since the epoch).
    pub detected_ms: i64,
    pub reason: String,
    /// The record the range held, when a consume-queue unit said so.
    pub record: Option<QueueRef>,
}

impl QuarantineEntry {
    pub fn end(&self) -> u64 {
        self.offset + self.size
    }
}

/// How the list was found on open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QuarantineLoad {
    Fresh,
    Main,
    Backup(String),
    Lost(String),
}

pub struct Quarantine {
    path: PathBuf,
    bak: PathBuf,
    entries: BTreeMap<u64, QuarantineEntry>,
}

fn encode(entries: &BTreeMap<u64, QuarantineEntry>) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(MAGIC);
    b.extend_from_slice(&VERSION.to_be_bytes());
    b.extend_from_slice(&(entries.len() as u32).to_be_bytes());
    for e in entries.values() {
        b.extend_from_slice(&e.offset.to_be_bytes());
        b.extend_from_slice(&e.size.to_be_bytes());
        b.extend_from_slice(&e.detected_ms.to_be_bytes());
        let mut reason = e.reason.as_bytes();
        if reason.len() > MAX_REASON {
            let mut cut = MAX_REASON;
            while !e.reason.is_char_boundary(cut) {
                cut -= 1;
            }
            reason = &reason[..cut];
        }
        b.extend_from_slice(&(reason.len() as u16).to_be_bytes());
        b.extend_from_slice(reason);
        match &e.record {
            None => b.push(0),
            Some(r) => {
                b.push(1);
                let t = r.topic.as_bytes();
                let t = &t[..t.len().min(u16::MAX as usize)];
                b.extend_from_slice(&(t.len() as u16).to_be_bytes());
                b.extend_from_slice(t);
                b.extend_from_slice(&r.queue_id.to_be_bytes());
                b.extend_from_slice(&r.queue_offset.to_be_bytes());
            }
        }
    }
    let crc = crc32fast::hash(&b);
    b.extend_from_slice(&crc.to_be_bytes());
    b
}

struct Reader<'a> {
    b: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> std::result::Result<&'a [u8], String> {
        let end = self.pos.checked_add(n).ok_or("length overflow")?;
        let out = self
            .b
            .get(self.pos..end)
            .ok_or_else(|| format!("truncated at byte {}", self.pos))?;
        self.pos = end;
        Ok(out)
    }
    fn u64(&mut self) -> std::result::Result<u64, String> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.take(8)?);
        Ok(u64::from_be_bytes(a))
    }
    fn u32(&mut self) -> std::result::Result<u32, String> {
        let mut a = [0u8; 4];
        a.copy_from_slice(self.take(4)?);
        Ok(u32::from_be_bytes(a))
    }
    fn u16(&mut self) -> std::result::Result<u16, String> {
        let mut a = [0u8; 2];
        a.copy_from_slice(self.take(2)?);
        Ok(u16::from_be_bytes(a))
    }
    fn string(&mut self, n: usize) -> std::result::Result<String, String> {
        String::from_utf8(self.take(n)?.to_vec()).map_err(|e| e.to_string())
    }
}

fn decode(b: &[u8]) -> std::result::Result<BTreeMap<u64, QuarantineEntry>, String> {
    if b.len() < 16 {
        return Err(format!("{} bytes is too short", b.len()));
    }
    let (body, crc) = b.split_at(b.len() - 4);
    let stored = u32::from_be_bytes([crc[0], crc[1], crc[2], crc[3]]);
    let computed = crc32fast::hash(body);
    if stored != computed {
        return Err(format!(
            "CRC mismatch: stored {stored}, computed {computed}"
        ));
    }
    let mut r = Reader { b: body, pos: 0 };
    if r.take(4)? != MAGIC {
        return Err("bad magic".into());
    }
    let version = r.u32()?;
    if version != VERSION {
        return Err(format!("unknown format version {version}"));
    }
    let count = r.u32()?;
    let mut out = BTreeMap::new();
    let mut prev_end = 0u64;
    for _ in 0..count {
        let offset = r.u64()?;
        let size = r.u64()?;
        let detected_ms = r.u64()? as i64;
        let n = r.u16()? as usize;
        let reason = r.string(n)?;
        let record = match r.take(1)?[0] {
            0 => None,
            1 => {
                let n = r.u16()? as usize;
                let topic = r.string(n)?;
                let queue_id = r.u32()? as i32;
                let queue_offset = r.u64()?;
                Some(QueueRef {
                    topic,
                    queue_id,
                    queue_offset,
                })
            }
            x => return Err(format!("bad record flag {x}")),
        };
        if size == 0 || offset < prev_end || offset.checked_add(size).is_none() {
            return Err(format!(
                "entry at {offset} (size {size}) overlaps or is empty"
            ));
        }
        prev_end = offset + size;
        out.insert(
            offset,
            QuarantineEntry {
                offset,
                size,
                detected_ms,
                reason,
                record,
            },
        );
    }
    if r.pos != body.len() {
        return Err("trailing bytes".into());
    }
    Ok(out)
}

impl Quarantine {
    /// Loads `<root>/quarantine` (or its backup).
    pub fn open(root: &Path) -> Result<(Quarantine, QuarantineLoad)> {
        let path = root.join("quarantine");
        let bak = root.join("quarantine.bak");
        let main = read_optional(&path)?;
        let backup = read_optional(&bak)?;
        let (entries, load) = match (main, backup) {
            (None, None) => (BTreeMap::new(), QuarantineLoad::Fresh),
            (Some(m), b) => match decode(&m) {
                Ok(e) => (e, QuarantineLoad::Main),
                Err(why) => match b.map(|b| decode(&b)) {
                    Some(Ok(e)) => (e, QuarantineLoad::Backup(why)),
                    Some(Err(why2)) => (
                        BTreeMap::new(),
                        QuarantineLoad::Lost(format!("main: {why}; backup: {why2}")),
                    ),
                    None => (
                        BTreeMap::new(),
                        QuarantineLoad::Lost(format!("main: {why}; no backup")),
                    ),
                },
            },
            (None, Some(b)) => match decode(&b) {
                Ok(e) => (e, QuarantineLoad::Backup("main file missing".into())),
                Err(why) => (
                    BTreeMap::new(),
                    QuarantineLoad::Lost(format!("main missing; backup: {why}")),
                ),
            },
        };
        Ok((Quarantine { path, bak, entries }, load))
    }

    fn persist(&self) -> Result<()> {
        let data = encode(&self.entries);
        write_atomic(&self.bak, &data)?;
        write_atomic(&self.path, &data)
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
    pub fn len(&self) -> usize {
        self.entries.len()
    }
    pub fn total_bytes(&self) -> u64 {
        self.entries.values().map(|e| e.size).sum()
    }
    pub fn entries(&self) -> Vec<QuarantineEntry> {
        self.entries.values().cloned().collect()
    }

    /// The entry covering `offset`, if any.
    pub fn containing(&self, offset: u64) -> Option<&QuarantineEntry> {
        self.entries
            .range(..=offset)
            .next_back()
            .map(|(_, e)| e)
            .filter(|e| offset < e.end())
    }

    /// The entry starting exactly at `offset`.
    pub fn starting_at(&self, offset: u64) -> Option<&QuarantineEntry> {
        self.entries.get(&offset)
    }

    /// Entries starting in `[from, to)`, ascending.
    pub fn starting_in(&self, from: u64, to: u64) -> Vec<QuarantineEntry> {
        if from >= to {
            return Vec::new();
        }
        self.entries
            .range(from..to)
            .map(|(_, e)| e.clone())
            .collect()
    }

    /// The last entry of unknown record inside `[lo, hi)`.
    pub fn last_unknown_between(&self, lo: u64, hi: u64) -> Option<&QuarantineEntry> {
        if lo >= hi {
            return None;
        }
        self.entries
            .range(lo..hi)
            .rev()
            .map(|(_, e)| e)
            .find(|e| e.record.is_none() && e.end() <= hi)
    }

    /// Every range as sorted `(start, end)`.
    pub fn ranges(&self) -> Vec<(u64, u64)> {
        self.entries.values().map(|e| (e.offset, e.end())).collect()
    }

    /// Adds entries (overlapping ones are refused by skipping them) and persists. Returns the
    /// entries actually added.
    pub fn add(&mut self, new: Vec<QuarantineEntry>) -> Result<Vec<QuarantineEntry>> {
        let mut added = Vec::new();
        for e in new {
            if e.size == 0 {
                continue;
            }
            let overlaps = self.containing(e.offset).is_some()
                || self.entries.range(e.offset..e.end()).next().is_some();
            if !overlaps {
                self.entries.insert(e.offset, e.clone());
                added.push(e);
            }
        }
        if !added.is_empty() {
            self.persist()?;
        }
        Ok(added)
    }

    /// Removes the entry starting at `offset` and persists.
    pub fn remove(&mut self, offset: u64) -> Result<Option<QuarantineEntry>> {
        let e = self.entries.remove(&offset);
        if e.is_some() {
            self.persist()?;
        }
        Ok(e)
    }

    /// Keeps the entries `keep` accepts; persists when any was dropped. Returns the dropped.
    pub fn retain(
        &mut self,
        mut keep: impl FnMut(&QuarantineEntry) -> bool,
    ) -> Result<Vec<QuarantineEntry>> {
        let dropped: Vec<QuarantineEntry> = self
            .entries
            .values()
            .filter(|e| !keep(e))
            .cloned()
            .collect();
        if !dropped.is_empty() {
            for e in &dropped {
                self.entries.remove(&e.offset);
            }
            self.persist()?;
        }
        Ok(dropped)
    }

    /// Sets the record of the entry at `offset` (learnt later) and persists.
    pub fn set_record(&mut self, offset: u64, record: QueueRef) -> Result<()> {
        if let Some(e) = self.entries.get_mut(&offset) {
            if e.record.as_ref() != Some(&record) {
                e.record = Some(record);
                self.persist()?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn entry(offset: u64, size: u64, rec: bool) -> QuarantineEntry {
        QuarantineEntry {
            offset,
            size,
            detected_ms: 1_700_000_000_000,
            reason: "CRC mismatch: stored 1, computed 2".into(),
            record: rec.then(|| QueueRef {
                topic: "T".into(),
                queue_id: 3,
                queue_offset: 42,
            }),
        }
    }

    #[test]
    fn persists_and_falls_back_to_the_backup() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut q, load) = Quarantine::open(dir.path()).expect("open");
        assert_eq!(load, QuarantineLoad::Fresh);
        let added = q
            .add(vec![entry(100, 50, true), entry(1000, 8, false)])
            .expect("add");
        assert_eq!(added.len(), 2);
        // Overlapping entries are not added.
        assert!(q.add(vec![entry(120, 10, false)]).expect("add").is_empty());
        assert!(q.add(vec![entry(90, 20, false)]).expect("add").is_empty());
        assert_eq!(q.containing(149).map(|e| e.offset), Some(100));
        assert!(q.containing(150).is_none());
        let (q2, load) = Quarantine::open(dir.path()).expect("reopen");
        assert_eq!(load, QuarantineLoad::Main);
        assert_eq!(q2.entries(), q.entries());
        // A flipped bit in the main file: the backup is used.
        let main = dir.path().join("quarantine");
        let mut b = std::fs::read(&main).expect("read");
        b[20] ^= 1;
        std::fs::write(&main, &b).expect("write");
        let (q3, load) = Quarantine::open(dir.path()).expect("reopen");
        assert!(matches!(load, QuarantineLoad::Backup(_)));
        assert_eq!(q3.entries(), q.entries());
        // Both bad: empty, and the report says it was lost.
        std::fs::write(dir.path().join("quarantine.bak"), &b).expect("write");
        let (q4, load) = Quarantine::open(dir.path()).expect("reopen");
        assert!(matches!(load, QuarantineLoad::Lost(_)));
        assert!(q4.is_empty());
    }

    #[test]
    fn retain_and_remove_persist() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut q, _) = Quarantine::open(dir.path()).expect("open");
        q.add(vec![
            entry(0, 10, false),
            entry(10, 10, true),
            entry(50, 5, false),
        ])
        .expect("add");
        let dropped = q.retain(|e| e.offset >= 10).expect("retain");
        assert_eq!(dropped.len(), 1);
        assert_eq!(q.remove(50).expect("remove").map(|e| e.size), Some(5));
        let (q2, _) = Quarantine::open(dir.path()).expect("reopen");
        assert_eq!(q2.ranges(), vec![(10, 20)]);
    }

    proptest! {
        /// Any list round-trips, and any single flipped bit is detected.
        #[test]
        fn codec_roundtrips_and_detects_flips(
            items in proptest::collection::vec((1u64..1000, any::<bool>(), "[a-z]{0,40}"), 0..20),
            flip in any::<usize>(),
        ) {
            let mut m = BTreeMap::new();
            let mut off = 0u64;
            for (size, rec, reason) in items {
                let mut e = entry(off, size, rec);
                e.reason = reason;
                m.insert(off, e);
                off += size + 7;
            }
            let b = encode(&m);
            prop_assert_eq!(decode(&b).expect("decode"), m);
            let mut bad = b.clone();
            let i = flip % (bad.len() * 8);
            bad[i / 8] ^= 1 << (i % 8);
            prop_assert!(decode(&bad).is_err());
        }
    }
}
