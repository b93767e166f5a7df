//! Issue 15, storage half: damage below the durable point is quarantined (records around it
//! stay readable, queue offsets never move), reads skip quarantined records and say so, a
//! repair with good bytes makes a record readable again, consume queues are rebuilt from the
//! commitlog, retention follows RocketMQ's rules, and an empty store can start at a segment
//! boundary (syncFromLastFile).

use std::collections::BTreeMap;
use std::fs::{self, OpenOptions};
use std::net::SocketAddr;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use proptest::prelude::*;
use rmq_store::quarantine::QuarantineLoad;
use rmq_store::store::{OpenReport, Store, StoreConfig};
use rmq_store::StoreError;
use rmq_wire::message::{decode_record, Decoded, MessageIn};

const SEG: u64 = 64 * 1024;
const TOPIC: &str = "Dmg";

fn cfg(root: &Path, seg: u64) -> StoreConfig {
    let mut c = StoreConfig::new(root);
    c.segment_size = seg;
    c.cq_units_per_file = 64;
    c.flush_interval_ms = 20;
    c
}

fn open(root: &Path, seg: u64) -> (Store, OpenReport) {
    Store::open(cfg(root, seg)).expect("open")
}

fn msg(qid: i32, body: &[u8]) -> MessageIn<'_> {
    MessageIn {
        topic: TOPIC.as_bytes(),
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

/// One record as written: where, how big, which queue position, and its bytes.
#[derive(Debug, Clone)]
struct Rec {
    offset: u64,
    size: u64,
    qid: i32,
    qo: u64,
    raw: Vec<u8>,
}

impl Rec {
    fn end(&self) -> u64 {
        self.offset + self.size
    }
}

/// Appends `n` messages to 4 queues (record i has a body of `len(i)` bytes).
fn fill(store: &Store, n: usize, len: impl Fn(usize) -> usize) -> Vec<Rec> {
    let mut out = Vec::new();
    for i in 0..n {
        let body: Vec<u8> = (0..len(i)).map(|j| (i * 7 + j) as u8).collect();
        let qid = (i % 4) as i32;
        let p = store.append_batch(&[msg(qid, &body)]).expect("append");
        let raw = store
            .read_record(p[0].physical_offset)
            .expect("read")
            .as_slice()
            .to_vec();
        out.push(Rec {
            offset: p[0].physical_offset,
            size: u64::from(p[0].size),
            qid,
            qo: p[0].queue_offset as u64,
            raw,
        });
    }
    out
}

fn seg_path(root: &Path, seg: u64, offset: u64) -> PathBuf {
    root.join("commitlog")
        .join(format!("{:020}", offset - offset % seg))
}

fn write_at(root: &Path, seg: u64, offset: u64, data: &[u8]) {
    let f = OpenOptions::new()
        .write(true)
        .open(seg_path(root, seg, offset))
        .expect("open segment");
    f.write_all_at(data, offset % seg).expect("write");
    f.sync_all().expect("sync");
}

fn flip(root: &Path, seg: u64, offset: u64, n: usize) {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(seg_path(root, seg, offset))
        .expect("open segment");
    let mut b = vec![0u8; n];
    f.read_exact_at(&mut b, offset % seg).expect("read");
    for x in &mut b {
        *x ^= 0xA5;
    }
    f.write_all_at(&b, offset % seg).expect("write");
    f.sync_all().expect("sync");
}

/// Every queue read from its min offset with `read_queue`: (served raw records by queue
/// offset, skipped queue offsets).
/// Served raw records by (queue id, queue offset).
type Served = BTreeMap<(i32, u64), Vec<u8>>;

fn read_all(store: &Store) -> (Served, Vec<(i32, u64)>) {
    let mut got = BTreeMap::new();
    let mut skipped = Vec::new();
    for qid in 0..4 {
        let mut off = store.queue_min_offset(TOPIC, qid).expect("min");
        let max = store.queue_max_offset(TOPIC, qid).expect("max");
        while off < max {
            let r = store
                .read_queue(TOPIC, qid, off, 7, 1 << 20, None)
                .expect("read_queue");
            let mut qo = off;
            let mut recs = r.records.iter();
            let skipped_here: Vec<u64> = r.skipped.iter().map(|k| k.queue_offset).collect();
            while qo < r.next_offset {
                if skipped_here.contains(&qo) {
                    skipped.push((qid, qo));
                } else {
                    let b = recs.next().expect("a record for every unskipped offset");
                    got.insert((qid, qo), b.as_slice().to_vec());
                }
                qo += 1;
            }
            assert!(recs.next().is_none());
            assert!(r.next_offset > off, "read_queue made progress");
            off = r.next_offset;
        }
    }
    (got, skipped)
}

fn queue_maxes(store: &Store) -> Vec<(u64, u64, i64)> {
    (0..4)
        .map(|q| {
            (
                store.queue_min_offset(TOPIC, q).expect("min"),
                store.queue_max_offset(TOPIC, q).expect("max"),
                store.next_queue_offset(TOPIC, q).expect("next"),
            )
        })
        .collect()
}

/// Issue 15 table, row 1: 4 bytes flipped in one body in the middle of the (only) segment of a
/// cleanly closed store. Before: the 9,999 records after it were zeroed. Now: the bad record is
/// quarantined (with its queue position), every other record stays readable and indexed, and
/// queue offsets never move.
#[test]
fn flipped_body_below_the_durable_point_is_quarantined_and_every_other_record_stays() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    let seg = 1 << 20;
    let (store, _) = open(root, seg);
    let recs = fill(&store, 2000, |i| 150 + i % 100);
    let maxes = queue_maxes(&store);
    let end = store.max_offset();
    store.close().expect("close");
    drop(store);
    let bad = &recs[1000];
    flip(root, seg, bad.offset + bad.size / 2, 4);

    let (store, report) = open(root, seg);
    assert_eq!(store.max_offset(), end, "nothing was cut");
    assert_eq!(report.commitlog.cut_offset, None);
    assert_eq!(report.commitlog.durable_offset, end);
    assert_eq!(report.quarantined.len(), 1);
    let q = &report.quarantined[0];
    assert_eq!((q.offset, q.size), (bad.offset, bad.size));
    let named = q
        .record
        .as_ref()
        .expect("the consume queue named the record");
    assert_eq!(
        (named.topic.as_str(), named.queue_id, named.queue_offset),
        (TOPIC, bad.qid, bad.qo)
    );
    assert!(q.reason.contains("CRC"), "{}", q.reason);
    assert_eq!(queue_maxes(&store), maxes, "queue offsets did not move");
    let (got, skipped) = read_all(&store);
    assert_eq!(skipped, vec![(bad.qid, bad.qo)]);
    for r in &recs {
        if r.offset == bad.offset {
            assert!(!got.contains_key(&(r.qid, r.qo)));
            assert!(matches!(
                store.read_record(r.offset),
                Err(StoreError::Quarantined { .. })
            ));
        } else {
            assert_eq!(got.get(&(r.qid, r.qo)), Some(&r.raw));
        }
    }
    // New sends continue at the right queue offsets.
    let p = store
        .append_batch(&[msg(bad.qid, b"after")])
        .expect("append");
    assert_eq!(p[0].queue_offset, maxes[bad.qid as usize].1 as i64);
    let (stats, n, bytes) = store.stats().expect("stats");
    assert_eq!((n, bytes), (1, bad.size));
    assert_eq!(stats.skipped_reads, 1);
    store.close().expect("close");
    drop(store);
    // The quarantine persists: a reopen does not re-report it as new.
    let (store, report) = open(root, seg);
    assert_eq!(report.quarantine_load, QuarantineLoad::Main);
    assert!(report.quarantined.is_empty());
    assert_eq!(store.quarantined().expect("list").len(), 1);
    assert_eq!(store.max_offset(), end + p[0].size as u64);
}

