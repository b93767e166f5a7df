//! `rmq_ha._native`: the only PyO3 crate. Conversions, GIL release around disk work, and the
//! mapping of each Rust error variant to exactly one class of `rmq_ha.errors`.

use std::net::{SocketAddr, ToSocketAddrs};
use std::os::raw::c_int;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use pyo3::exceptions::{PyBufferError, PyIndexError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyTuple};

mod ha;
mod remoting;
mod replica;
mod send;

use rmq_store::baseline::{sequential_write, SyncCadence};
use rmq_store::commitlog::{Placement, RecordBuf};
use rmq_store::epoch::{find_consistent_point as fcp, EpochFile as RsEpochFile, EpochLoadSource};
use rmq_store::quarantine::{QuarantineEntry, QuarantineLoad};
use rmq_store::store::{GetResult, Store as RsStore, StoreConfig};
use rmq_store::StoreError;
use rmq_wire::message::{
    decode_record, Decoded, MessageIn, RECORD_CRC_KEY, RECORD_CRC_TRAILER_LEN,
};

pyo3::import_exception!(rmq_ha.errors, StoreIOError);
pyo3::import_exception!(rmq_ha.errors, CorruptRecordError);
pyo3::import_exception!(rmq_ha.errors, CorruptFileError);
pyo3::import_exception!(rmq_ha.errors, OffsetOutOfRangeError);
pyo3::import_exception!(rmq_ha.errors, EpochConflictError);
pyo3::import_exception!(rmq_ha.errors, MessageIllegalError);
pyo3::import_exception!(rmq_ha.errors, ConfigError);
pyo3::import_exception!(rmq_ha.errors, StoreClosedError);
pyo3::import_exception!(rmq_ha.errors, InvalidArgumentError);
pyo3::import_exception!(rmq_ha.errors, QuarantinedRecordError);

fn to_py(e: StoreError) -> PyErr {
    let msg = e.to_string();
    match e {
        StoreError::Io { path, source } => {
            StoreIOError::new_err((msg, path.display().to_string(), source.raw_os_error()))
        }
        StoreError::CorruptRecord { offset, .. } => CorruptRecordError::new_err((msg, offset)),
        StoreError::Quarantined { offset, size, .. } => {
            QuarantinedRecordError::new_err((msg, offset, size))
        }
        StoreError::CorruptFile { path, .. } => {
            CorruptFileError::new_err((msg, path.display().to_string()))
        }
        StoreError::OffsetOutOfRange { offset, min, max } => {
            OffsetOutOfRangeError::new_err((msg, offset, min, max))
        }
        StoreError::EpochConflict(_) => EpochConflictError::new_err(msg),
        StoreError::MessageIllegal(_) => MessageIllegalError::new_err(msg),
        StoreError::Config { key, .. } => ConfigError::new_err((msg, key)),
        StoreError::InvalidArgument(_) => InvalidArgumentError::new_err(msg),
        StoreError::Closed => StoreClosedError::new_err(msg),
    }
}

fn parse_addr(s: &str, what: &'static str) -> PyResult<SocketAddr> {
    s.to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| {
            ConfigError::new_err((format!("bad config {what}: {s:?} is not host:port"), what))
        })
}

/// A message to append. Everything the store does not assign itself.
#[pyclass(frozen, module = "rmq_ha._native")]
struct Message {
    topic: Vec<u8>,
    queue_id: i32,
    body: Vec<u8>,
    properties: Vec<u8>,
    flag: i32,
    sys_flag: i32,
    born_timestamp: i64,
    born_host: SocketAddr,
    reconsume_times: i32,
    prepared_txn_offset: i64,
}

#[pymethods]
impl Message {
    #[new]
    #[pyo3(signature = (topic, queue_id, body, properties=None, *, flag=0, sys_flag=0,
                        born_timestamp=0, born_host="127.0.0.1:0", reconsume_times=0,
                        prepared_txn_offset=0))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        topic: &str,
        queue_id: i32,
        body: &[u8],
        properties: Option<&[u8]>,
        flag: i32,
        sys_flag: i32,
        born_timestamp: i64,
        born_host: &str,
        reconsume_times: i32,
        prepared_txn_offset: i64,
    ) -> PyResult<Self> {
        Ok(Message {
            topic: topic.as_bytes().to_vec(),
            queue_id,
            body: body.to_vec(),
            properties: properties.unwrap_or_default().to_vec(),
            flag,
            sys_flag,
            born_timestamp,
            born_host: parse_addr(born_host, "born_host")?,
            reconsume_times,
            prepared_txn_offset,
        })
    }
    #[getter]
    fn topic(&self) -> String {
        String::from_utf8_lossy(&self.topic).into_owned()
    }
    #[getter]
    fn queue_id(&self) -> i32 {
        self.queue_id
    }
    #[getter]
    fn body<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.body)
    }
}

impl Message {
    fn as_in(&self) -> MessageIn<'_> {
        MessageIn {
            topic: &self.topic,
            queue_id: self.queue_id,
            flag: self.flag,
            sys_flag: self.sys_flag,
            body: &self.body,
            properties: &self.properties,
            born_timestamp: self.born_timestamp,
            born_host: self.born_host,
            reconsume_times: self.reconsume_times,
            prepared_txn_offset: self.prepared_txn_offset,
        }
    }
}

/// Zero-copy view of stored bytes (whole records). Supports the buffer protocol:
/// `memoryview(buf)` and `sock.send(buf)` read the segment mapping directly.
#[pyclass(frozen, module = "rmq_ha._native")]
struct StoreBuffer {
    inner: RecordBuf,
}

