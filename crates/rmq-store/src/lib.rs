//! rmq_ha's storage engine.
//!
//! * [`commitlog`]: fixed-size segments of RocketMQ stored-message records, batch append,
//!   zero-copy reads, async and group-commit flush, crash-safe truncation, recovery, retention.
//! * [`consume_queue`]: per (topic, queue id) 20-byte units pointing into the commitlog.
//! * [`store`]: the commitlog, consume queues, checkpoint and the dispatcher that builds consume
//!   queues from committed records but never past the confirm offset.
//! * [`epoch`]: the epoch file and the truncation algorithm of RIP-44.
//! * [`checkpoint`]: flushed / confirm / dispatch offsets and timestamps.
//! * [`quarantine`]: damaged commitlog ranges that are never served until repaired.
//! * [`replica`]: a slave's TRANSFER phase in one thread (receive, append, epochs, confirm, ack).
//! * [`cq_manifest`]: which consume queues exist and their durable sizes (rebuild on loss).

pub mod baseline;
pub mod checkpoint;
pub mod commitlog;
pub mod consume_queue;
pub mod cq_manifest;
pub mod dispatch;
pub mod epoch;
pub mod error;
pub mod fsutil;
pub mod quarantine;
pub mod replica;
pub mod store;

pub use error::{Result, StoreError};
