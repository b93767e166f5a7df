//! Store-level tests: recovery after corruption, crash-safe truncation (RocketMQ #10666),
//! replication through append_raw, confirm-offset dispatch and queue offsets (#7689).

use std::fs::{self, OpenOptions};
use std::net::SocketAddr;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::Duration;

use proptest::prelude::*;
use rmq_store::store::{Store, StoreConfig};
use rmq_store::StoreError;
use rmq_wire::message::{decode_record, Decoded, MessageIn};

const SEG: u64 = 64 * 1024;

fn cfg(root: &Path) -> StoreConfig {
    let mut c = StoreConfig::new(root);
    c.segment_size = SEG;
    c.cq_units_per_file = 64;
    c.flush_interval_ms = 20;
    c
}

fn msg<'a>(topic: &'a [u8], qid: i32, body: &'a [u8]) -> MessageIn<'a> {
    MessageIn {
        topic,
        queue_id: qid,
        flag: 0,
        sys_flag: 0,
        body,
        properties: b"TAGS\x01t\x02",
        born_timestamp: 1,
        born_host: SocketAddr::from(([127, 0, 0, 1], 4000)),
        reconsume_times: 0,
        prepared_txn_offset: 0,
    }
}

fn body(i: usize, len: usize) -> Vec<u8> {
    (0..len).map(|j| (i * 31 + j) as u8).collect()
}

/// Appends `n` messages one batch at a time; returns (offset, size) of each.
fn fill(store: &Store, n: usize, len_of: impl Fn(usize) -> usize) -> Vec<(u64, u32)> {
    let mut out = Vec::new();
    for i in 0..n {
        let b = body(i, len_of(i));
        let p = store
            .append_batch(&[msg(b"T", (i % 3) as i32, &b)])
            .expect("append");
        out.push((p[0].physical_offset, p[0].size));
    }
    out
}

fn seg_path(root: &Path, start: u64) -> std::path::PathBuf {
    root.join("commitlog").join(format!("{start:020}"))
}

fn assert_readable(store: &Store, placed: &[(u64, u32)]) {
    for &(off, size) in placed {
        let r = store.read_record(off).expect("record readable");
        assert_eq!(r.len(), size as usize);
        assert!(matches!(
            decode_record(r.as_slice()),
            Ok(Decoded::Record(_))
        ));
    }
}

#[derive(Debug, Clone)]
enum Damage {
    FlipBit { rel: u64, bit: u8 },
    TruncateFile { keep_rel: u64 },
    Garbage { rel: u64, len: usize, seed: u8 },
    ZeroFill { rel: u64 },
}