#[pymethods]
impl StoreBuffer {
    /// Commitlog offset of the first byte.
    #[getter]
    fn offset(&self) -> u64 {
        self.inner.offset
    }
    /// Offset just past the last byte.
    #[getter]
    fn end_offset(&self) -> u64 {
        self.inner.end_offset()
    }
    fn __len__(&self) -> usize {
        self.inner.len()
    }
    /// A copy as bytes.
    fn tobytes<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, self.inner.as_slice())
    }
    // SAFETY (of the unsafe fn as a whole): called by CPython with a valid `view`; we fill it
    // with a pointer into the mapping owned by `self.inner`, and PyBuffer_FillInfo stores a new
    // reference to `slf` in `view->obj`, which keeps this object (and so the mapping) alive for
    // as long as the view exists.
    unsafe fn __getbuffer__(
        slf: PyRef<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        if (flags & ffi::PyBUF_WRITABLE) == ffi::PyBUF_WRITABLE {
            return Err(PyBufferError::new_err("StoreBuffer is read-only"));
        }
        let len = slf.inner.len() as ffi::Py_ssize_t;
        let ptr = slf.inner.as_ptr() as *mut std::os::raw::c_void;
        // SAFETY: `view` is valid per the caller's contract; `ptr`/`len` describe memory that
        // stays mapped while `slf` is alive, and FillInfo takes a reference to `slf`.
        let rc = unsafe { ffi::PyBuffer_FillInfo(view, slf.as_ptr(), ptr, len, 1, flags) };
        if rc != 0 {
            return Err(PyErr::fetch(slf.py()));
        }
        Ok(())
    }
    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {}
}

fn wrap(inner: RecordBuf) -> StoreBuffer {
    StoreBuffer { inner }
}

/// Where each message of an `append_batch` went.
#[pyclass(frozen, sequence, module = "rmq_ha._native")]
struct AppendResult {
    placed: Vec<Placement>,
}

#[pymethods]
impl AppendResult {
    fn __len__(&self) -> usize {
        self.placed.len()
    }
    /// (physical_offset, size, queue_offset, store_timestamp) of message `i`.
    fn __getitem__(&self, i: isize) -> PyResult<(u64, u32, i64, i64)> {
        let n = self.placed.len() as isize;
        let k = if i < 0 { i + n } else { i };
        if k < 0 || k >= n {
            return Err(PyIndexError::new_err("AppendResult index out of range"));
        }
        let p = &self.placed[k as usize];
        Ok((p.physical_offset, p.size, p.queue_offset, p.store_timestamp))
    }
    /// Commitlog offset just past the last message (wait for this to be durable).
    #[getter]
    fn end_offset(&self) -> u64 {
        self.placed
            .last()
            .map_or(0, |p| p.physical_offset + u64::from(p.size))
    }
    /// Physical offsets of every message.
    fn physical_offsets(&self) -> Vec<u64> {
        self.placed.iter().map(|p| p.physical_offset).collect()
    }
    /// Queue offsets of every message.
    fn queue_offsets(&self) -> Vec<i64> {
        self.placed.iter().map(|p| p.queue_offset).collect()
    }
}

/// The message store (commitlog, consume queues, dispatcher, flush thread).
#[pyclass(frozen, module = "rmq_ha._native")]
struct Store {
    inner: RsStore,
    report: Mutex<Option<Py<PyDict>>>,
}

fn entry_dict<'py>(py: Python<'py>, e: &QuarantineEntry) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("offset", e.offset)?;
    d.set_item("size", e.size)?;
    d.set_item("reason", e.reason.clone())?;
    d.set_item("detected_ms", e.detected_ms)?;
    d.set_item("topic", e.record.as_ref().map(|r| r.topic.clone()))?;
    d.set_item("queue_id", e.record.as_ref().map(|r| r.queue_id))?;
    d.set_item("queue_offset", e.record.as_ref().map(|r| r.queue_offset))?;
    Ok(d)
}

fn entry_list<'py>(py: Python<'py>, es: &[QuarantineEntry]) -> PyResult<Vec<Bound<'py, PyDict>>> {
    es.iter().map(|e| entry_dict(py, e)).collect()
}

fn report_dict<'py>(
    py: Python<'py>,
    r: &rmq_store::store::OpenReport,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    let c = &r.commitlog;
    d.set_item("scanned_from", c.scanned_from)?;
    d.set_item("durable_offset", c.durable_offset)?;
    d.set_item("valid_end", c.valid_end)?;
    d.set_item("cut_offset", c.cut_offset)?;
    d.set_item("cut_to", c.cut_to)?;
    d.set_item("cut_reason", c.cut_reason.clone())?;
    d.set_item("cut_bytes", c.cut_bytes)?;
    d.set_item("cut_segments", c.cut_segments.clone())?;
    d.set_item("cut_below_durable", c.cut_below_durable)?;
    d.set_item("missing_durable", c.missing_durable)?;
    d.set_item("short_segments", c.short_segments.clone())?;
    d.set_item("records_scanned", c.records_scanned)?;
    d.set_item(
        "checkpoint",
        match &r.checkpoint {
            rmq_store::checkpoint::CheckpointLoad::Fresh => "fresh".to_string(),
            rmq_store::checkpoint::CheckpointLoad::Loaded => "loaded".to_string(),
            rmq_store::checkpoint::CheckpointLoad::Corrupt(why) => format!("corrupt: {why}"),
        },
    )?;
    d.set_item("cq_cut_units", r.cq_cut_units)?;
    d.set_item("redispatched_from", r.redispatched_from)?;
    d.set_item("confirm_offset", r.confirm_offset)?;
    d.set_item("confirm_clamped_from", r.confirm_clamped_from)?;
    d.set_item(
        "quarantine_load",
        match &r.quarantine_load {
            QuarantineLoad::Fresh => "fresh".to_string(),
            QuarantineLoad::Main => "main".to_string(),
            QuarantineLoad::Backup(why) => format!("backup; the main file: {why}"),
            QuarantineLoad::Lost(why) => format!("lost: {why}"),
        },
    )?;
    d.set_item("quarantined", entry_list(py, &r.quarantined)?)?;
    d.set_item("healed", entry_list(py, &r.healed)?)?;
    d.set_item("quarantine_dropped", entry_list(py, &r.quarantine_dropped)?)?;
    d.set_item("cq_rebuilt", r.cq_rebuilt.clone())?;
    d.set_item("cq_rebuilt_units", r.cq_rebuilt_units)?;
    d.set_item("cq_manifest_problem", r.cq_manifest_problem.clone())?;
    d.set_item("checkpoint_deferred", r.checkpoint_deferred.clone())?;
    Ok(d)
}