/// Issue 15 table, row 3: one body flipped in an old segment (recovery does not validate it):
/// a read finds it, quarantines it and skips it, naming the skipped queue offset; the records
/// around it are served; `get_messages` serves up to it and then fails on it.
#[test]
fn flipped_body_in_an_old_segment_is_found_on_read_and_read_around() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    let (store, _) = open(root, SEG);
    let recs = fill(&store, 600, |i| 200 + (i * 13) % 300);
    store.close().expect("close");
    drop(store);
    let bad = recs
        .iter()
        .find(|r| r.offset > SEG + 1000 && r.end() < 2 * SEG)
        .expect("a record in segment 1")
        .clone();
    flip(root, SEG, bad.offset + bad.size - 40, 4);
    let (store, report) = open(root, SEG);
    assert!(report.quarantined.is_empty(), "recovery did not look there");
    // get_messages from just before: the records before it, then an error at it.
    let before = bad.qo.saturating_sub(2);
    let r = store
        .get_messages(TOPIC, bad.qid, before, 32, 1 << 20, None)
        .expect("get");
    assert_eq!(r.records.len() as u64, bad.qo - before);
    assert_eq!(r.next_offset, bad.qo);
    let Err(err) = store.get_messages(TOPIC, bad.qid, bad.qo, 32, 1 << 20, None) else {
        panic!("the bad record is never served");
    };
    assert!(matches!(err, StoreError::Quarantined { offset, .. } if offset == bad.offset));
    // read_queue reads around it and says what it skipped.
    let r = store
        .read_queue(TOPIC, bad.qid, before, 32, 1 << 20, None)
        .expect("read");
    assert_eq!(r.skipped.len(), 1);
    assert_eq!(r.skipped[0].queue_offset, bad.qo);
    assert_eq!(
        (r.skipped[0].phys_offset, r.skipped[0].size),
        (bad.offset, bad.size)
    );
    assert_eq!(
        r.records.len(),
        32,
        "skipped units do not count against max_count"
    );
    let listed = store.quarantined().expect("list");
    assert_eq!(listed.len(), 1);
    assert_eq!(
        listed[0].record.as_ref().map(|x| x.queue_offset),
        Some(bad.qo)
    );
    let (got, skipped) = read_all(&store);
    assert_eq!(skipped, vec![(bad.qid, bad.qo)]);
    assert_eq!(got.len(), recs.len() - 1);
    let (stats, _, _) = store.stats().expect("stats");
    assert_eq!(stats.quarantined_at_runtime, 1);
}