fn damage_strategy() -> impl Strategy<Value = Damage> {
    prop_oneof![
        (any::<u64>(), 0u8..8).prop_map(|(rel, bit)| Damage::FlipBit { rel, bit }),
        any::<u64>().prop_map(|keep_rel| Damage::TruncateFile { keep_rel }),
        (any::<u64>(), 1usize..3000, any::<u8>()).prop_map(|(rel, len, seed)| Damage::Garbage {
            rel,
            len,
            seed
        }),
        any::<u64>().prop_map(|rel| Damage::ZeroFill { rel }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, .. ProptestConfig::default() })]

    /// A torn tail: random corruption past the durable point (the flushed offset of the last
    /// checkpoint, here one written before the damaged records) keeps exactly the records
    /// before the first damaged byte, and never serves a damaged record.
    #[test]
    fn recovery_returns_exactly_the_valid_prefix(
        n in 5usize..120,
        durable_frac in 0.0f64..1.0,
        sizes in proptest::collection::vec(0usize..2500, 120),
        damage in damage_strategy(),
    ) {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        let mut placed;
        let stale_ckpt;
        {
            let (store, _) = Store::open(cfg(root)).expect("open");
            let m0 = ((n as f64) * durable_frac) as usize;
            placed = fill(&store, m0, |i| sizes[i]);
            store.flush().expect("flush");
            store.checkpoint().expect("checkpoint");
            stale_ckpt = fs::read(root.join("checkpoint")).expect("read ckpt");
            let more = fill(&store, n - m0, |i| sizes[m0 + i]);
            placed.extend(more);
            store.close().expect("close");
        }
        // As if the process had died before any later checkpoint: the durable point is the end
        // of the first m records.
        fs::write(root.join("checkpoint"), &stale_ckpt).expect("restore ckpt");
        let m = ((n as f64) * durable_frac) as usize;
        let durable = m
            .checked_sub(1)
            .map_or(0, |i| placed[i].0 + placed[i].1 as u64);
        let max = placed.last().map(|&(o, s)| o + s as u64).expect("non-empty");
        // Damage somewhere in the last segment's written bytes at or past the durable point.
        let base = max - 1 - (max - 1) % SEG;
        let lo = durable.max(base);
        let span = max - lo;
        let path = seg_path(root, base);
        let before = fs::read(&path).expect("read seg");
        let f = OpenOptions::new().read(true).write(true).open(&path).expect("open seg");
        match &damage {
            Damage::FlipBit { rel, bit } => {
                let at = lo + rel % span - base;
                let mut b = [0u8; 1];
                f.read_exact_at(&mut b, at).expect("read");
                b[0] ^= 1 << bit;
                f.write_all_at(&b, at).expect("write");
            }
            Damage::TruncateFile { keep_rel } => {
                f.set_len(lo + keep_rel % span - base).expect("set_len");
            }
            Damage::Garbage { rel, len, seed } => {
                let at = lo + rel % span - base;
                let g: Vec<u8> = (0..*len).map(|i| (i as u8).wrapping_mul(151).wrapping_add(*seed) | 1).collect();
                f.write_all_at(&g[..g.len().min((SEG - at) as usize)], at).expect("write");
            }
            Damage::ZeroFill { rel } => {
                let at = lo + rel % span - base;
                f.write_all_at(&vec![0u8; (SEG - at) as usize], at).expect("write");
            }
        }
        drop(f);
        // The first byte that really changed (garbage may repeat a byte by chance).
        let mut after = fs::read(&path).expect("read seg");
        after.resize(before.len(), 0);
        let Some(pos) = before.iter().zip(&after).position(|(a, b)| a != b) else {
            return Ok(()); // the damage rewrote identical bytes: nothing to detect
        };
        let first_bad = base + pos as u64;
        let last_seg = base;
        // The checkpoint may say everything is flushed; recovery must still validate the tail.
        let (store, report) = Store::open(cfg(root)).expect("reopen");
        let intact: Vec<(u64, u32)> = placed.iter().copied().filter(|&(o, s)| o + s as u64 <= first_bad).collect();
        let damaged_start = placed.iter().find(|&&(o, s)| o + s as u64 > first_bad).map(|&(o, _)| o);
        // Every byte of a record is covered by the whole-record CRC, so the end is exactly the
        // start of the first damaged record.
        let end = store.max_offset();
        match damaged_start {
            Some(ds) => prop_assert_eq!(end, ds, "damaged record at {} not cut", ds),
            None => prop_assert_eq!(end, max),
        }
        assert_readable(&store, &intact);
        for &(o, _) in &placed {
            if o >= end {
                prop_assert!(store.read_record(o).is_err());
            } else {
                // Anything still below the end must decode cleanly or be reported as corrupt.
                if let Ok(r) = store.read_record(o) {
                    prop_assert!(matches!(decode_record(r.as_slice()), Ok(Decoded::Record(_))));
                }
            }
        }
        if end < max && !matches!(damage, Damage::TruncateFile { .. } | Damage::ZeroFill { .. }) {
            // Non-zero bad bytes were cut: the report says where and why.
            prop_assert_eq!(report.commitlog.cut_offset, Some(end));
            prop_assert!(report.commitlog.cut_reason.is_some());
            prop_assert!(report.commitlog.cut_bytes > 0);
        }
        // Nothing past the end survives on disk.
        let now = fs::read(&path).unwrap_or_default();
        prop_assert!(now.iter().skip((end.max(last_seg) - last_seg) as usize).all(|&b| b == 0));
        // A new append after recovery survives another reopen.
        let p = store.append_batch(&[msg(b"T", 0, b"after")]).expect("append");
        prop_assert_eq!(p[0].physical_offset, end);
        store.close().expect("close");
        drop(store);
        let (store, _) = Store::open(cfg(root)).expect("reopen 2");
        prop_assert!(store.read_record(end).is_ok());
        prop_assert_eq!(store.max_offset(), end + p[0].size as u64);
    }
}