type QueueRead = (
    Vec<StoreBuffer>,
    u64,
    u64,
    u64,
    Vec<(u64, u64, u64, String)>,
);

/// (body, count, next_offset, min_offset, max_offset, skipped) of `Store.read_queue_body`.
type QueueBody<'py> = (
    Bound<'py, PyBytes>,
    usize,
    u64,
    u64,
    u64,
    Vec<(u64, u64, u64, String)>,
);

/// Bodies at least this large are copied with the GIL released (below it the release costs
/// more than the copy).
const DETACH_BODY_COPY_BYTES: usize = 64 * 1024;

fn queue_read(r: GetResult) -> QueueRead {
    (
        r.records.into_iter().map(wrap).collect(),
        r.next_offset,
        r.min_offset,
        r.max_offset,
        r.skipped
            .into_iter()
            .map(|k| (k.queue_offset, k.phys_offset, k.size, k.reason))
            .collect(),
    )
}

#[pymethods]
impl Store {
    #[new]
    #[pyo3(signature = (root, *, segment_size=1<<30, cq_units_per_file=300_000,
                        store_host="127.0.0.1:10911", flush_interval_ms=500,
                        checkpoint_interval_ms=1000, max_message_size=4*1024*1024,
                        confirm_follows_max=true))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        root: PathBuf,
        segment_size: u64,
        cq_units_per_file: u64,
        store_host: &str,
        flush_interval_ms: u64,
        checkpoint_interval_ms: u64,
        max_message_size: usize,
        confirm_follows_max: bool,
    ) -> PyResult<Self> {
        let mut cfg = StoreConfig::new(root);
        cfg.segment_size = segment_size;
        cfg.cq_units_per_file = cq_units_per_file;
        cfg.store_host = parse_addr(store_host, "store_host")?;
        cfg.flush_interval_ms = flush_interval_ms;
        cfg.checkpoint_interval_ms = checkpoint_interval_ms;
        cfg.max_message_size = max_message_size;
        cfg.confirm_follows_max = confirm_follows_max;
        let (inner, report) = py.detach(|| RsStore::open(cfg)).map_err(to_py)?;
        let d = report_dict(py, &report)?.unbind();
        Ok(Store {
            inner,
            report: Mutex::new(Some(d)),
        })
    }

    /// What recovery found when the store was opened (cut offsets, reasons, ...).
    #[getter]
    fn open_report(&self, py: Python<'_>) -> PyResult<Py<PyDict>> {
        let g = self
            .report
            .lock()
            .map_err(|_| PyValueError::new_err("poisoned"))?;
        match g.as_ref() {
            Some(d) => Ok(d.clone_ref(py)),
            None => Ok(PyDict::new(py).unbind()),
        }
    }

    /// Appends many messages in one call. The GIL is released during encoding and the write.
    /// Returns an `AppendResult`: a sequence of (physical_offset, size, queue_offset,
    /// store_timestamp) built lazily, so a caller that needs only the end offset pays nothing
    /// per message.
    fn append_batch(
        &self,
        py: Python<'_>,
        messages: Vec<Bound<'_, Message>>,
    ) -> PyResult<AppendResult> {
        let refs: Vec<&Message> = messages.iter().map(|m| m.get()).collect();
        let placed = py
            .detach(|| {
                let ins: Vec<MessageIn<'_>> = refs.iter().map(|m| m.as_in()).collect();
                self.inner.append_batch(&ins)
            })
            .map_err(to_py)?;
        Ok(AppendResult { placed })
    }

    /// Appends `bodies` to one queue with shared properties: the fast path for benchmarks and
    /// producers that batch per queue.
    #[pyo3(signature = (topic, queue_id, bodies, properties=None, born_host="127.0.0.1:0", born_timestamp=0))]
    #[allow(clippy::too_many_arguments)]
    fn append_bodies(
        &self,
        py: Python<'_>,
        topic: &str,
        queue_id: i32,
        bodies: Vec<Vec<u8>>,
        properties: Option<Vec<u8>>,
        born_host: &str,
        born_timestamp: i64,
    ) -> PyResult<(u64, u64, i64)> {
        let host = parse_addr(born_host, "born_host")?;
        let props = properties.unwrap_or_default();
        let placed = py
            .detach(|| {
                let ins: Vec<MessageIn<'_>> = bodies
                    .iter()
                    .map(|b| MessageIn {
                        topic: topic.as_bytes(),
                        queue_id,
                        flag: 0,
                        sys_flag: 0,
                        body: b,
                        properties: &props,
                        born_timestamp,
                        born_host: host,
                        reconsume_times: 0,
                        prepared_txn_offset: 0,
                    })
                    .collect();
                self.inner.append_batch(&ins)
            })
            .map_err(to_py)?;
        // (first physical offset, end offset, first queue offset)
        let first = placed.first().map_or(0, |p| p.physical_offset);
        let end = placed
            .last()
            .map_or(first, |p| p.physical_offset + p.size as u64);
        let q = placed.first().map_or(-1, |p| p.queue_offset);
        Ok((first, end, q))
    }

    /// Appends bytes replicated from a master at `offset` (whole, validated records).
    fn append_raw(&self, py: Python<'_>, offset: u64, data: &[u8]) -> PyResult<usize> {
        py.detach(|| self.inner.append_raw(offset, data))
            .map_err(to_py)
    }

    /// The validated record at a physical offset (zero-copy).
    fn read_record(&self, py: Python<'_>, offset: u64) -> PyResult<StoreBuffer> {
        py.detach(|| self.inner.read_record(offset))
            .map(wrap)
            .map_err(to_py)
    }

    /// Whole records from `offset`, at most `max_bytes` (one record at least), below `limit`
    /// (default: the max offset), within one segment.
    #[pyo3(signature = (offset, max_bytes, limit=None))]
    fn read_range(
        &self,
        py: Python<'_>,
        offset: u64,
        max_bytes: usize,
        limit: Option<u64>,
    ) -> PyResult<StoreBuffer> {
        let limit = limit.unwrap_or(u64::MAX);
        py.detach(|| self.inner.read_range(offset, max_bytes, limit))
            .map(wrap)
            .map_err(to_py)
    }

    /// Messages of a queue from `queue_offset`: (buffers, next_offset, min_offset, max_offset).
    /// `tag_codes` keeps only units whose tag code (Java hashCode of the tag) is listed.
    #[pyo3(signature = (topic, queue_id, queue_offset, max_count=32, max_bytes=4*1024*1024, tag_codes=None))]
    #[allow(clippy::too_many_arguments)]
    fn get_messages(
        &self,
        py: Python<'_>,
        topic: &str,
        queue_id: i32,
        queue_offset: u64,
        max_count: usize,
        max_bytes: usize,
        tag_codes: Option<Vec<i64>>,
    ) -> PyResult<(Vec<StoreBuffer>, u64, u64, u64)> {
        let r = py
            .detach(|| {
                self.inner.get_messages(
                    topic,
                    queue_id,
                    queue_offset,
                    max_count,
                    max_bytes,
                    tag_codes.as_deref(),
                )
            })
            .map_err(to_py)?;
        Ok((
            r.records.into_iter().map(wrap).collect(),
            r.next_offset,
            r.min_offset,
            r.max_offset,
        ))
    }

    /// Messages of a queue from `queue_offset`, reading around quarantined records:
    /// (buffers, next_offset, min_offset, max_offset, skipped), skipped being
    /// [(queue_offset, physical_offset, size, reason)] of units not served (a damaged record
    /// found here is quarantined first).
    #[pyo3(signature = (topic, queue_id, queue_offset, max_count=32, max_bytes=4*1024*1024, tag_codes=None))]
    #[allow(clippy::too_many_arguments)]
    fn read_queue(
        &self,
        py: Python<'_>,
        topic: &str,
        queue_id: i32,
        queue_offset: u64,
        max_count: usize,
        max_bytes: usize,
        tag_codes: Option<Vec<i64>>,
    ) -> PyResult<QueueRead> {
        py.detach(|| {
            self.inner.read_queue(
                topic,
                queue_id,
                queue_offset,
                max_count,
                max_bytes,
                tag_codes.as_deref(),
            )
        })
        .map(queue_read)
        .map_err(to_py)
    }

    /// Like `read_queue`, but the records served come back as one buffer, back to back (a pull
    /// response's body), read and copied with the GIL released: (body, count, next_offset,
    /// min_offset, max_offset, skipped). No Python object per record. `skipped` is as in
    /// `read_queue`; a caller that must cut the body at a skipped unit re-reads with
    /// `read_queue`, which names each record.
    #[pyo3(signature = (topic, queue_id, queue_offset, max_count=32, max_bytes=4*1024*1024, tag_codes=None))]
    #[allow(clippy::too_many_arguments)]
    fn read_queue_body<'py>(
        &self,
        py: Python<'py>,
        topic: &str,
        queue_id: i32,
        queue_offset: u64,
        max_count: usize,
        max_bytes: usize,
        tag_codes: Option<Vec<i64>>,
    ) -> PyResult<QueueBody<'py>> {
        let r = py
            .detach(|| {
                self.inner.read_queue(
                    topic,
                    queue_id,
                    queue_offset,
                    max_count,
                    max_bytes,
                    tag_codes.as_deref(),
                )
            })
            .map_err(to_py)?;
        let len = r.body_len();
        let body = PyBytes::new_with(py, len, |dst| {
            // The records are segment mappings owned by `r`; `dst` is a new bytes object no
            // other thread can see yet: the copy needs no GIL.
            let copied = if len >= DETACH_BODY_COPY_BYTES {
                py.detach(|| r.copy_body_into(dst))
            } else {
                r.copy_body_into(dst)
            };
            if copied {
                Ok(())
            } else {
                Err(PyValueError::new_err(
                    "pull body length changed while copying",
                ))
            }
        })?;
        Ok((
            body,
            r.records.len(),
            r.next_offset,
            r.min_offset,
            r.max_offset,
            r.skipped
                .into_iter()
                .map(|k| (k.queue_offset, k.phys_offset, k.size, k.reason))
                .collect(),
        ))
    }

    /// The quarantined ranges: dicts with offset, size, reason, detected_ms, and topic,
    /// queue_id, queue_offset (None when not known).
    fn quarantined<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyDict>>> {
        let es = self.inner.quarantined().map_err(to_py)?;
        entry_list(py, &es)
    }

    /// Writes good bytes (from a replica) over the quarantined range starting at `offset`,
    /// after checking them; returns the (topic, queue_id, queue_offset) made readable again.
    fn repair_record(
        &self,
        py: Python<'_>,
        offset: u64,
        data: &[u8],
    ) -> PyResult<Vec<(String, i32, u64)>> {
        let refs = py
            .detach(|| self.inner.repair(offset, data))
            .map_err(to_py)?;
        Ok(refs
            .into_iter()
            .map(|r| (r.topic, r.queue_id, r.queue_offset))
            .collect())
    }

    /// Validates the segment holding `offset` from there on, quarantining damaged records;
    /// returns (next offset to scrub, newly quarantined ranges).
    fn scrub<'py>(&self, py: Python<'py>, offset: u64) -> PyResult<(u64, Vec<Bound<'py, PyDict>>)> {
        let (next, added) = py.detach(|| self.inner.scrub(offset)).map_err(to_py)?;
        Ok((next, entry_list(py, &added)?))
    }

    /// Damage and retention counters since open, the quarantine's size and the offsets.
    fn status<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let (st, n, bytes) = self.inner.stats().map_err(to_py)?;
        let d = PyDict::new(py);
        d.set_item("quarantined_records", n)?;
        d.set_item("quarantined_bytes", bytes)?;
        d.set_item("quarantined_total", st.quarantined)?;
        d.set_item("quarantined_at_runtime", st.quarantined_at_runtime)?;
        d.set_item("repaired", st.repaired)?;
        d.set_item("skipped_reads", st.skipped_reads)?;
        d.set_item("cq_mismatches", st.cq_mismatches)?;
        d.set_item("cq_units_repaired", st.cq_units_repaired)?;
        d.set_item("cq_tag_codes_repaired", st.cq_tag_codes_repaired)?;
        d.set_item("retention_segments", st.retention_segments)?;
        d.set_item("cq_queues_retired", st.cq_queues_retired)?;
        d.set_item("cq_retire_failures", st.cq_retire_failures)?;
        d.set_item("retention_bytes", st.retention_bytes)?;
        d.set_item("min_offset", self.inner.min_offset())?;
        d.set_item("max_offset", self.inner.max_offset())?;
        d.set_item("flushed_offset", self.inner.flushed_offset())?;
        d.set_item("confirm_offset", self.inner.confirm_offset())?;
        d.set_item("dispatched_offset", self.inner.dispatched_offset())?;
        d.set_item("flush_error", self.inner.flush_error())?;
        d.set_item("checkpoint_error", self.inner.checkpoint_error())?;
        d.set_item("dispatch_error", self.inner.dispatch_error())?;
        Ok(d)
    }

    /// Starts an EMPTY store at `offset` (a segment boundary): min and max offset become it.
    fn start_at(&self, py: Python<'_>, offset: u64) -> PyResult<()> {
        py.detach(|| self.inner.start_at(offset)).map_err(to_py)
    }

    fn queue_min_offset(&self, topic: &str, queue_id: i32) -> PyResult<u64> {
        self.inner.queue_min_offset(topic, queue_id).map_err(to_py)
    }
    fn queue_max_offset(&self, topic: &str, queue_id: i32) -> PyResult<u64> {
        self.inner.queue_max_offset(topic, queue_id).map_err(to_py)
    }
    /// (physical_offset, size, tag_code) of a consume-queue unit.
    fn queue_unit(&self, topic: &str, queue_id: i32, index: u64) -> PyResult<(u64, u32, i64)> {
        let u = self
            .inner
            .queue_unit(topic, queue_id, index)
            .map_err(to_py)?;
        Ok((u.phys_offset, u.size, u.tag_code))
    }
    fn next_queue_offset(&self, topic: &str, queue_id: i32) -> PyResult<i64> {
        self.inner.next_queue_offset(topic, queue_id).map_err(to_py)
    }
    fn search_offset_by_timestamp(
        &self,
        py: Python<'_>,
        topic: &str,
        queue_id: i32,
        timestamp_ms: i64,
    ) -> PyResult<u64> {
        py.detach(|| {
            self.inner
                .search_offset_by_timestamp(topic, queue_id, timestamp_ms)
        })
        .map_err(to_py)
    }
    fn earliest_store_time(&self, topic: &str, queue_id: i32) -> PyResult<Option<i64>> {
        self.inner
            .earliest_store_time(topic, queue_id)
            .map_err(to_py)
    }
    fn queues(&self) -> PyResult<Vec<(String, i32)>> {
        self.inner.queues().map_err(to_py)
    }
    /// Deletes a topic's messages from its consume queues (a marker record in the commitlog;
    /// queue offsets go on); returns the marker's commitlog offset.
    fn delete_topic(&self, py: Python<'_>, topic: &str) -> PyResult<u64> {
        py.detach(|| self.inner.delete_topic(topic)).map_err(to_py)
    }

    /// Moves the confirm offset (clamped to max) and dispatches up to it.
    fn set_confirm_offset(&self, py: Python<'_>, offset: u64) -> PyResult<u64> {
        py.detach(|| self.inner.set_confirm_offset(offset))
            .map_err(to_py)
    }
    /// Durable truncation of the commitlog and consume queues to `offset`.
    fn truncate_to(&self, py: Python<'_>, offset: u64) -> PyResult<()> {
        py.detach(|| self.inner.truncate_to(offset)).map_err(to_py)
    }
    /// fdatasync in the calling thread (GIL released); returns the flushed offset.
    fn flush(&self, py: Python<'_>) -> PyResult<u64> {
        py.detach(|| self.inner.flush()).map_err(to_py)
    }
    /// Asks the flush thread to make `offset` durable soon (group commit); does not block.
    fn request_flush(&self, offset: u64) {
        self.inner.request_flush(offset)
    }
    /// Blocks (GIL released) until `offset` is durable or the timeout passes.
    fn wait_flushed(&self, py: Python<'_>, offset: u64, timeout_s: f64) -> PyResult<u64> {
        let t = Duration::from_secs_f64(timeout_s.max(0.0));
        py.detach(|| self.inner.wait_flushed(offset, t))
            .map_err(to_py)
    }
    /// Read end of a non-blocking pipe that gets a byte whenever the flushed offset advances.
    fn flush_notify_fd(&self) -> i32 {
        self.inner.flush_notify_fd()
    }
    /// The background flusher's last error, if any.
    fn flush_error(&self) -> Option<String> {
        self.inner.flush_error()
    }
    /// Writes the checkpoint now; returns its fields.
    fn checkpoint<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let c = py.detach(|| self.inner.checkpoint()).map_err(to_py)?;
        let d = PyDict::new(py);
        d.set_item("physic_msg_timestamp", c.physic_msg_timestamp)?;
        d.set_item("logics_msg_timestamp", c.logics_msg_timestamp)?;
        d.set_item("master_flushed_offset", c.master_flushed_offset)?;
        d.set_item("confirm_offset", c.confirm_offset)?;
        d.set_item("dispatched_offset", c.dispatched_offset)?;
        d.set_item("flushed_offset", c.flushed_offset)?;
        Ok(d)
    }
    /// Retention (RocketMQ's deleteExpiredFile): deletes, oldest first, segments last
    /// written more than `reserved_ms` ago (any age with `clean_immediately`), at most
    /// `max_files`, never the last one and only below the flushed and dispatched offsets;
    /// returns the deleted file names. The min offset moves to the first remaining segment.
    /// `keep_from`: never delete a segment that does not end at or below it (what replication
    /// still needs).
    #[pyo3(signature = (reserved_ms, *, clean_immediately=false, max_files=10, keep_from=None))]
    fn delete_expired(
        &self,
        py: Python<'_>,
        reserved_ms: u64,
        clean_immediately: bool,
        max_files: usize,
        keep_from: Option<u64>,
    ) -> PyResult<Vec<String>> {
        py.detach(|| {
            let older = SystemTime::now()
                .checked_sub(Duration::from_millis(reserved_ms))
                .unwrap_or(SystemTime::UNIX_EPOCH);
            self.inner.delete_expired_keeping(
                older,
                clean_immediately,
                max_files,
                keep_from.unwrap_or(u64::MAX),
            )
        })
        .map(|r| r.deleted)
        .map_err(to_py)
    }
    fn delete_segments_before(&self, py: Python<'_>, offset: u64) -> PyResult<Vec<String>> {
        py.detach(|| self.inner.delete_segments_before(offset))
            .map(|r| r.deleted)
            .map_err(to_py)
    }
    fn segment_files(&self) -> PyResult<Vec<(u64, PathBuf)>> {
        self.inner.segment_files().map_err(to_py)
    }
    #[getter]
    fn max_offset(&self) -> u64 {
        self.inner.max_offset()
    }
    #[getter]
    fn min_offset(&self) -> u64 {
        self.inner.min_offset()
    }
    #[getter]
    fn flushed_offset(&self) -> u64 {
        self.inner.flushed_offset()
    }
    #[getter]
    fn committed_offset(&self) -> u64 {
        self.inner.committed_offset()
    }
    #[getter]
    fn confirm_offset(&self) -> u64 {
        self.inner.confirm_offset()
    }
    #[getter]
    fn dispatched_offset(&self) -> u64 {
        self.inner.dispatched_offset()
    }
    #[getter]
    fn closed(&self) -> bool {
        self.inner.is_closed()
    }
    /// Final flush + checkpoint; stops the flush thread. Idempotent.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| self.inner.close()).map_err(to_py)
    }
}

