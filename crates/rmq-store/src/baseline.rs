//! The machine's baseline for `rmq-ha bench store`: the same number of bytes written
//! sequentially by a plain writer (one `write` per batch, no encoding, no indexes) with the same
//! fsync cadence as the store run it is compared with.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::error::{IoContext, Result};

/// When the baseline writer syncs.
#[derive(Debug, Clone, Copy)]
pub enum SyncCadence {
    /// fdatasync after every batch (the store's group commit with one writer).
    EveryBatch,
    /// fdatasync when this much time has passed since the last one (the store's async flush).
    Interval(Duration),
}

#[derive(Debug, Clone, Copy)]
pub struct BaselineResult {
    pub bytes: u64,
    pub batches: u64,
    pub seconds: f64,
    pub syncs: u64,
}

/// Writes `batches` batches of `batch_bytes` bytes to a new file at `path`.
pub fn sequential_write(
    path: &Path,
    batch_bytes: usize,
    batches: u64,
    cadence: SyncCadence,
) -> Result<BaselineResult> {
    let mut f = OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .open(path)
        .at(path)?;
    let batch: Vec<u8> = (0..batch_bytes).map(|i| (i % 251) as u8).collect();
    let start = Instant::now();
    let mut last_sync = start;
    let mut syncs = 0u64;
    for _ in 0..batches {
        f.write_all(&batch).at(path)?;
        let due = match cadence {
            SyncCadence::EveryBatch => true,
            SyncCadence::Interval(d) => last_sync.elapsed() >= d,
        };
        if due {
            f.sync_data().at(path)?;
            syncs += 1;
            last_sync = Instant::now();
        }
    }
    f.sync_data().at(path)?;
    syncs += 1;
    Ok(BaselineResult {
        bytes: batch_bytes as u64 * batches,
        batches,
        seconds: start.elapsed().as_secs_f64(),
        syncs,
    })
}