/// RocketMQ #10666: truncation must be durable before it returns, so a crash right after it
/// (here: the checkpoint from before the truncation is put back, as if the process died before
/// rewriting it) cannot bring the cut records back.
#[test]
fn crash_after_truncate_does_not_resurrect_records() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    let (store, _) = Store::open(cfg(root)).expect("open");
    let placed = fill(&store, 200, |i| 300 + i % 700);
    store.flush().expect("flush");
    store.checkpoint().expect("checkpoint");
    let stale_ckpt = fs::read(root.join("checkpoint")).expect("read ckpt");
    let cut = placed[57].0;
    store.truncate_to(cut).expect("truncate");
    assert_eq!(store.max_offset(), cut);
    // Simulate the crash: no close, and the pre-truncation checkpoint back on disk.
    store.abandon();
    fs::write(root.join("checkpoint"), &stale_ckpt).expect("restore ckpt");
    let (store, _) = Store::open(cfg(root)).expect("reopen");
    assert_eq!(store.max_offset(), cut, "cut records came back");
    assert_readable(&store, &placed[..57]);
    for &(o, _) in &placed[57..] {
        assert!(store.read_record(o).is_err());
    }
    // Consume queues were cut too: every queue's units point below the cut.
    for (topic, qid) in store.queues().expect("queues") {
        let max = store.queue_max_offset(&topic, qid).expect("max");
        if max > 0 {
            let (phys, _, _) = {
                let u = store.queue_unit(&topic, qid, max - 1).expect("unit");
                (u.phys_offset, u.size, u.tag_code)
            };
            assert!(phys < cut);
        }
    }
    // New writes land at the cut and survive; the old records never reappear.
    let p = store
        .append_batch(&[msg(b"T", 0, b"new-1"), msg(b"T", 0, b"new-2")])
        .expect("append");
    assert_eq!(p[0].physical_offset, cut);
    drop(store);
    let (store, _) = Store::open(cfg(root)).expect("reopen 2");
    assert_eq!(store.max_offset(), p[1].physical_offset + p[1].size as u64);
    let r = store.read_record(p[1].physical_offset).expect("new record");
    match decode_record(r.as_slice()) {
        Ok(Decoded::Record(v)) => assert_eq!(v.body, b"new-2"),
        other => panic!("unexpected {other:?}"),
    }
}

/// After a cut in the middle of a torn tail (past the durable point: the last checkpoint was
/// written after record 20), valid records that followed the bad one must be wiped: otherwise
/// a shorter new append could line up with them and resurrect them.
#[test]
fn recovery_wipes_valid_records_after_a_corrupt_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    let mut placed;
    {
        let (store, _) = Store::open(cfg(root)).expect("open");
        placed = fill(&store, 20, |_| 100);
        store.flush().expect("flush");
        store.checkpoint().expect("checkpoint");
        let stale = fs::read(root.join("checkpoint")).expect("read");
        placed.extend(fill(&store, 20, |_| 100));
        store.close().expect("close");
        fs::write(root.join("checkpoint"), stale).expect("restore");
    }
    // Corrupt record 30's body.
    let (off, _) = placed[30];
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(seg_path(root, off - off % SEG))
        .expect("open");
    f.write_all_at(&[0xFF], off % SEG + 90).expect("write");
    let (store, report) = Store::open(cfg(root)).expect("reopen");
    assert_eq!(store.max_offset(), off);
    assert_eq!(report.commitlog.cut_offset, Some(off));
    assert!(report
        .commitlog
        .cut_reason
        .as_deref()
        .unwrap_or("")
        .contains("CRC"));
    // Bytes after the cut are zero on disk.
    let data = fs::read(seg_path(root, off - off % SEG)).expect("read");
    assert!(data[(off % SEG) as usize..].iter().all(|&b| b == 0));
    drop(store);
}