/// The epoch file (epoch -> start offset), with a `.bak` copy.
#[pyclass(frozen, module = "rmq_ha._native")]
struct EpochFile {
    inner: Mutex<RsEpochFile>,
    source: &'static str,
}

impl EpochFile {
    fn with<T>(&self, f: impl FnOnce(&mut RsEpochFile) -> rmq_store::Result<T>) -> PyResult<T> {
        let mut g = self
            .inner
            .lock()
            .map_err(|_| PyValueError::new_err("epoch file lock poisoned"))?;
        f(&mut g).map_err(to_py)
    }
}

#[pymethods]
impl EpochFile {
    #[new]
    fn new(py: Python<'_>, path: PathBuf) -> PyResult<Self> {
        let (f, src) = py.detach(|| RsEpochFile::open(&path)).map_err(to_py)?;
        Ok(EpochFile {
            inner: Mutex::new(f),
            source: match src {
                EpochLoadSource::Main => "main",
                EpochLoadSource::Backup => "backup",
                EpochLoadSource::Fresh => "fresh",
            },
        })
    }
    /// Where the entries were loaded from: "main", "backup" or "fresh".
    #[getter]
    fn source(&self) -> &'static str {
        self.source
    }
    /// [(epoch, start_offset, end_offset)]; the last end is 2**64-1 (open).
    fn entries(&self) -> PyResult<Vec<(u32, u64, u64)>> {
        self.with(|f| {
            Ok(f.entries()
                .into_iter()
                .map(|e| (e.epoch, e.start_offset, e.end_offset))
                .collect())
        })
    }
    fn last_epoch(&self) -> PyResult<Option<u32>> {
        self.with(|f| Ok(f.last_epoch()))
    }
    fn append(&self, py: Python<'_>, epoch: u32, start_offset: u64) -> PyResult<()> {
        py.detach(|| self.with(|f| f.append(epoch, start_offset)))
    }
    fn truncate_suffix_by_epoch(&self, py: Python<'_>, epoch: u32) -> PyResult<()> {
        py.detach(|| self.with(|f| f.truncate_suffix_by_epoch(epoch)))
    }
    fn truncate_suffix_by_offset(&self, py: Python<'_>, offset: u64) -> PyResult<()> {
        py.detach(|| self.with(|f| f.truncate_suffix_by_offset(offset)))
    }
    fn truncate_prefix_by_offset(&self, py: Python<'_>, offset: u64) -> PyResult<()> {
        py.detach(|| self.with(|f| f.truncate_prefix_by_offset(offset)))
    }
    /// Cuts entries starting past `max_offset` and entries wholly below `min_offset` (see
    /// rmq_store::epoch::EpochFile::reconcile); returns (dropped_suffix, dropped_prefix).
    #[allow(clippy::type_complexity)]
    fn reconcile(
        &self,
        py: Python<'_>,
        min_offset: u64,
        max_offset: u64,
    ) -> PyResult<(Vec<(u32, u64)>, Vec<(u32, u64)>)> {
        let r = py.detach(|| self.with(|f| f.reconcile(min_offset, max_offset)))?;
        Ok((r.dropped_suffix, r.dropped_prefix))
    }
    fn find_by_epoch(&self, epoch: u32) -> PyResult<Option<(u32, u64, u64)>> {
        self.with(|f| {
            Ok(f.find_by_epoch(epoch)
                .map(|e| (e.epoch, e.start_offset, e.end_offset)))
        })
    }
    fn find_by_offset(&self, offset: u64) -> PyResult<Option<(u32, u64, u64)>> {
        self.with(|f| {
            Ok(f.find_by_offset(offset)
                .map(|e| (e.epoch, e.start_offset, e.end_offset)))
        })
    }
}