/// A damaged header (TOTALSIZE destroyed) in an old segment: the read cannot trust the bytes'
/// own size, so the segment is validated from its start to find the exact damaged range.
#[test]
fn damaged_header_in_an_old_segment_is_resynchronised_exactly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    let (store, _) = open(root, SEG);
    let recs = fill(&store, 600, |i| 200 + (i * 13) % 300);
    store.close().expect("close");
    drop(store);
    let i = recs
        .iter()
        .position(|r| r.offset > SEG + 1000 && r.end() < 2 * SEG)
        .expect("a record in segment 1");
    // Two neighbours: the first loses its size and magic, the second a body byte.
    write_at(root, SEG, recs[i].offset, &[0xFF; 8]);
    flip(root, SEG, recs[i + 1].offset + 60, 1);
    let (store, _) = open(root, SEG);
    let (got, mut skipped) = read_all(&store);
    skipped.sort_unstable();
    let mut want = vec![(recs[i].qid, recs[i].qo), (recs[i + 1].qid, recs[i + 1].qo)];
    want.sort_unstable();
    assert_eq!(skipped, want);
    assert_eq!(got.len(), recs.len() - 2);
    let ranges: Vec<(u64, u64)> = store
        .quarantined()
        .expect("list")
        .iter()
        .map(|e| (e.offset, e.end()))
        .collect();
    assert_eq!(
        ranges,
        vec![
            (recs[i].offset, recs[i].end()),
            (recs[i + 1].offset, recs[i + 1].end())
        ]
    );
}

/// Issue 15 table, row 4: the end of a cleanly closed log zeroed, or the file cut mid-record,
/// or the checkpoint corrupted: nothing valid follows the damage, so recovery cuts to the last
/// valid record and reports the cut and that durable bytes were lost.
#[test]
fn damaged_end_of_the_log_is_cut_to_the_last_valid_record_with_a_report() {
    for case in ["zero-64k", "truncate-mid-record", "checkpoint"] {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        let seg = 1 << 20;
        let (store, _) = open(root, seg);
        let recs = fill(&store, 1500, |i| 180 + i % 50);
        let end = store.max_offset();
        store.close().expect("close");
        drop(store);
        let survivors: Vec<&Rec> = match case {
            "zero-64k" => {
                write_at(root, seg, end - 65536, &vec![0u8; 65536]);
                recs.iter().filter(|r| r.end() <= end - 65536).collect()
            }
            "truncate-mid-record" => {
                let r = &recs[1200];
                let f = OpenOptions::new()
                    .write(true)
                    .open(seg_path(root, seg, 0))
                    .expect("open");
                f.set_len(r.offset + r.size / 2).expect("set_len");
                recs[..1200].iter().collect()
            }
            _ => {
                let p = root.join("checkpoint");
                let mut b = fs::read(&p).expect("read");
                b[33] ^= 0x40;
                fs::write(&p, b).expect("write");
                recs.iter().collect()
            }
        };
        let (store, report) = open(root, seg);
        let last = survivors.last().expect("survivors").end();
        assert_eq!(store.max_offset(), last, "{case}");
        let c = &report.commitlog;
        if case == "checkpoint" {
            assert!(matches!(
                report.checkpoint,
                rmq_store::checkpoint::CheckpointLoad::Corrupt(_)
            ));
            assert_eq!(c.cut_offset, None);
        } else {
            assert_eq!(c.cut_offset, Some(last), "{case}");
            assert!(c.cut_to.is_some_and(|t| t > last), "{case}");
            assert!(c.cut_bytes > 0, "{case}");
            assert!(c.cut_below_durable, "{case}");
            assert_eq!(c.missing_durable, Some((last, end)), "{case}");
        }
        let (got, skipped) = read_all(&store);
        assert!(skipped.is_empty());
        assert_eq!(got.len(), survivors.len(), "{case}");
        for r in survivors {
            assert_eq!(got.get(&(r.qid, r.qo)), Some(&r.raw));
        }
    }
}

/// Storage probe: a flipped bit in the newest record was cut as a torn tail, and the next
/// append took its queue offset. One whole record ending exactly at the durable point (its
/// header claims that size, its last bytes are there) was fsynced whole: quarantined, its
/// queue offset kept, nothing cut.
#[test]
fn a_flipped_bit_in_the_newest_record_is_quarantined_not_cut() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    let seg = 1 << 20;
    let (store, _) = open(root, seg);
    let recs = fill(&store, 1500, |i| 180 + i % 50);
    let end = store.max_offset();
    store.close().expect("close");
    drop(store);
    let r = recs.last().expect("a record");
    let at = r.offset + 100;
    let old = fs::read(seg_path(root, seg, at)).expect("read")[(at % seg) as usize];
    write_at(root, seg, at, &[old ^ 0x5A]);
    let (store, report) = open(root, seg);
    assert_eq!(store.max_offset(), end);
    let c = &report.commitlog;
    assert_eq!(c.cut_offset, None);
    assert_eq!(c.missing_durable, None);
    let (got, skipped) = read_all(&store);
    assert_eq!(skipped.len(), 1);
    assert_eq!(got.len(), recs.len() - 1);
}