/// Bytes copied with read_range into another store through append_raw give an identical log,
/// including end-of-segment fillers, queue offsets and consume queues (the slave's path).
#[test]
fn append_raw_replicates_a_log_exactly() {
    let a_dir = tempfile::tempdir().expect("tempdir");
    let b_dir = tempfile::tempdir().expect("tempdir");
    let (a, _) = Store::open(cfg(a_dir.path())).expect("open a");
    let mut b_cfg = cfg(b_dir.path());
    b_cfg.confirm_follows_max = false;
    let (b, _) = Store::open(b_cfg).expect("open b");
    let placed = fill(&a, 300, |i| 50 + (i * 37) % 900);
    let mut off = 0;
    while off < a.max_offset() {
        let chunk = a.read_range(off, 4096, u64::MAX).expect("read range");
        assert!(!chunk.is_empty());
        // Never crosses a segment.
        assert_eq!(chunk.offset / SEG, (chunk.end_offset() - 1) / SEG);
        b.append_raw(off, chunk.as_slice()).expect("append raw");
        off = chunk.end_offset();
    }
    assert_eq!(b.max_offset(), a.max_offset());
    // Nothing visible on b until the confirm offset moves.
    assert_eq!(b.queue_max_offset("T", 0).expect("max"), 0);
    b.set_confirm_offset(a.max_offset()).expect("confirm");
    for qid in 0..3 {
        assert_eq!(
            b.queue_max_offset("T", qid).expect("b"),
            a.queue_max_offset("T", qid).expect("a")
        );
    }
    for &(o, _) in &placed {
        assert_eq!(
            a.read_record(o).expect("a").as_slice(),
            b.read_record(o).expect("b").as_slice()
        );
    }
    // A wrong offset or a torn chunk is refused without writing anything.
    let before = b.max_offset();
    let err = b.append_raw(before + 1, b"xx").expect_err("wrong offset");
    assert!(matches!(err, StoreError::OffsetOutOfRange { .. }));
    let p = a
        .append_batch(&[msg(b"T", 1, &[7u8; 500])])
        .expect("append");
    let rec = a.read_record(p[0].physical_offset).expect("read");
    let torn = &rec.as_slice()[..rec.len() - 3];
    assert!(b.append_raw(before, torn).is_err());
    assert_eq!(b.max_offset(), before);
}

/// Group commit: waiters are served by the flush thread long before the interval.
#[test]
fn wait_flushed_is_served_by_a_requested_flush() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut c = cfg(dir.path());
    c.flush_interval_ms = 60_000;
    let (store, _) = Store::open(c).expect("open");
    fill(&store, 10, |_| 100);
    let target = store.max_offset();
    assert!(store.flushed_offset() < target);
    let start = std::time::Instant::now();
    let flushed = store
        .wait_flushed(target, Duration::from_secs(10))
        .expect("wait");
    assert!(flushed >= target);
    assert!(start.elapsed() < Duration::from_secs(5));
}

/// Reading past the end is a clear error, and a record is never read from a filler.
#[test]
fn reads_out_of_range_are_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, _) = Store::open(cfg(dir.path())).expect("open");
    let placed = fill(&store, 3, |_| 10);
    let end = store.max_offset();
    assert!(matches!(
        store.read_record(end),
        Err(StoreError::OffsetOutOfRange { .. })
    ));
    assert!(matches!(
        store.read_record(placed[1].0 + 1),
        Err(StoreError::CorruptRecord { .. })
    ));
    assert!(store
        .read_range(end, 100, u64::MAX)
        .expect("empty")
        .is_empty());
}

/// A truncation point inside a record is refused (it would leave a torn record).
#[test]
fn truncate_inside_a_record_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, _) = Store::open(cfg(dir.path())).expect("open");
    let placed = fill(&store, 5, |_| 100);
    assert!(store.truncate_to(placed[2].0 + 7).is_err());
    assert_eq!(store.max_offset(), placed[4].0 + placed[4].1 as u64);
}

fn queue_range(s: &Store, topic: &str, qid: i32) -> (u64, u64) {
    (
        s.queue_min_offset(topic, qid).expect("min"),
        s.queue_max_offset(topic, qid).expect("max"),
    )
}

