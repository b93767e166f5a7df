//! Issue 16: a pull response's body built natively ([`GetResult::body`] /
//! [`GetResult::copy_body_into`]): for any queue, start offset, count and byte limits and tag
//! filter, the body is exactly the stored records a model of `read_queue`'s rules selects,
//! back to back, each as clients are served it (without the whole-record CRC trailer:
//! `client_record`), and equals the concatenation of the per-record reads so served.

use std::net::SocketAddr;
use std::path::Path;

use proptest::prelude::*;
use rmq_store::store::{java_string_hash, Store, StoreConfig};
use rmq_wire::message::{client_record, MessageIn};

const SEG: u64 = 64 * 1024;
const TOPIC: &str = "Body";
const TAGS: [Option<&str>; 4] = [Some("a"), Some("b"), Some("c"), None];

fn open(root: &Path) -> Store {
    let mut c = StoreConfig::new(root);
    c.segment_size = SEG; // records cross many segments (end-of-segment fillers between them)
    c.cq_units_per_file = 64;
    c.flush_interval_ms = 20;
    Store::open(c).expect("open").0
}

/// One appended record: its queue, tag code (0 without a tag) and stored bytes.
#[derive(Debug, Clone)]
struct Rec {
    qid: i32,
    tag_code: i64,
    raw: Vec<u8>,
}

/// Appends one message per (queue, tag index, body length) in batches of up to 5.
fn fill(store: &Store, spec: &[(i32, usize, usize)]) -> Vec<Rec> {
    let mut out = Vec::new();
    for chunk in spec.chunks(5) {
        let bodies: Vec<Vec<u8>> = chunk
            .iter()
            .enumerate()
            .map(|(i, &(_, _, len))| (0..len).map(|j| (i * 31 + j) as u8).collect())
            .collect();
        let props: Vec<Vec<u8>> = chunk
            .iter()
            .map(|&(_, t, _)| match TAGS[t] {
                Some(tag) => format!("TAGS\x01{tag}\x02").into_bytes(),
                None => b"KEYS\x01k\x02".to_vec(),
            })
            .collect();
        let msgs: Vec<MessageIn<'_>> = chunk
            .iter()
            .enumerate()
            .map(|(i, &(qid, _, _))| MessageIn {
                topic: TOPIC.as_bytes(),
                queue_id: qid,
                flag: 0,
                sys_flag: 0,
                body: &bodies[i],
                properties: &props[i],
                born_timestamp: 1,
                born_host: SocketAddr::from(([127, 0, 0, 1], 4000)),
                reconsume_times: 0,
                prepared_txn_offset: 0,
            })
            .collect();
        let placed = store.append_batch(&msgs).expect("append");
        for (i, p) in placed.iter().enumerate() {
            let raw = store
                .read_record(p.physical_offset)
                .expect("read")
                .as_slice()
                .to_vec();
            let (qid, t, _) = chunk[i];
            out.push(Rec {
                qid,
                tag_code: TAGS[t].map_or(0, java_string_hash),
                raw,
            });
        }
    }
    out
}

/// `read_queue`'s selection rules on the model: (records served, next offset).
fn model(
    queue: &[&Rec],
    start: usize,
    max_count: usize,
    max_bytes: usize,
    tags: Option<&[i64]>,
) -> (Vec<Vec<u8>>, u64) {
    let mut out: Vec<Vec<u8>> = Vec::new();
    let mut bytes = 0;
    let mut next = start;
    for r in &queue[start..] {
        if out.len() >= max_count {
            break;
        }
        if tags.is_some_and(|t| !t.contains(&r.tag_code)) {
            next += 1;
            continue;
        }
        if !out.is_empty() && bytes + r.raw.len() > max_bytes {
            break;
        }
        bytes += r.raw.len();
        out.push(r.raw.clone());
        next += 1;
    }
    (out, next as u64)
}

fn spec_strategy() -> impl Strategy<Value = Vec<(i32, usize, usize)>> {
    proptest::collection::vec((0i32..3, 0usize..4, 0usize..3000), 1..120)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, .. ProptestConfig::default() })]

    #[test]
    fn body_is_the_selected_records_back_to_back(
        spec in spec_strategy(),
        reads in proptest::collection::vec(
            (0i32..3, 0.0f64..1.0, 1usize..40, 1usize..60_000, proptest::option::of(
                proptest::collection::vec(0usize..4, 1..3))),
            1..12,
        ),
    ) {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = open(dir.path());
        let recs = fill(&store, &spec);
        for (qid, at, max_count, max_bytes, tag_idx) in reads {
            let queue: Vec<&Rec> = recs.iter().filter(|r| r.qid == qid).collect();
            if queue.is_empty() {
                continue;
            }
            let start = ((queue.len() as f64) * at) as usize;
            let tags: Option<Vec<i64>> = tag_idx
                .map(|v| v.iter().map(|&t| TAGS[t].map_or(0, java_string_hash)).collect());
            let r = store
                .read_queue(TOPIC, qid, start as u64, max_count, max_bytes, tags.as_deref())
                .expect("read_queue");
            let (want, next) = model(&queue, start, max_count, max_bytes, tags.as_deref());
            let body = r.body();
            prop_assert_eq!(body.len(), r.body_len());
            let served: Vec<Vec<u8>> = want.iter().map(|w| client_record(w)).collect();
            prop_assert_eq!(&body, &served.concat());
            // every record lost exactly its 20-byte trailer
            prop_assert_eq!(body.len() + 20 * want.len(), want.concat().len());
            prop_assert_eq!(r.records.len(), want.len());
            prop_assert_eq!(r.next_offset, next);
            prop_assert!(r.skipped.is_empty());
            // ... and the concatenation of the per-record reads of the records served
            let per_record: Vec<u8> = r
                .records
                .iter()
                .flat_map(|b| client_record(store.read_record(b.offset).expect("read").as_slice()))
                .collect();
            prop_assert_eq!(&body, &per_record);
        }
        store.close().expect("close");
    }
}

#[test]
fn copy_body_into_needs_the_exact_length() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    let recs = fill(&store, &[(0, 0, 100), (0, 1, 200), (0, 3, 0)]);
    let r = store
        .read_queue(TOPIC, 0, 0, 32, 1 << 20, None)
        .expect("read_queue");
    let want: Vec<u8> = recs.iter().flat_map(|r| client_record(&r.raw)).collect();
    assert_eq!(r.body_len(), want.len());
    let mut short = vec![0u8; want.len() - 1];
    assert!(!r.copy_body_into(&mut short));
    assert!(
        short.iter().all(|&b| b == 0),
        "nothing written on a mismatch"
    );
    let mut long = vec![0u8; want.len() + 1];
    assert!(!r.copy_body_into(&mut long));
    let mut exact = vec![0u8; want.len()];
    assert!(r.copy_body_into(&mut exact));
    assert_eq!(exact, want);
    // the tag filter: only "b" (the second record)
    let b = store
        .read_queue(TOPIC, 0, 0, 32, 1 << 20, Some(&[java_string_hash("b")]))
        .expect("read_queue");
    assert_eq!(b.body(), client_record(&recs[1].raw));
    assert_eq!(b.next_offset, 3);
    store.close().expect("close");
}