/// A damaged record with no trusted checkpoint (corrupt or deleted): nothing says what was
/// fsynced, yet valid records in later segments follow the damage, so it is not a torn tail.
/// Before: recovery cut the log at the damaged record and deleted every later segment (899 of
/// 1000 records gone). Now: the record is quarantined, the rest stay; a torn tail with nothing
/// valid after it is still cut.
#[test]
fn without_a_trusted_checkpoint_damage_that_valid_records_follow_is_quarantined_not_cut() {
    for case in ["corrupt", "deleted", "torn-tail"] {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        let (store, _) = open(root, SEG);
        let recs = fill(&store, 1000, |i| 200 + i % 90);
        let end = store.max_offset();
        let maxes = queue_maxes(&store);
        store.close().expect("close");
        drop(store);
        assert!(end > 4 * SEG, "several segments");
        let p = root.join("checkpoint");
        if case == "deleted" {
            fs::remove_file(&p).expect("rm checkpoint");
        } else {
            let mut b = fs::read(&p).expect("read");
            b[33] ^= 0x40;
            fs::write(&p, b).expect("write");
        }
        // an old record (first segment) damaged, or the last record torn
        let bad = if case == "torn-tail" {
            recs.last().expect("recs")
        } else {
            &recs[100]
        };
        flip(root, SEG, bad.offset + bad.size / 2, 4);
        let (store, report) = open(root, SEG);
        assert!(!matches!(
            report.checkpoint,
            rmq_store::checkpoint::CheckpointLoad::Loaded
        ));
        let c = &report.commitlog;
        let (got, skipped) = read_all(&store);
        if case == "torn-tail" {
            assert_eq!(store.max_offset(), bad.offset, "the torn tail is cut");
            assert_eq!(c.cut_offset, Some(bad.offset));
            assert!(report.quarantined.is_empty());
            assert_eq!(got.len(), recs.len() - 1);
            continue;
        }
        assert_eq!(c.cut_offset, None, "{case}: nothing cut");
        assert!(c.cut_segments.is_empty(), "{case}");
        assert_eq!(store.max_offset(), end, "{case}");
        assert_eq!(report.quarantined.len(), 1, "{case}");
        assert_eq!(
            (report.quarantined[0].offset, report.quarantined[0].size),
            (bad.offset, bad.size)
        );
        assert_eq!(
            queue_maxes(&store),
            maxes,
            "{case}: queue offsets did not move"
        );
        assert_eq!(skipped, vec![(bad.qid, bad.qo)], "{case}");
        assert_eq!(got.len(), recs.len() - 1, "{case}");
        for r in recs.iter().filter(|r| r.offset != bad.offset) {
            assert_eq!(got.get(&(r.qid, r.qo)), Some(&r.raw), "{case}");
        }
    }
}

/// Issue 15 table, row 2: the consumequeue directory deleted. Before: every queue reported
/// max offset 0 and new sends reused offsets. Now: the queues are rebuilt from the commitlog
/// (from its min offset, after retention deleted the first segments) with identical min and
/// max offsets and contents, and new sends continue at the right offsets.
#[test]
fn deleted_consume_queues_are_rebuilt_with_identical_offsets() {
    for variant in ["all", "one-queue", "truncated-file", "all-without-manifest"] {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        let (store, _) = open(root, SEG);
        let recs = fill(&store, 900, |i| 100 + (i * 31) % 400);
        store.flush().expect("flush");
        store.delete_segments_before(2 * SEG).expect("retention");
        let min = store.min_offset();
        assert_eq!(min, 2 * SEG);
        let before = queue_maxes(&store);
        let (contents, _) = read_all(&store);
        store.close().expect("close");
        drop(store);
        let cq = root.join("consumequeue").join(TOPIC);
        match variant {
            "all" => fs::remove_dir_all(root.join("consumequeue")).expect("rm"),
            "one-queue" => fs::remove_dir_all(cq.join("2")).expect("rm"),
            "truncated-file" => {
                let mut files: Vec<PathBuf> = fs::read_dir(cq.join("1"))
                    .expect("ls")
                    .map(|e| e.expect("entry").path())
                    .collect();
                files.sort();
                let f = OpenOptions::new()
                    .write(true)
                    .open(&files[files.len() - 1])
                    .expect("open");
                f.set_len(20 * 5 + 7).expect("cut");
            }
            _ => {
                fs::remove_dir_all(root.join("consumequeue")).expect("rm");
                fs::remove_file(root.join("cqmanifest")).expect("rm manifest");
            }
        }
        let (store, report) = open(root, SEG);
        assert!(!report.cq_rebuilt.is_empty(), "{variant}: rebuild reported");
        assert_eq!(queue_maxes(&store), before, "{variant}");
        let (after, skipped) = read_all(&store);
        assert!(skipped.is_empty());
        assert_eq!(after, contents, "{variant}");
        let p = store.append_batch(&[msg(2, b"next")]).expect("append");
        assert_eq!(p[0].queue_offset, before[2].1 as i64, "{variant}");
        let last_q2 = recs.iter().filter(|r| r.qid == 2).count() as u64;
        assert_eq!(before[2].1, last_q2);
        store.close().expect("close");
        drop(store);
        // A second reopen needs no rebuild and changes nothing.
        let (store, report) = open(root, SEG);
        assert!(report.cq_rebuilt.is_empty(), "{variant}");
        assert_eq!(store.queue_max_offset(TOPIC, 2).expect("max"), last_q2 + 1);
    }
}

