//! The store's one error type. Each variant maps to exactly one Python class in
//! `rmq_ha.errors` (see crates/rmq-py).

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// An operating-system I/O failure, with the file it concerned.
    #[error("I/O error on {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A record (or unit) failed validation when read: it is never returned.
    #[error("corrupt record at offset {offset}: {reason}")]
    CorruptRecord { offset: u64, reason: String },
    /// The bytes at `offset` are a quarantined damaged range: never served until repaired.
    #[error("record at {offset} is quarantined ({size} bytes): {reason}")]
    Quarantined {
        offset: u64,
        size: u64,
        reason: String,
    },
    /// A whole file (epoch file, checkpoint, consume-queue unit) failed its checks.
    #[error("corrupt file {path}: {reason}")]
    CorruptFile { path: PathBuf, reason: String },
    /// An offset outside [min, max).
    #[error("offset {offset} out of range [{min}, {max})")]
    OffsetOutOfRange { offset: u64, min: u64, max: u64 },
    /// An epoch-file change that would break its invariants.
    #[error("epoch conflict: {0}")]
    EpochConflict(String),
    /// A message the store refuses to write (too large, empty topic, ...).
    #[error("illegal message: {0}")]
    MessageIllegal(String),
    /// A configuration value that is out of range; names the key.
    #[error("bad config {key}: {reason}")]
    Config { key: &'static str, reason: String },
    /// An argument the operation cannot accept (e.g. a confirm offset inside a record).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The store was closed.
    #[error("store is closed")]
    Closed,
}

pub type Result<T> = std::result::Result<T, StoreError>;

impl StoreError {
    /// An I/O error saying the filesystem has no space (or quota) left for the write.
    pub fn is_no_space(&self) -> bool {
        match self {
            StoreError::Io { source, .. } => {
                matches!(
                    source.raw_os_error(),
                    Some(libc::ENOSPC) | Some(libc::EDQUOT)
                )
            }
            _ => false,
        }
    }
}

/// Attaches a path to an `io::Error`.
pub trait IoContext<T> {
    fn at(self, path: &std::path::Path) -> Result<T>;
}

impl<T> IoContext<T> for std::io::Result<T> {
    fn at(self, path: &std::path::Path) -> Result<T> {
        self.map_err(|source| StoreError::Io {
            path: path.to_path_buf(),
            source,
        })
    }
}