/// A deleted topic's queues hold nothing afterwards, on the store that deleted it, after a
/// reopen, after a rebuild of its consume queues from the commitlog (manifest and queue
/// directory both gone), and on a replica fed through append_raw; a topic created again under
/// the same name goes on from the old max offset and serves only its new messages; other
/// topics are untouched.
#[test]
fn a_deleted_topic_stays_deleted_and_a_new_one_starts_empty() {
    let a_dir = tempfile::tempdir().expect("tempdir");
    let b_dir = tempfile::tempdir().expect("tempdir");
    let root = a_dir.path();
    let (a, _) = Store::open(cfg(root)).expect("open");
    let mut b_cfg = cfg(b_dir.path());
    b_cfg.confirm_follows_max = false;
    let (b, _) = Store::open(b_cfg.clone()).expect("open b");
    fill(&a, 30, |i| 100 + i); // T, queues 0..2, 10 each
    a.append_batch(&[msg(b"U", 0, b"keep")]).expect("append U");
    assert_eq!(queue_range(&a, "T", 1), (0, 10));
    let marker = a.delete_topic("T").expect("delete");
    for qid in 0..3 {
        assert_eq!(queue_range(&a, "T", qid), (10, 10), "queue {qid}");
    }
    assert_eq!(queue_range(&a, "U", 0), (0, 1));
    assert_eq!(a.queues().expect("queues"), vec![("U".to_string(), 0)]);
    // producers cannot write the marker topic
    let e = a
        .append_batch(&[msg(b"rmq_sys_TOPIC_DELETED", 0, b"U")])
        .expect_err("reserved");
    assert!(matches!(e, StoreError::MessageIllegal(_)));
    // the topic again: new messages only, offsets go on
    a.append_batch(&[msg(b"T", 1, b"new")]).expect("append");
    assert_eq!(queue_range(&a, "T", 1), (10, 11));
    assert!(matches!(
        a.read_queue("T", 1, 0, 32, 1 << 20, None),
        Err(StoreError::OffsetOutOfRange { min: 10, .. })
    ));
    let got = a.read_queue("T", 1, 10, 32, 1 << 20, None).expect("read");
    assert_eq!(got.records.len(), 1);

    // a replica: nothing hidden before the confirm offset passes the marker, then the same
    let mut off = 0;
    while off < a.max_offset() {
        let chunk = a.read_range(off, 4096, u64::MAX).expect("read range");
        b.append_raw(off, chunk.as_slice()).expect("append raw");
        off = chunk.end_offset();
    }
    b.set_confirm_offset(marker).expect("confirm to the marker");
    assert_eq!(queue_range(&b, "T", 1), (0, 10));
    b.set_confirm_offset(a.max_offset()).expect("confirm all");
    for qid in [0, 2] {
        assert_eq!(queue_range(&b, "T", qid), (10, 10), "replica queue {qid}");
    }
    assert_eq!(queue_range(&b, "T", 1), (10, 11));
    drop(b);
    let (b, _) = Store::open(b_cfg).expect("reopen b");
    assert_eq!(queue_range(&b, "T", 0), (10, 10));
    assert_eq!(queue_range(&b, "T", 1), (10, 11));
    drop(b);

    // reopen: still deleted
    drop(a);
    let (a, _) = Store::open(cfg(root)).expect("reopen");
    assert_eq!(queue_range(&a, "T", 0), (10, 10));
    assert_eq!(queue_range(&a, "T", 1), (10, 11));
    assert_eq!(queue_range(&a, "U", 0), (0, 1));
    drop(a);

    // every consume queue and the manifest gone: rebuilt from the log, the marker included
    fs::remove_dir_all(root.join("consumequeue")).expect("rm cq");
    fs::remove_file(root.join("cqmanifest")).expect("rm manifest");
    fs::remove_file(root.join("checkpoint")).expect("rm checkpoint");
    let (a, _) = Store::open(cfg(root)).expect("reopen after loss");
    assert_eq!(queue_range(&a, "T", 0), (10, 10));
    assert_eq!(queue_range(&a, "T", 1), (10, 11));
    assert_eq!(queue_range(&a, "U", 0), (0, 1));
    assert!(matches!(
        a.read_queue("T", 1, 0, 32, 1 << 20, None),
        Err(StoreError::OffsetOutOfRange { min: 10, .. })
    ));
    let got = a.read_queue("T", 1, 10, 32, 1 << 20, None).expect("read");
    assert_eq!(got.records.len(), 1);
    // one queue directory gone, manifest kept: rebuilt, still deleted below the floor
    drop(a);
    fs::remove_dir_all(root.join("consumequeue").join("T").join("1")).expect("rm q1");
    let (a, _) = Store::open(cfg(root)).expect("reopen after one queue lost");
    assert_eq!(queue_range(&a, "T", 0), (10, 10));
    assert_eq!(queue_range(&a, "T", 1), (10, 11));
    assert!(a.delete_topic("rmq_sys_TOPIC_DELETED").is_err());
    assert!(a.delete_topic("bad topic").is_err());
    // deleted a second time: the floor moves up to the new marker, and stays there
    a.append_batch(&[msg(b"T", 1, b"newer")]).expect("append");
    a.delete_topic("T").expect("delete again");
    assert_eq!(queue_range(&a, "T", 1), (12, 12));
    drop(a);
    let (a, _) = Store::open(cfg(root)).expect("reopen after the second deletion");
    assert_eq!(queue_range(&a, "T", 1), (12, 12));
    assert_eq!(a.queues().expect("queues"), vec![("U".to_string(), 0)]);
}