/// A consume-queue unit that points at a record of another queue is damage: the queue is
/// rebuilt from the commitlog.
#[test]
fn a_unit_pointing_at_another_queues_record_gets_the_queue_rebuilt() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    let (store, _) = open(root, 1 << 20);
    let recs = fill(&store, 200, |_| 100);
    let before = queue_maxes(&store);
    let (contents, _) = read_all(&store);
    store.close().expect("close");
    drop(store);
    // Point queue 1's last unit at a record of queue 0 (its size still fits).
    let q1_last = recs.iter().rev().find(|r| r.qid == 1).expect("q1");
    let q0 = recs.iter().find(|r| r.qid == 0).expect("q0");
    let file = root
        .join("consumequeue")
        .join(TOPIC)
        .join("1")
        .join(format!("{:020}", (q1_last.qo - q1_last.qo % 64) * 20));
    let f = OpenOptions::new().write(true).open(file).expect("open");
    f.write_all_at(&q0.offset.to_be_bytes(), (q1_last.qo % 64) * 20)
        .expect("write");
    drop(f);
    let (store, report) = open(root, 1 << 20);
    assert_eq!(report.cq_rebuilt.len(), 1);
    assert_eq!(
        (report.cq_rebuilt[0].0.as_str(), report.cq_rebuilt[0].1),
        (TOPIC, 1)
    );
    assert_eq!(queue_maxes(&store), before);
    assert_eq!(read_all(&store).0, contents);
}

/// Repair: the good bytes of a quarantined record (from a replica that copied the log with
/// read_range/append_raw) are checked and written back; the record is readable again. Wrong
/// bytes are refused and change nothing.
#[test]
fn repair_with_a_replicas_bytes_makes_the_record_readable_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let replica_dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    let (store, _) = open(root, SEG);
    let mut rcfg = cfg(replica_dir.path(), SEG);
    rcfg.confirm_follows_max = false;
    let (replica, _) = Store::open(rcfg).expect("replica");
    let recs = fill(&store, 400, |i| 100 + (i * 7) % 300);
    let mut off = 0;
    while off < store.max_offset() {
        let chunk = store.read_range(off, 8192, u64::MAX).expect("range");
        replica
            .append_raw(off, chunk.as_slice())
            .expect("append_raw");
        off = chunk.end_offset();
    }
    replica.set_confirm_offset(off).expect("confirm");
    store.close().expect("close");
    drop(store);
    let bad = recs[250].clone();
    let other = recs[251].clone();
    flip(root, SEG, bad.offset + 50, 4);
    let (store, report) = open(root, SEG);
    let (got, _) = read_all(&store);
    assert!(!got.contains_key(&(bad.qid, bad.qo)));
    let entry = store.quarantined().expect("list")[0].clone();
    assert_eq!(entry.offset, bad.offset);
    let _ = report;
    // Refusals: not a quarantined offset, wrong size, another record, a corrupt copy.
    let good = replica
        .read_range(entry.offset, entry.size as usize, entry.end())
        .expect("replica bytes")
        .as_slice()
        .to_vec();
    assert_eq!(good, bad.raw);
    assert!(matches!(
        store.repair(bad.offset + 1, &good),
        Err(StoreError::InvalidArgument(_))
    ));
    assert!(matches!(
        store.repair(bad.offset, &good[..good.len() - 1]),
        Err(StoreError::InvalidArgument(_))
    ));
    let mut corrupt = good.clone();
    corrupt[60] ^= 1;
    assert!(matches!(
        store.repair(bad.offset, &corrupt),
        Err(StoreError::InvalidArgument(_))
    ));
    if other.size == bad.size {
        assert!(store.repair(bad.offset, &other.raw).is_err());
    }
    assert_eq!(store.quarantined().expect("list").len(), 1);
    let fixed = store.repair(bad.offset, &good).expect("repair");
    assert_eq!(fixed.len(), 1);
    assert_eq!(
        (fixed[0].queue_id, fixed[0].queue_offset),
        (bad.qid, bad.qo)
    );
    assert!(store.quarantined().expect("list").is_empty());
    assert_eq!(
        store.read_record(bad.offset).expect("readable").as_slice(),
        &bad.raw[..]
    );
    let (got, skipped) = read_all(&store);
    assert!(skipped.is_empty());
    assert_eq!(got.len(), recs.len());
    assert_eq!(store.stats().expect("stats").0.repaired, 1);
    store.close().expect("close");
    drop(store);
    let (store, report) = open(root, SEG);
    assert!(report.quarantined.is_empty());
    assert!(store.quarantined().expect("list").is_empty());
}

