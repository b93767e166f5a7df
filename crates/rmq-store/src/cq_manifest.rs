//! The consume-queue manifest: which queues exist and how many units each held durably, so
//! that a missing queue directory or a shortened consume-queue file is noticed on open and the
//! queue rebuilt from the commitlog instead of silently restarting at offset 0.
//!
//! File `<root>/cqmanifest`, big-endian, rewritten atomically by the checkpoint cycle after the
//! consume-queue files it describes were synced (so every count in it is durable), and only
//! when it changed:
//!
//! ```text
//! "RMQM" | version u32 (2) | count u32 | covered u64
//! per queue: topic_len u16 | topic | queue_id i32 | max_offset u64
//! CRC32 (IEEE) of every byte before it, u32
//! ```
//!
//! `covered` (version 2) is the commitlog dispatch offset the counts were taken at: every
//! record below it has its unit counted. Records dispatched after it (the counts are refreshed
//! at most every few seconds) are checked against the queues on open by reading them from the
//! log. Version 1 (no `covered`) is still read.
//!
//! An entry with queue id -1 is not a queue: it is a deleted topic's floor (`max_offset` is the
//! commitlog offset of its deletion marker; see "Deleted topics" in [`crate::store`]). An entry
//! with queue id `q <= -2` is queue `-2 - q` retired: a deleted topic's emptied queue whose
//! files were deleted, `max_offset` the offset it goes on from if the topic comes back.

use std::path::{Path, PathBuf};

use crate::error::Result;
use crate::fsutil::{read_optional, write_atomic};

const MAGIC: &[u8; 4] = b"RMQM";
const VERSION: u32 = 2;

/// A decoded manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    pub entries: Vec<ManifestEntry>,
    /// The dispatch offset the counts were taken at (None: a version 1 manifest).
    pub covered: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestEntry {
    pub topic: String,
    pub queue_id: i32,
    /// The queue's max offset (next index) when the manifest was written; its units were
    /// synced before.
    pub max_offset: u64,
}

pub fn path(root: &Path) -> PathBuf {
    root.join("cqmanifest")
}

/// Encodes entries (callers pass them sorted, so equal sets give equal bytes) counted at the
/// dispatch offset `covered`.
pub fn encode(entries: &[ManifestEntry], covered: u64) -> Vec<u8> {
    let mut b = Vec::with_capacity(20 + entries.len() * 32);
    b.extend_from_slice(MAGIC);
    b.extend_from_slice(&VERSION.to_be_bytes());
    b.extend_from_slice(&(entries.len() as u32).to_be_bytes());
    b.extend_from_slice(&covered.to_be_bytes());
    for e in entries {
        let t = e.topic.as_bytes();
        let t = &t[..t.len().min(u16::MAX as usize)];
        b.extend_from_slice(&(t.len() as u16).to_be_bytes());
        b.extend_from_slice(t);
        b.extend_from_slice(&e.queue_id.to_be_bytes());
        b.extend_from_slice(&e.max_offset.to_be_bytes());
    }
    let crc = crc32fast::hash(&b);
    b.extend_from_slice(&crc.to_be_bytes());
    b
}

