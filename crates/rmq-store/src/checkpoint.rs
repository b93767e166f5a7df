//! The store checkpoint: a small binary file rewritten atomically.
//!
//! Layout (big-endian i64s, the first five at RocketMQ's positions so the meaning matches
//! `StoreCheckpoint`): physicMsgTimestamp @0, logicsMsgTimestamp @8, indexMsgTimestamp @16,
//! masterFlushedOffset @24, confirmPhyOffset @32; then ours: dispatchedOffset @40,
//! flushedOffset @48, format version @56 (u32), CRC32 of bytes 0..60 @60 (u32). 64 bytes.
//!
//! A missing checkpoint means a fresh store. A corrupt one (bad CRC, wrong length) is reported
//! and treated as "know nothing": recovery then validates and redispatches from the first
//! segment, which is slow but loses nothing.

use std::path::{Path, PathBuf};

use crate::error::Result;
use crate::fsutil::{read_optional, write_atomic};

pub const CHECKPOINT_LEN: usize = 64;
const VERSION: u32 = 1;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Checkpoint {
    pub physic_msg_timestamp: i64,
    pub logics_msg_timestamp: i64,
    pub index_msg_timestamp: i64,
    pub master_flushed_offset: i64,
    pub confirm_offset: i64,
    pub dispatched_offset: i64,
    pub flushed_offset: i64,
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
        let crc = crc32fast::hash(&b[..60]);
        b[60..64].copy_from_slice(&crc.to_be_bytes());
        b
    }

    pub fn decode(b: &[u8]) -> std::result::Result<Checkpoint, String> {
        if b.len() != CHECKPOINT_LEN {
            return Err(format!("length {} instead of {CHECKPOINT_LEN}", b.len()));
        }
        let crc = u32::from_be_bytes([b[60], b[61], b[62], b[63]]);
        let computed = crc32fast::hash(&b[..60]);
        if crc != computed {
            return Err(format!("CRC mismatch: stored {crc}, computed {computed}"));
        }
        let version = u32::from_be_bytes([b[56], b[57], b[58], b[59]]);
        if version != VERSION {
            return Err(format!("unknown format version {version}"));
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
}

#[cfg(test)]
mod tests {
    use super::*;

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
        std::fs::write(f.path(), &raw[..10]).expect("write");
        assert!(matches!(
            f.load().expect("load").1,
            CheckpointLoad::Corrupt(_)
        ));
    }
}