/// A record whose header is destroyed while it was past the dispatch point (confirm offset
/// lagging, as on a replica) has no consume-queue unit to name it. The dispatcher fills its
/// queue position with a placeholder inside the quarantined range, so later records keep their
/// queue offsets; readers skip it; a repair rewrites the placeholder.
#[test]
fn undispatched_damaged_record_keeps_queue_offsets_with_a_placeholder() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    let mut c = cfg(root, 1 << 20);
    c.confirm_follows_max = false;
    let (store, _) = Store::open(c.clone()).expect("open");
    let recs = fill(&store, 100, |_| 120);
    store.set_confirm_offset(recs[40].offset).expect("confirm");
    store.flush().expect("flush");
    store.close().expect("close");
    drop(store);
    let bad = recs[70].clone();
    let good = bad.raw.clone();
    write_at(root, 1 << 20, bad.offset, &[0xEE; 12]);
    let (store, report) = Store::open(c).expect("reopen");
    assert_eq!(report.quarantined.len(), 1);
    assert!(report.quarantined[0].record.is_none(), "no unit named it");
    store
        .set_confirm_offset(store.max_offset())
        .expect("confirm");
    let (got, skipped) = read_all(&store);
    assert_eq!(skipped, vec![(bad.qid, bad.qo)]);
    for r in &recs {
        if r.offset != bad.offset {
            assert_eq!(got.get(&(r.qid, r.qo)), Some(&r.raw), "{r:?}");
        }
    }
    assert_eq!(
        store.queue_max_offset(TOPIC, bad.qid).expect("max"),
        recs.iter().filter(|r| r.qid == bad.qid).count() as u64
    );
    let fixed = store.repair(bad.offset, &good).expect("repair");
    assert_eq!(
        (fixed[0].queue_id, fixed[0].queue_offset),
        (bad.qid, bad.qo)
    );
    let unit = store
        .queue_unit(TOPIC, bad.qid, bad.qo)
        .expect("unit rewritten");
    assert_eq!(
        (unit.phys_offset, u64::from(unit.size)),
        (bad.offset, bad.size)
    );
    let (got, skipped) = read_all(&store);
    assert!(skipped.is_empty());
    assert_eq!(got.get(&(bad.qid, bad.qo)), Some(&bad.raw));
}

/// scrub validates old segments and quarantines what is damaged, segment by segment.
#[test]
fn scrub_finds_damage_in_old_segments() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    let (store, _) = open(root, SEG);
    let recs = fill(&store, 700, |i| 150 + (i * 11) % 250);
    store.close().expect("close");
    drop(store);
    let a = recs.iter().find(|r| r.offset > 5000).expect("a").clone();
    let b = recs
        .iter()
        .find(|r| r.offset > 2 * SEG + 5000)
        .expect("b")
        .clone();
    flip(root, SEG, a.offset + 70, 2);
    flip(root, SEG, b.offset + 70, 2);
    let (store, _) = open(root, SEG);
    let mut off = store.min_offset();
    let mut found = Vec::new();
    while off < store.max_offset() {
        let (next, added) = store.scrub(off).expect("scrub");
        assert!(next > off);
        found.extend(added.into_iter().map(|e| (e.offset, e.size, e.record)));
        off = next;
    }
    let offs: Vec<(u64, u64)> = found.iter().map(|f| (f.0, f.1)).collect();
    assert_eq!(offs, vec![(a.offset, a.size), (b.offset, b.size)]);
    assert!(found.iter().all(|f| f.2.is_some()), "named by their units");
    assert!(matches!(
        store.scrub(a.offset + 3),
        Err(StoreError::InvalidArgument(_))
    ));
}