pub fn decode(b: &[u8]) -> std::result::Result<Manifest, String> {
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
    if &body[..4] != MAGIC {
        return Err("bad magic".into());
    }
    let u32_at = |i: usize| -> std::result::Result<u32, String> {
        body.get(i..i + 4)
            .map(|x| u32::from_be_bytes([x[0], x[1], x[2], x[3]]))
            .ok_or_else(|| format!("truncated at byte {i}"))
    };
    let u64_at = |i: usize| -> std::result::Result<u64, String> {
        body.get(i..i + 8)
            .map(|x| {
                let mut a = [0u8; 8];
                a.copy_from_slice(x);
                u64::from_be_bytes(a)
            })
            .ok_or_else(|| format!("truncated at byte {i}"))
    };
    let version = u32_at(4)?;
    if version != 1 && version != VERSION {
        return Err(format!("unknown format version {version}"));
    }
    let count = u32_at(8)? as usize;
    let (covered, mut pos) = if version == 1 {
        (None, 12)
    } else {
        (Some(u64_at(12)?), 20)
    };
    let mut out = Vec::with_capacity(count.min(1 << 20));
    for _ in 0..count {
        let tl = body
            .get(pos..pos + 2)
            .map(|x| u16::from_be_bytes([x[0], x[1]]) as usize)
            .ok_or_else(|| format!("truncated at byte {pos}"))?;
        pos += 2;
        let topic = body
            .get(pos..pos + tl)
            .ok_or_else(|| format!("truncated at byte {pos}"))?;
        let topic = String::from_utf8(topic.to_vec()).map_err(|e| e.to_string())?;
        pos += tl;
        let queue_id = u32_at(pos)? as i32;
        pos += 4;
        let max = u64_at(pos)?;
        pos += 8;
        out.push(ManifestEntry {
            topic,
            queue_id,
            max_offset: max,
        });
    }
    if pos != body.len() {
        return Err("trailing bytes".into());
    }
    Ok(Manifest {
        entries: out,
        covered,
    })
}

/// None: no manifest (a store written before it existed); Some(Err): it fails its checks.
pub fn load(root: &Path) -> Result<Option<std::result::Result<Manifest, String>>> {
    Ok(read_optional(&path(root))?.map(|b| decode(&b)))
}

pub fn store(root: &Path, bytes: &[u8]) -> Result<()> {
    write_atomic(&path(root), bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn roundtrips_and_detects_any_flipped_bit(
            items in proptest::collection::vec(("[A-Za-z0-9_%|-]{1,30}", any::<i32>(), any::<u64>()), 0..30),
            covered in any::<u64>(),
            flip in any::<usize>(),
        ) {
            let entries: Vec<ManifestEntry> = items
                .into_iter()
                .map(|(topic, queue_id, max_offset)| ManifestEntry { topic, queue_id, max_offset })
                .collect();
            let b = encode(&entries, covered);
            prop_assert_eq!(decode(&b).expect("decode"), Manifest { entries, covered: Some(covered) });
            let mut bad = b.clone();
            let i = flip % (bad.len() * 8);
            bad[i / 8] ^= 1 << (i % 8);
            prop_assert!(decode(&bad).is_err());
        }
    }

    #[test]
    fn load_distinguishes_missing_from_corrupt() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert!(load(dir.path()).expect("load").is_none());
        store(dir.path(), b"junk").expect("store");
        assert!(matches!(load(dir.path()).expect("load"), Some(Err(_))));
        let e = vec![ManifestEntry {
            topic: "T".into(),
            queue_id: 1,
            max_offset: 9,
        }];
        store(dir.path(), &encode(&e, 77)).expect("store");
        assert_eq!(
            load(dir.path()).expect("load"),
            Some(Ok(Manifest {
                entries: e,
                covered: Some(77)
            }))
        );
    }

    #[test]
    fn reads_version_1() {
        // a version 1 file: no `covered` after the count
        let mut b = Vec::new();
        b.extend_from_slice(MAGIC);
        b.extend_from_slice(&1u32.to_be_bytes());
        b.extend_from_slice(&1u32.to_be_bytes());
        b.extend_from_slice(&1u16.to_be_bytes());
        b.extend_from_slice(b"T");
        b.extend_from_slice(&3i32.to_be_bytes());
        b.extend_from_slice(&42u64.to_be_bytes());
        let crc = crc32fast::hash(&b);
        b.extend_from_slice(&crc.to_be_bytes());
        let m = decode(&b).expect("decode");
        assert_eq!(m.covered, None);
        assert_eq!(
            m.entries,
            vec![ManifestEntry {
                topic: "T".into(),
                queue_id: 3,
                max_offset: 42
            }]
        );
    }
}