/// A deleted topic's emptied queues are retired at the next checkpoint: closed (no file
/// descriptor held) and their files deleted, once the manifest that keeps the offset each
/// goes on from is durable. The topic written again goes on from there, across reopens and
/// truncations; a directory left by a crash before the deletion is opened as a live queue.
#[test]
fn a_deleted_topics_empty_queues_are_retired_and_their_offsets_kept() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    let (a, _) = Store::open(cfg(root)).expect("open");
    fill(&a, 30, |i| 100 + i); // T, queues 0..2, 10 each
    a.append_batch(&[msg(b"U", 0, b"keep")]).expect("append U");
    a.delete_topic("T").expect("delete");
    a.checkpoint().expect("checkpoint");
    assert!(
        !root.join("consumequeue").join("T").exists(),
        "T's files are gone"
    );
    assert!(root.join("consumequeue").join("U").join("0").exists());
    assert_eq!(a.stats().expect("stats").0.cq_queues_retired, 3);
    for qid in 0..3 {
        assert_eq!(queue_range(&a, "T", qid), (10, 10), "retired queue {qid}");
    }
    assert_eq!(a.queues().expect("queues"), vec![("U".to_string(), 0)]);
    // the topic again: its queue comes back at the offset it had
    let placed = a.append_batch(&[msg(b"T", 1, b"again")]).expect("append");
    let start = placed[0].physical_offset;
    assert_eq!(queue_range(&a, "T", 1), (10, 11));
    let got = a.read_queue("T", 1, 10, 32, 1 << 20, None).expect("read");
    assert_eq!(got.records.len(), 1);
    a.checkpoint().expect("checkpoint");
    assert!(root.join("consumequeue").join("T").join("1").exists());
    drop(a);
    let (a, _) = Store::open(cfg(root)).expect("reopen");
    assert_eq!(queue_range(&a, "T", 0), (10, 10));
    assert_eq!(queue_range(&a, "T", 1), (10, 11));
    // truncated back before the new message: the queue is empty again, offsets kept
    a.truncate_to(start).expect("truncate");
    a.append_batch(&[msg(b"T", 2, b"later")]).expect("append");
    assert_eq!(queue_range(&a, "T", 2), (10, 11));
    drop(a);
    // a crash between the manifest and the deletion: the directory is there again, empty
    let (a, _) = Store::open(cfg(root)).expect("reopen");
    a.delete_topic("T").expect("delete again");
    a.checkpoint().expect("checkpoint");
    drop(a);
    fs::create_dir_all(root.join("consumequeue").join("T").join("0")).expect("mkdir");
    let (a, report) = Store::open(cfg(root)).expect("reopen with a stale directory");
    assert!(report.cq_rebuilt.is_empty(), "{:?}", report.cq_rebuilt);
    assert_eq!(queue_range(&a, "T", 0), (10, 10));
    a.append_batch(&[msg(b"T", 0, b"back")]).expect("append");
    assert_eq!(queue_range(&a, "T", 0), (10, 11));
}