/// RocketMQ's deleteExpiredFile: oldest first, only expired segments (by modification time)
/// unless cleaning immediately, at most `max_files`, never the last segment, never past the
/// dispatch point. Consume queues follow the min offset.
#[test]
fn retention_deletes_expired_segments_oldest_first_within_bounds() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    let mut c = cfg(root, SEG);
    c.confirm_follows_max = false;
    let (store, _) = Store::open(c).expect("open");
    let recs = fill(&store, 900, |i| 100 + (i * 31) % 400);
    store.flush().expect("flush");
    let nseg = store.segment_files().expect("files").len();
    assert!(nseg >= 6);
    // Segment 2 is "new": expiry stops there (RocketMQ never deletes past a live file).
    let old = SystemTime::now() - Duration::from_secs(3600);
    for (start, path) in store.segment_files().expect("files") {
        let f = OpenOptions::new().write(true).open(&path).expect("open");
        let t = if start == 2 * SEG {
            SystemTime::now()
        } else {
            old
        };
        f.set_modified(t).expect("mtime");
    }
    // Nothing dispatched yet: nothing may go.
    let r = store
        .delete_expired(SystemTime::now() - Duration::from_secs(60), false, 10)
        .expect("expire");
    assert!(r.deleted.is_empty());
    store
        .set_confirm_offset(store.max_offset())
        .expect("confirm");
    let r = store
        .delete_expired(SystemTime::now() - Duration::from_secs(60), false, 10)
        .expect("expire");
    assert_eq!(r.deleted, vec![format!("{:020}", 0), format!("{SEG:020}")]);
    assert_eq!((r.min_offset, store.min_offset()), (2 * SEG, 2 * SEG));
    assert!(!seg_path(root, SEG, 0).exists());
    // Clean immediately (disk too full): any age, at most max_files per call.
    let r = store
        .delete_expired(SystemTime::now() - Duration::from_secs(60), true, 2)
        .expect("force");
    assert_eq!(r.deleted.len(), 2);
    assert_eq!(store.min_offset(), 4 * SEG);
    let r = store
        .delete_expired(SystemTime::UNIX_EPOCH, true, 100)
        .expect("force all");
    assert_eq!(r.deleted.len(), nseg - 5);
    let files = store.segment_files().expect("files");
    assert_eq!(files.len(), 1, "the last segment is never deleted");
    let first_left = recs
        .iter()
        .filter(|r| r.qid == 0 && r.offset >= store.min_offset())
        .map(|r| r.qo)
        .min();
    if let Some(m) = first_left {
        assert_eq!(store.queue_min_offset(TOPIC, 0).expect("min"), m);
    }
    let (stats, _, _) = store.stats().expect("stats");
    assert_eq!(stats.retention_segments as usize, nseg - 1);
    assert_eq!(stats.retention_bytes, (nseg as u64 - 1) * SEG);
}

/// syncFromLastFile: an empty store starts at a segment boundary, takes replicated bytes from
/// there, and keeps that min offset across a reopen. A non-empty store or an offset inside a
/// segment is refused.
#[test]
fn an_empty_store_can_start_at_a_segment_boundary() {
    let master_dir = tempfile::tempdir().expect("tempdir");
    let slave_dir = tempfile::tempdir().expect("tempdir");
    let (master, _) = open(master_dir.path(), SEG);
    let recs = fill(&master, 700, |i| 100 + (i * 31) % 400);
    let last_seg = master
        .segment_files()
        .expect("files")
        .last()
        .expect("seg")
        .0;
    assert!(last_seg >= 3 * SEG);
    let mut sc = cfg(slave_dir.path(), SEG);
    sc.confirm_follows_max = false;
    let (slave, _) = Store::open(sc.clone()).expect("slave");
    assert!(matches!(
        slave.start_at(last_seg + 1),
        Err(StoreError::InvalidArgument(_))
    ));
    slave.start_at(last_seg).expect("start_at");
    assert_eq!(
        (slave.min_offset(), slave.max_offset()),
        (last_seg, last_seg)
    );
    let mut off = last_seg;
    while off < master.max_offset() {
        let chunk = master.read_range(off, 4096, u64::MAX).expect("range");
        slave.append_raw(off, chunk.as_slice()).expect("append_raw");
        off = chunk.end_offset();
    }
    slave.set_confirm_offset(off).expect("confirm");
    assert!(matches!(
        slave.start_at(0),
        Err(StoreError::InvalidArgument(_))
    ));
    for r in recs.iter().filter(|r| r.offset >= last_seg) {
        let got = slave.read_record(r.offset).expect("replicated");
        assert!(matches!(
            decode_record(got.as_slice()),
            Ok(Decoded::Record(v)) if v.queue_offset as u64 == r.qo
        ));
    }
    // Queues start at the first replicated queue offset.
    let first_q0 = recs
        .iter()
        .find(|r| r.qid == 0 && r.offset >= last_seg)
        .map(|r| r.qo);
    if let Some(q) = first_q0 {
        assert_eq!(slave.queue_min_offset(TOPIC, 0).expect("min"), q);
    }
    slave.close().expect("close");
    drop(slave);
    let (slave, _) = Store::open(sc).expect("reopen");
    assert_eq!(
        (slave.min_offset(), slave.max_offset()),
        (last_seg, master.max_offset())
    );
}

#[derive(Debug, Clone)]
enum Hit {
    Flip { at: u64, n: usize },
    Garbage { at: u64, len: usize, seed: u8 },
    ZeroRun { at: u64, len: usize },
}