/// Seed 002's truncation point: None when the logs share no (epoch, start) entry.
#[pyfunction]
fn find_consistent_point(
    local: Vec<(u32, u64)>,
    local_max: u64,
    master: Vec<(u32, u64)>,
    master_max: u64,
) -> Option<u64> {
    fcp(&local, local_max, &master, master_max)
}

fn split_record_crc(props: &[u8]) -> (&[u8], Option<u32>) {
    let n = props.len();
    if n >= RECORD_CRC_TRAILER_LEN {
        let t = &props[n - RECORD_CRC_TRAILER_LEN..];
        if t.starts_with(RECORD_CRC_KEY) {
            let digits = std::str::from_utf8(&t[9..19]).ok();
            if let Some(crc) = digits.and_then(|d| d.parse::<u32>().ok()) {
                return (&props[..n - RECORD_CRC_TRAILER_LEN], Some(crc));
            }
        }
    }
    (props, None)
}

/// A stored record (already validated by the store) as RocketMQ clients are served it:
/// without the store's whole-record CRC trailer, TOTALSIZE and PROPERTIESLENGTH to match.
/// Bytes that are not one record with a trailer come back as they are.
#[pyfunction]
fn client_record<'py>(py: Python<'py>, data: &[u8]) -> Bound<'py, PyBytes> {
    PyBytes::new(py, &rmq_wire::message::client_record(data))
}

