//! The store checkpoint: a small binary file rewritten atomically.
//!
//! Layout (big-endian i64s, the first five at RocketMQ's positions so the meaning matches
//! `StoreCheckpoint`): physicMsgTimestamp @0, logicsMsgTimestamp @8, indexMsgTimestamp @16,
//! masterFlushedOffset @24, confirmPhyOffset @32; then ours: dispatchedOffset @40,
//! flushedOffset @48, format version @56 (u32). Version 1 (64 bytes): CRC32 of bytes 0..60 @60
//! (u32). Version 2 (80 bytes): zero @60 (u32), the commitlog's min offset @64 (what retention
//! left; a head segment missing below it was not deleted by the store), CRC32 of bytes 0..72
//! @72 (u32), zero @76 (u32). Version 1 files are still read (min offset unknown).
//!
//! A missing checkpoint means a fresh store. A corrupt one (bad CRC, wrong length) is reported
//! and treated as "know nothing": recovery then validates and redispatches from the first
//! segment, which is slow but loses nothing.

use std::path::{Path, PathBuf};

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;

use crate::error::{IoContext, Result};
use crate::fsutil::{read_optional, write_atomic};

pub const CHECKPOINT_LEN: usize = 80;
const V1_LEN: usize = 64;
const VERSION: u32 = 2;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Checkpoint {
    pub physic_msg_timestamp: i64,
    pub logics_msg_timestamp: i64,
    pub index_msg_timestamp: i64,
    pub master_flushed_offset: i64,
    pub confirm_offset: i64,
    pub dispatched_offset: i64,
    pub flushed_offset: i64,
    /// The commitlog's min offset when the checkpoint was written (None: a version 1 file).
    pub log_min_offset: Option<u64>,
}

/// How the checkpoint was found on open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckpointLoad {
    Fresh,
    Loaded,
    Corrupt(String),
}

impl Checkpoint {
    pub fn encode(&self) -> [u8; CHECKPOINT_LEN] {
        let mut b = [0u8; CHECKPOINT_LEN];
        let fields = [
            self.physic_msg_timestamp,
            self.logics_msg_timestamp,
            self.index_msg_timestamp,
            self.master_flushed_offset,
            self.confirm_offset,
            self.dispatched_offset,
            self.flushed_offset,
        ];
        for (i, v) in fields.iter().enumerate() {
            b[i * 8..i * 8 + 8].copy_from_slice(&v.to_be_bytes());
        }
        b[56..60].copy_from_slice(&VERSION.to_be_bytes());
        b[64..72].copy_from_slice(&self.log_min_offset.unwrap_or(0).to_be_bytes());
        let crc = crc32fast::hash(&b[..72]);
        b[72..76].copy_from_slice(&crc.to_be_bytes());
        b
    }

    pub fn decode(b: &[u8]) -> std::result::Result<Checkpoint, String> {
        let u32_at = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let (crc_at, version) = match b.len() {
            V1_LEN => (60, 1),
            CHECKPOINT_LEN => (72, VERSION),
            n => {
                return Err(format!(
                    "length {n} instead of {CHECKPOINT_LEN} (or {V1_LEN})"
                ))
            }
        };
        let crc = u32_at(crc_at);
        let computed = crc32fast::hash(&b[..crc_at]);
        if crc != computed {
            return Err(format!("CRC mismatch: stored {crc}, computed {computed}"));
        }
        if u32_at(56) != version {
            return Err(format!(
                "format version {} in a {}-byte file",
                u32_at(56),
                b.len()
            ));
        }
        let f = |i: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[i * 8..i * 8 + 8]);
            i64::from_be_bytes(a)
        };
        Ok(Checkpoint {
            physic_msg_timestamp: f(0),
            logics_msg_timestamp: f(1),
            index_msg_timestamp: f(2),
            master_flushed_offset: f(3),
            confirm_offset: f(4),
            dispatched_offset: f(5),
            flushed_offset: f(6),
            log_min_offset: (version >= 2).then(|| f(8) as u64),
        })
    }
}

/// The checkpoint file at `<root>/checkpoint`.
pub struct CheckpointFile {
    path: PathBuf,
}