fn hit() -> impl Strategy<Value = Hit> {
    prop_oneof![
        (any::<u64>(), 1usize..6).prop_map(|(at, n)| Hit::Flip { at, n }),
        (any::<u64>(), 1usize..1500, any::<u8>()).prop_map(|(at, len, seed)| Hit::Garbage {
            at,
            len,
            seed
        }),
        (any::<u64>(), 1usize..3000).prop_map(|(at, len)| Hit::ZeroRun { at, len }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, .. ProptestConfig::default() })]

    /// Damage anywhere below the durable point of a cleanly closed store (any segment): every
    /// record whose bytes are intact stays readable, byte for byte, at its queue offset, unless
    /// nothing valid follows the damage (then the log is cut before the first damaged record,
    /// except for the newest record damaged in place, which is quarantined);
    /// a damaged record is never served; queue max offsets never move (except by that cut).
    #[test]
    fn damage_below_the_durable_point_keeps_every_intact_record(
        n in 50usize..500,
        sizes in proptest::collection::vec(0usize..900, 500),
        hits in proptest::collection::vec(hit(), 1..3),
    ) {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        let (store, _) = open(root, SEG);
        let recs = fill(&store, n, |i| sizes[i]);
        let maxes = queue_maxes(&store);
        let end = store.max_offset();
        store.close().expect("close");
        drop(store);
        for h in &hits {
            let (at, data) = match h {
                Hit::Flip { at, n } => {
                    let at = at % end;
                    let f = OpenOptions::new().read(true).open(seg_path(root, SEG, at)).expect("open");
                    let mut b = vec![0u8; *n];
                    let n = (*n as u64).min(SEG - at % SEG) as usize;
                    f.read_exact_at(&mut b[..n], at % SEG).expect("read");
                    (at, b[..n].iter().map(|x| x ^ 0x5A).collect::<Vec<u8>>())
                }
                Hit::Garbage { at, len, seed } => {
                    let at = at % end;
                    let len = (*len as u64).min(SEG - at % SEG) as usize;
                    (at, (0..len).map(|i| (i as u8).wrapping_mul(97).wrapping_add(*seed) | 1).collect())
                }
                Hit::ZeroRun { at, len } => {
                    let at = at % end;
                    let len = (*len as u64).min(SEG - at % SEG) as usize;
                    (at, vec![0u8; len])
                }
            };
            write_at(root, SEG, at, &data);
        }
        // Which records changed.
        let damaged: Vec<bool> = recs
            .iter()
            .map(|r| {
                let f = OpenOptions::new().read(true).open(seg_path(root, SEG, r.offset)).expect("open");
                let mut b = vec![0u8; r.size as usize];
                f.read_exact_at(&mut b, r.offset % SEG).expect("read");
                b != r.raw
            })
            .collect();
        let Some(first_bad) = damaged.iter().position(|&d| d) else {
            return Ok(()); // the damage rewrote identical bytes
        };
        let last_seg = (end - 1) - (end - 1) % SEG;
        // The tail: the run of damaged records that ends the log inside its last segment (the
        // one recovery validates); no valid record follows it, so it is cut.
        let mut tail_from = recs.len();
        while tail_from > 0 && damaged[tail_from - 1] && recs[tail_from - 1].offset >= last_seg {
            tail_from -= 1;
        }
        // Not cut when the tail's first damaged record is one whole record ending at the log's
        // end, damaged in place: its header claims that size and its last 4 bytes are not
        // zeros (storage probe: quarantined with its queue offset).
        let tail = tail_from < recs.len() && {
            let r = &recs[tail_from];
            let f = OpenOptions::new().read(true).open(seg_path(root, SEG, r.offset)).expect("open");
            let mut head = [0u8; 4];
            f.read_exact_at(&mut head, r.offset % SEG).expect("read");
            let mut trailer = [0u8; 4];
            f.read_exact_at(&mut trailer, (end - 4) % SEG).expect("read");
            let claims = i64::from(i32::from_be_bytes(head)) == (end - r.offset) as i64;
            !(claims && r.offset + 8 < end && trailer != [0u8; 4])
        };
        let _ = first_bad;
        let cut_at = recs.get(tail_from).map_or(end, |r| r.offset);
        let (store, _) = open(root, SEG);
        let (got, _) = read_all(&store);
        if tail {
            prop_assert_eq!(store.max_offset(), cut_at);
        } else {
            prop_assert_eq!(store.max_offset(), end);
            prop_assert_eq!(queue_maxes(&store), maxes.clone());
        }
        for (r, &d) in recs.iter().zip(&damaged) {
            let cut = tail && r.offset >= cut_at;
            if d || cut {
                prop_assert!(store.read_record(r.offset).is_err(), "damaged record at {} served", r.offset);
                prop_assert!(!got.contains_key(&(r.qid, r.qo)));
            } else {
                prop_assert_eq!(got.get(&(r.qid, r.qo)), Some(&r.raw), "intact record at {} lost", r.offset);
            }
        }
        // New appends continue each queue at its old max (or the cut).
        let p = store.append_batch(&[msg(0, b"after")]).expect("append");
        let want = if tail {
            recs[..tail_from].iter().filter(|r| r.qid == 0).count() as i64
        } else {
            maxes[0].1 as i64
        };
        prop_assert_eq!(p[0].queue_offset, want);
    }
}