/// Decodes one stored record (validating it) into a dict; for tests and tools.
#[pyfunction]
fn decode_stored_record<'py>(py: Python<'py>, data: &[u8]) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    match decode_record(data) {
        Ok(Decoded::Record(r)) => {
            d.set_item("total_size", r.total_size())?;
            d.set_item("queue_id", r.queue_id)?;
            d.set_item("flag", r.flag)?;
            d.set_item("queue_offset", r.queue_offset)?;
            d.set_item("physical_offset", r.physical_offset)?;
            d.set_item("sys_flag", r.sys_flag)?;
            d.set_item("born_timestamp", r.born_timestamp)?;
            d.set_item("born_host", r.born_host.to_string())?;
            d.set_item("store_timestamp", r.store_timestamp)?;
            d.set_item("store_host", r.store_host.to_string())?;
            d.set_item("reconsume_times", r.reconsume_times)?;
            d.set_item("prepared_txn_offset", r.prepared_txn_offset)?;
            d.set_item("body", PyBytes::new(py, r.body))?;
            d.set_item("topic", String::from_utf8_lossy(r.topic).into_owned())?;
            // The whole-record CRC trailer is storage framing, not a user property.
            let (props, crc) = split_record_crc(r.properties);
            d.set_item("properties", PyBytes::new(py, props))?;
            d.set_item("record_crc", crc)?;
            Ok(d)
        }
        Ok(Decoded::Blank(n)) => {
            d.set_item("blank", n)?;
            Ok(d)
        }
        Err(e) => Err(CorruptRecordError::new_err((e.to_string(), 0u64))),
    }
}