impl CheckpointFile {
    pub fn new(root: &Path) -> CheckpointFile {
        CheckpointFile {
            path: root.join("checkpoint"),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn load(&self) -> Result<(Checkpoint, CheckpointLoad)> {
        match read_optional(&self.path)? {
            None => Ok((Checkpoint::default(), CheckpointLoad::Fresh)),
            Some(data) => match Checkpoint::decode(&data) {
                Ok(c) => Ok((c, CheckpointLoad::Loaded)),
                Err(reason) => Ok((Checkpoint::default(), CheckpointLoad::Corrupt(reason))),
            },
        }
    }

    pub fn store(&self, c: &Checkpoint) -> Result<()> {
        write_atomic(&self.path, &c.encode())
    }

    /// Raises the recorded commitlog min offset to `min`, rewriting the file in place (one
    /// positioned write of the whole record and an fdatasync): retention calls this before it
    /// unlinks segments, and it must work on a full disk, where a new file cannot be written.
    /// Nothing to do without a readable checkpoint (then no head check happens on open).
    pub fn raise_min_in_place(&self, min: u64) -> Result<()> {
        let Some(data) = read_optional(&self.path)? else {
            return Ok(());
        };
        let Ok(mut c) = Checkpoint::decode(&data) else {
            return Ok(());
        };
        if c.log_min_offset.is_some_and(|m| m >= min) {
            return Ok(());
        }
        c.log_min_offset = Some(min);
        let f = OpenOptions::new()
            .write(true)
            .open(&self.path)
            .at(&self.path)?;
        f.write_all_at(&c.encode(), 0).at(&self.path)?;
        f.sync_data().at(&self.path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_min_offset_is_raised_in_place_and_never_lowered() {
        let dir = tempfile::tempdir().expect("tempdir");
        let f = CheckpointFile::new(dir.path());
        f.raise_min_in_place(7).expect("no file: nothing to do");
        assert_eq!(f.load().expect("load").1, CheckpointLoad::Fresh);
        let c = Checkpoint {
            flushed_offset: 9,
            log_min_offset: Some(0),
            ..Checkpoint::default()
        };
        f.store(&c).expect("store");
        let inode =
            |p: &Path| std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(p).expect("stat"));
        let before = inode(f.path());
        f.raise_min_in_place(4096).expect("raise");
        let (got, load) = f.load().expect("load");
        assert_eq!(load, CheckpointLoad::Loaded);
        assert_eq!(
            got,
            Checkpoint {
                log_min_offset: Some(4096),
                ..c
            }
        );
        assert_eq!(inode(f.path()), before, "rewritten in place, no new file");
        f.raise_min_in_place(100).expect("lower: kept");
        assert_eq!(f.load().expect("load").0.log_min_offset, Some(4096));
        std::fs::write(f.path(), b"junk").expect("write");
        f.raise_min_in_place(8192)
            .expect("a corrupt file is left alone");
        assert_eq!(std::fs::read(f.path()).expect("read"), b"junk");
    }

    #[test]
    fn roundtrip_and_corruption() {
        let dir = tempfile::tempdir().expect("tempdir");
        let f = CheckpointFile::new(dir.path());
        assert_eq!(f.load().expect("load").1, CheckpointLoad::Fresh);
        let c = Checkpoint {
            physic_msg_timestamp: 1,
            logics_msg_timestamp: 2,
            index_msg_timestamp: 3,
            master_flushed_offset: 4,
            confirm_offset: 5,
            dispatched_offset: 6,
            flushed_offset: 7,
            log_min_offset: Some(8),
        };
        f.store(&c).expect("store");
        assert_eq!(f.load().expect("load"), (c, CheckpointLoad::Loaded));
        // RocketMQ's confirmPhyOffset sits at byte 32.
        let raw = std::fs::read(f.path()).expect("read");
        assert_eq!(&raw[32..40], &5i64.to_be_bytes());
        let mut bad = raw.clone();
        bad[33] ^= 0x40;
        std::fs::write(f.path(), &bad).expect("write");
        assert!(matches!(
            f.load().expect("load").1,
            CheckpointLoad::Corrupt(_)
        ));
        // A version 1 file (64 bytes, CRC over 0..60) is read, its min offset unknown.
        let mut v1 = raw[..64].to_vec();
        v1[56..60].copy_from_slice(&1u32.to_be_bytes());
        let crc = crc32fast::hash(&v1[..60]);
        v1[60..64].copy_from_slice(&crc.to_be_bytes());
        std::fs::write(f.path(), &v1).expect("write");
        let (old, load) = f.load().expect("load");
        assert_eq!(load, CheckpointLoad::Loaded);
        assert_eq!(
            old,
            Checkpoint {
                log_min_offset: None,
                ..c
            }
        );
        std::fs::write(f.path(), &raw[..10]).expect("write");
        assert!(matches!(
            f.load().expect("load").1,
            CheckpointLoad::Corrupt(_)
        ));
    }
}