/// A store directory is opened by one store at a time (`<root>/lock`); closing releases it.
#[test]
fn a_second_store_on_the_same_directory_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (a, _) = Store::open(cfg(dir.path())).expect("open");
    a.append_batch(&[msg(b"T", 0, b"x")]).expect("append");
    let e = Store::open(cfg(dir.path()))
        .err()
        .expect("second open refused");
    assert!(
        e.to_string().contains("already open"),
        "unexpected error: {e}"
    );
    // the first one is untouched and goes on
    a.append_batch(&[msg(b"T", 0, b"y")]).expect("append");
    a.close().expect("close");
    let (b, _) = Store::open(cfg(dir.path())).expect("open after close");
    assert_eq!(b.queue_max_offset("T", 0).expect("max"), 2);
}

/// A commitlog segment missing between others is refused at open, naming it, and nothing is
/// deleted: the segments after the gap keep their (possibly acknowledged) records. With the
/// file back, the store opens with every record.
#[test]
fn a_missing_middle_segment_is_refused_and_nothing_is_deleted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    let (store, _) = Store::open(cfg(root)).expect("open");
    let placed = fill(&store, 300, |_| 700);
    assert!(store.max_offset() > 3 * SEG);
    drop(store);
    let hole = seg_path(root, SEG);
    let kept = root.join("kept-aside");
    fs::rename(&hole, &kept).expect("move segment away");
    let before: Vec<_> = fs::read_dir(root.join("commitlog"))
        .expect("ls")
        .map(|e| e.expect("entry").file_name())
        .collect();
    let e = Store::open(cfg(root)).err().expect("refused");
    let text = e.to_string();
    assert!(text.contains("segment missing"), "{text}");
    assert!(text.contains(&format!("{:020}", SEG)), "{text}");
    let after: Vec<_> = fs::read_dir(root.join("commitlog"))
        .expect("ls")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(before.len(), after.len(), "a segment was deleted");
    fs::rename(&kept, &hole).expect("put it back");
    let (store, _) = Store::open(cfg(root)).expect("reopen");
    assert_readable(&store, &placed);
}

/// The first file of a two-file consume queue deleted while the commitlog still starts at 0:
/// the queue is rebuilt from the log (it used to start silently at the second file's first
/// unit, its first messages unreachable for good).
#[test]
fn a_consume_queue_missing_its_first_file_is_rebuilt() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    let (store, _) = Store::open(cfg(root)).expect("open");
    for i in 0..100u32 {
        store
            .append_batch(&[msg(b"Q", 0, &i.to_be_bytes())])
            .expect("append");
    }
    drop(store);
    let qdir = root.join("consumequeue").join("Q").join("0");
    fs::remove_file(qdir.join(format!("{:020}", 0))).expect("rm first cq file");
    let (store, report) = Store::open(cfg(root)).expect("reopen");
    assert!(
        report
            .cq_rebuilt
            .iter()
            .any(|(t, q, why)| t == "Q" && *q == 0 && why.contains("first files")),
        "{:?}",
        report.cq_rebuilt
    );
    assert_eq!(queue_range(&store, "Q", 0), (0, 100));
    let got = store.read_queue("Q", 0, 0, 1, 1 << 20, None).expect("read");
    assert_eq!(got.records.len(), 1);
}