pyo3::import_exception!(rmq_ha.errors, RemotingDecodeError);

/// Message properties (`name\x01value\x02`...), as the client's `decode_properties`: UTF-8
/// with replacement, items without a separator or empty ones ignored, a later name wins.
fn properties_dict<'py>(py: Python<'py>, props: &[u8]) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for item in props.split(|&b| b == 2) {
        if let Some(sep) = item.iter().position(|&b| b == 1) {
            d.set_item(
                String::from_utf8_lossy(&item[..sep]),
                String::from_utf8_lossy(&item[sep + 1..]),
            )?;
        }
    }
    Ok(d)
}

/// Decodes a whole PULL_MESSAGE body (stored records back to back) in one call: one tuple per
/// message (end-of-segment blanks skipped), (topic, body, properties dict, queue_id,
/// queue_offset, physical_offset, store_host, born_host, born_timestamp, store_timestamp,
/// reconsume_times, sys_flag, flag), each record validated; the whole-record CRC trailer is
/// not a property. `RemotingDecodeError` (with the byte position) on a bad size or
/// a bad record.
#[pyfunction]
fn decode_pull_body<'py>(py: Python<'py>, body: &[u8]) -> PyResult<Vec<Bound<'py, PyTuple>>> {
    let mut out = Vec::new();
    let mut pos = 0usize;
    while pos + 4 <= body.len() {
        let size = u32::from_be_bytes([body[pos], body[pos + 1], body[pos + 2], body[pos + 3]]);
        if size == 0 || pos + size as usize > body.len() {
            let msg = format!("pull body: bad record size {size} at {pos}");
            return Err(RemotingDecodeError::new_err((msg, pos)));
        }
        let end = pos + size as usize;
        match decode_record(&body[pos..end]) {
            Ok(Decoded::Record(r)) => {
                let topic = String::from_utf8_lossy(r.topic).into_owned();
                let (props, _) = split_record_crc(r.properties);
                // (topic, body, properties, queue_id, queue_offset, physical_offset,
                // store_host, born_host, born_timestamp, store_timestamp, reconsume_times,
                // sys_flag, flag)
                let items: [Bound<'py, PyAny>; 13] = [
                    topic.into_pyobject(py)?.into_any(),
                    PyBytes::new(py, r.body).into_any(),
                    properties_dict(py, props)?.into_any(),
                    r.queue_id.into_pyobject(py)?.into_any(),
                    r.queue_offset.into_pyobject(py)?.into_any(),
                    r.physical_offset.into_pyobject(py)?.into_any(),
                    r.store_host.to_string().into_pyobject(py)?.into_any(),
                    r.born_host.to_string().into_pyobject(py)?.into_any(),
                    r.born_timestamp.into_pyobject(py)?.into_any(),
                    r.store_timestamp.into_pyobject(py)?.into_any(),
                    r.reconsume_times.into_pyobject(py)?.into_any(),
                    r.sys_flag.into_pyobject(py)?.into_any(),
                    r.flag.into_pyobject(py)?.into_any(),
                ];
                out.push(PyTuple::new(py, items)?);
            }
            Ok(Decoded::Blank(_)) => {}
            Err(e) => {
                let msg = format!("pull body: bad record at {pos}: {e}");
                return Err(RemotingDecodeError::new_err((msg, pos)));
            }
        }
        pos = end;
    }
    Ok(out)
}

