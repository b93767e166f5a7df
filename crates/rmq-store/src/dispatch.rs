//! Bookkeeping of the dispatcher: the next queue offset of every queue, and the consume-queue
//! units of appended records that are not dispatched yet.
//!
//! Appends (local batches and replicated bytes) know every record they place, so they queue its
//! consume-queue unit here instead of making the dispatcher read the record back through the
//! segment mapping. The dispatcher drains the queue up to the confirm offset and scans the
//! commitlog only for ranges the queue does not cover (after recovery, or when the queue was
//! dropped because the confirm offset lagged too far).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use crate::consume_queue::CqUnit;

/// Beyond this many undispatched units the queue is dropped and the dispatcher scans instead,
/// so a confirm offset that stops moving cannot grow memory without bound.
pub const MAX_PENDING_UNITS: usize = 1 << 20;

/// A queue: interned topic and queue id.
pub type QueueKey = (Arc<str>, i32);

#[derive(Debug, Clone)]
pub struct PendingUnit {
    pub key: QueueKey,
    pub index: u64,
    pub unit: CqUnit,
}

impl PendingUnit {
    pub fn end(&self) -> u64 {
        self.unit.phys_offset + u64::from(self.unit.size)
    }
}

#[derive(Debug, Default)]
pub struct DispatchState {
    topics: HashMap<String, Arc<str>>,
    /// Next queue offset per topic and queue id (dispatched or not).
    next: HashMap<Arc<str>, HashMap<i32, i64>>,
    /// Units of records at or after `pending_from`, in commitlog order.
    pending: VecDeque<PendingUnit>,
    /// Every dispatchable record at or after this offset is in `pending` (until dispatched).
    pub pending_from: u64,
}

impl DispatchState {
    pub fn new(pending_from: u64) -> DispatchState {
        DispatchState {
            pending_from,
            ..DispatchState::default()
        }
    }

    pub fn intern(&mut self, topic: &str) -> Arc<str> {
        if let Some(t) = self.topics.get(topic) {
            return t.clone();
        }
        let t: Arc<str> = Arc::from(topic);
        self.topics.insert(topic.to_string(), t.clone());
        t
    }

    pub fn next_offset(&self, topic: &str, queue_id: i32) -> i64 {
        self.next
            .get(topic)
            .and_then(|m| m.get(&queue_id))
            .copied()
            .unwrap_or(0)
    }

    /// Raises the next offset of a queue to at least `next`.
    pub fn raise_next(&mut self, topic: &str, queue_id: i32, next: i64) {
        let t = self.intern(topic);
        let e = self.next.entry(t).or_default().entry(queue_id).or_insert(0);
        *e = (*e).max(next);
    }

    /// Forgets every next offset (before a rebuild).
    pub fn clear_next(&mut self) {
        self.next.clear();
    }

    /// Queues the unit of a record just appended at the end of the log.
    pub fn push(&mut self, key: QueueKey, index: u64, unit: CqUnit) {
        self.pending.push_back(PendingUnit { key, index, unit });
    }

    /// After an append that ended at `log_end`: drops the queue if it grew too large.
    pub fn bound(&mut self, log_end: u64) {
        if self.pending.len() > MAX_PENDING_UNITS {
            self.pending.clear();
            self.pending_from = log_end;
        }
    }

    /// Pops the queued units whose records end at or below `target`.
    pub fn take_until(&mut self, target: u64, out: &mut Vec<PendingUnit>) {
        while let Some(front) = self.pending.front() {
            if front.end() > target {
                break;
            }
            if let Some(u) = self.pending.pop_front() {
                out.push(u);
            }
        }
    }

    /// The log was cut back to `offset`.
    pub fn truncate(&mut self, offset: u64) {
        while self.pending.back().is_some_and(|u| u.end() > offset) {
            self.pending.pop_back();
        }
        self.pending_from = self.pending_from.min(offset);
    }

    pub fn pending_len(&self) -> usize {
        self.pending.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(phys: u64, size: u32) -> CqUnit {
        CqUnit {
            phys_offset: phys,
            size,
            tag_code: 0,
        }
    }

    #[test]
    fn take_until_stops_at_records_that_end_past_the_target() {
        let mut d = DispatchState::new(0);
        let k = (d.intern("T"), 0);
        d.push(k.clone(), 0, unit(0, 100));
        d.push(k.clone(), 1, unit(100, 100));
        let mut out = Vec::new();
        d.take_until(150, &mut out);
        assert_eq!(out.len(), 1);
        d.take_until(200, &mut out);
        assert_eq!(out.len(), 2);
    }

    #[test]
    fn truncate_drops_units_past_the_cut() {
        let mut d = DispatchState::new(0);
        let k = (d.intern("T"), 0);
        for i in 0..10 {
            d.push(k.clone(), i, unit(i * 10, 10));
        }
        d.truncate(55);
        assert_eq!(d.pending_len(), 5);
        assert_eq!(d.pending_from, 0);
        let mut d = DispatchState::new(100);
        d.truncate(40);
        assert_eq!(d.pending_from, 40);
    }

    #[test]
    fn next_offsets_only_grow() {
        let mut d = DispatchState::new(0);
        d.raise_next("T", 1, 5);
        d.raise_next("T", 1, 3);
        assert_eq!(d.next_offset("T", 1), 5);
        assert_eq!(d.next_offset("T", 2), 0);
    }
}