/// A queue rebuilt from a log that lost its unflushed tail (the manifest counted more units
/// than the log still holds): appends to it go on after its last rebuilt unit. They used to fail
/// for good with OffsetOutOfRange (the next offset was raised past the queue's end).
#[test]
fn a_rebuilt_queue_whose_tail_is_gone_from_the_log_takes_appends() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    let (store, _) = Store::open(cfg(root)).expect("open");
    let placed = fill(&store, 30, |i| 100 + i);
    drop(store);
    // the log loses its last 6 records (never flushed), and queue T/0's directory is gone
    let f = OpenOptions::new()
        .write(true)
        .open(seg_path(root, 0))
        .expect("seg");
    f.write_all_at(&[0u8; 4096], placed[24].0).expect("zero");
    drop(f);
    fs::remove_dir_all(root.join("consumequeue").join("T").join("0")).expect("rm");
    let (store, report) = Store::open(cfg(root)).expect("reopen");
    let (_, _, why) = report
        .cq_rebuilt
        .iter()
        .find(|(t, q, _)| t == "T" && *q == 0)
        .expect("rebuilt");
    assert!(why.contains("given out again"), "{why}");
    assert_eq!(queue_range(&store, "T", 0), (0, 8));
    let p = store.append_batch(&[msg(b"T", 0, b"x")]).expect("append");
    assert_eq!(p[0].queue_offset, 8);
    // and it survives a reopen
    drop(store);
    let (store, _) = Store::open(cfg(root)).expect("reopen");
    assert_eq!(queue_range(&store, "T", 0), (0, 9));
}

/// The last unit of a consume queue damaged to point past the log end: the queue is rebuilt
/// (the manifest says the unit was durable), so its record stays readable and its queue offset
/// is not handed out again. It used to be cut as "past the dispatch point".
#[test]
fn a_last_unit_pointing_past_the_log_end_is_rebuilt_not_cut() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    let (store, _) = Store::open(cfg(root)).expect("open");
    let placed = fill(&store, 30, |i| 100 + i);
    assert_eq!(store.queue_max_offset("T", 0).expect("max"), 10);
    drop(store);
    let cq = root
        .join("consumequeue")
        .join("T")
        .join("0")
        .join(format!("{:020}", 0));
    let f = OpenOptions::new().write(true).open(&cq).expect("open cq");
    f.write_all_at(&(1u64 << 40).to_be_bytes(), 9 * 20)
        .expect("damage unit 9");
    drop(f);
    let (store, report) = Store::open(cfg(root)).expect("reopen");
    assert!(
        report
            .cq_rebuilt
            .iter()
            .any(|(t, q, _)| t == "T" && *q == 0),
        "{:?}",
        report.cq_rebuilt
    );
    assert_eq!(queue_range(&store, "T", 0), (0, 10));
    let got = store.read_queue("T", 0, 9, 1, 1 << 20, None).expect("read");
    assert_eq!(
        got.records[0].as_slice(),
        store.read_record(placed[27].0).expect("rec").as_slice()
    );
    let p = store
        .append_batch(&[msg(b"T", 0, b"next")])
        .expect("append");
    assert_eq!(p[0].queue_offset, 10);
}

/// `start_at` writes the new min offset to the checkpoint before it moves the files, so a
/// crash in between leaves a checkpoint ahead of an old, empty head: that store opens (only a
/// head *behind* the checkpoint's min is a lost segment). After the move it opens at the new
/// offset.
#[test]
fn a_crash_inside_start_at_leaves_a_store_that_opens() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    let (store, _) = Store::open(cfg(root)).expect("open");
    let old_head: Vec<_> = fs::read_dir(root.join("commitlog"))
        .expect("ls")
        .map(|e| e.expect("entry").path())
        .collect();
    let old_bytes: Vec<_> = old_head
        .iter()
        .map(|p| fs::read(p).expect("read"))
        .collect();
    store.start_at(3 * SEG).expect("start_at");
    store.close().expect("close");
    // the crash window: the checkpoint already says 3 * SEG, the files are the old ones
    for p in fs::read_dir(root.join("commitlog")).expect("ls") {
        fs::remove_file(p.expect("entry").path()).expect("rm");
    }
    for (p, b) in old_head.iter().zip(&old_bytes) {
        fs::write(p, b).expect("restore");
    }
    let (store, _) = Store::open(cfg(root)).expect("opens after a crash inside start_at");
    assert_eq!(store.max_offset(), store.min_offset());
    store.start_at(3 * SEG).expect("start_at again");
    store.close().expect("close");
    let (store, _) = Store::open(cfg(root)).expect("open");
    assert_eq!((store.min_offset(), store.max_offset()), (3 * SEG, 3 * SEG));
}