/// The benchmark baseline: `batches` sequential writes of `batch_bytes` to a new file, with
/// fdatasync after every batch (sync) or every `interval_ms` (async). Returns seconds taken.
#[pyfunction]
#[pyo3(signature = (path, batch_bytes, batches, every_batch, interval_ms=500))]
fn baseline_sequential_write(
    py: Python<'_>,
    path: PathBuf,
    batch_bytes: usize,
    batches: u64,
    every_batch: bool,
    interval_ms: u64,
) -> PyResult<(u64, f64, u64)> {
    let cadence = if every_batch {
        SyncCadence::EveryBatch
    } else {
        SyncCadence::Interval(Duration::from_millis(interval_ms))
    };
    let r = py
        .detach(|| sequential_write(&path, batch_bytes, batches, cadence))
        .map_err(to_py)?;
    Ok((r.bytes, r.seconds, r.syncs))
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Message>()?;
    m.add_class::<StoreBuffer>()?;
    m.add_class::<AppendResult>()?;
    m.add_class::<Store>()?;
    m.add_class::<EpochFile>()?;
    m.add_function(wrap_pyfunction!(find_consistent_point, m)?)?;
    m.add_function(wrap_pyfunction!(decode_stored_record, m)?)?;
    m.add_function(wrap_pyfunction!(client_record, m)?)?;
    m.add_function(wrap_pyfunction!(decode_pull_body, m)?)?;
    m.add_function(wrap_pyfunction!(baseline_sequential_write, m)?)?;
    remoting::register(m)?;
    send::register(m)?;
    ha::register(m)?;
    replica::register(m)?;
    m.add("TRANSACTION_PREPARED_TYPE", 0x4)?;
    m.add("TRANSACTION_COMMIT_TYPE", 0x8)?;
    m.add("TRANSACTION_ROLLBACK_TYPE", 0xC)?;
    m.add("TOPIC_DELETED", rmq_store::store::TOPIC_DELETED)?;
    Ok(())
}
