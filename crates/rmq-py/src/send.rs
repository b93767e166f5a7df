//! `SendPath`: the native send path (rmq_wire::send) on the broker's store. One `process` call
//! per received buffer: the frames it answers are appended (one store append, the GIL
//! released) and answered in the returned bytes; the rest come back as wire tuples for the
//! Python dispatcher, exactly as `decode_frames` returns them.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};

use rmq_store::store::Store as RsStore;
use rmq_wire::message::MessageIn;
use rmq_wire::remoting::MAX_FRAME_LEN;
use rmq_wire::send::{process, Appender, Placed, SendConfig, SendState, TopicEntry};

use crate::remoting::{decode_err, frame_list, Data};
use crate::{ConfigError, Store};

struct StoreAppender<'s>(&'s RsStore);

impl Appender for StoreAppender<'_> {
    fn append(&mut self, msgs: &[MessageIn<'_>]) -> Result<Vec<Placed>, String> {
        self.0
            .append_batch(msgs)
            .map(|placed| {
                placed
                    .into_iter()
                    .map(|p| Placed {
                        physical_offset: p.physical_offset,
                        size: p.size,
                        queue_offset: p.queue_offset,
                    })
                    .collect()
            })
            .map_err(|e| e.to_string())
    }
}

/// (fallback wire tuples, bytes consumed, encoded responses or None, touched queues,
/// per-topic (topic, messages, body bytes, size-bucket counts), answered
/// (request code, response code, count), end offset of the append or 0, deferred
/// (SEND_OK wire tuple, end offset to wait for, wait wanted, request code) when `defer`).
type Processed<'py> = (
    Bound<'py, PyList>,
    usize,
    Option<Bound<'py, PyBytes>>,
    Vec<(String, i32)>,
    Vec<(String, u64, u64, Vec<u64>)>,
    Vec<(i32, i32, u64)>,
    u64,
    Vec<(Bound<'py, PyAny>, u64, bool, i32)>,
);

/// The native send path of one broker (see rmq_wire::send for what it answers and what it
/// hands back).
#[pyclass(frozen, module = "rmq_ha._native")]
pub(crate) struct SendPath {
    store: Py<Store>,
    state: Mutex<SendState>,
    messages: AtomicU64,
    requests: AtomicU64,
    handed_back: AtomicU64,
}

fn store_host(s: &str) -> PyResult<(IpAddr, u16)> {
    s.parse::<SocketAddr>()
        .map(|a| (a.ip(), a.port()))
        .map_err(|_| {
            ConfigError::new_err((
                format!("bad config store_host: {s:?} is not ip:port (an IP literal)"),
                "store_host",
            ))
        })
}

impl SendPath {
    fn lock(&self) -> PyResult<std::sync::MutexGuard<'_, SendState>> {
        self.state
            .lock()
            .map_err(|_| PyValueError::new_err("SendPath state poisoned"))
    }
}

#[pymethods]
impl SendPath {
    #[new]
    #[pyo3(signature = (store, store_host, *, max_message_size, size_buckets, cluster=String::new()))]
    fn new(
        store: Py<Store>,
        store_host: &str,
        max_message_size: usize,
        size_buckets: Vec<u64>,
        cluster: String,
    ) -> PyResult<Self> {
        let (ip, port) = self::store_host(store_host)?;
        if size_buckets.windows(2).any(|w| w[0] >= w[1]) {
            return Err(PyValueError::new_err(
                "size_buckets must be strictly ascending",
            ));
        }
        Ok(SendPath {
            store,
            state: Mutex::new(SendState {
                table: HashMap::new(),
                cfg: SendConfig {
                    max_message_size,
                    store_ip: ip,
                    store_port: port,
                    size_buckets,
                    cluster,
                },
                rng: 0x2545_F491_4F6C_DD1D,
                defer: false,
            }),
            messages: AtomicU64::new(0),
            requests: AtomicU64::new(0),
            handed_back: AtomicU64::new(0),
        })
    }

    /// Replaces the topic table: `[(topic, write_queue_nums, read_queue_nums, perm), ...]` of
    /// the topics the native path may store to (the others are Python's).
    fn set_topics(&self, topics: Vec<(String, i32, i32, i32)>) -> PyResult<()> {
        let table = topics
            .into_iter()
            .map(|(t, write_queue_nums, read_queue_nums, perm)| {
                (
                    t,
                    TopicEntry {
                        write_queue_nums,
                        read_queue_nums,
                        perm,
                    },
                )
            })
            .collect();
        self.lock()?.table = table;
        Ok(())
    }

    /// `maxMessageSize` changed (UPDATE_BROKER_CONFIG).
    fn set_max_message_size(&self, max_message_size: usize) -> PyResult<()> {
        self.lock()?.cfg.max_message_size = max_message_size;
        Ok(())
    }

    /// Totals since creation: messages stored, requests answered, send requests handed back.
    fn counters(&self) -> (u64, u64, u64) {
        (
            self.messages.load(Ordering::Relaxed),
            self.requests.load(Ordering::Relaxed),
            self.handed_back.load(Ordering::Relaxed),
        )
    }

    /// Handles every complete frame of `buf` (see the module docs); `peer` is the born host
    /// ("ip:port"; anything else hands every frame back), `enabled` false hands every frame
    /// back. `defer`: the stored requests are not answered but returned for the caller to
    /// answer after its flush / replication wait. Raises `RemotingDecodeError` on a malformed
    /// frame (nothing appended then).
    #[pyo3(signature = (buf, peer, enabled, max_frame_len=MAX_FRAME_LEN, *, defer=false))]
    fn process<'py>(
        &self,
        py: Python<'py>,
        buf: &Bound<'py, PyAny>,
        peer: &str,
        enabled: bool,
        max_frame_len: usize,
        defer: bool,
    ) -> PyResult<Processed<'py>> {
        let data = Data::from_py(buf)?;
        let bytes: &[u8] = data.as_slice();
        let born = peer.parse::<SocketAddr>().ok();
        let enabled = enabled && born.is_some();
        let born = born.unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 0)));
        let store = &self.store.get().inner;
        let state = &self.state;
        let result = py.detach(|| {
            let mut st = state.lock().map_err(|_| None)?;
            st.defer = defer;
            let mut app = StoreAppender(store);
            process(bytes, max_frame_len, enabled, &mut st, born, &mut app).map_err(Some)
        });
        let o = result.map_err(|e| match e {
            Some(e) => decode_err(e.to_string(), e.offset),
            None => PyValueError::new_err("SendPath state poisoned"),
        })?;
        let stored: u64 = o.topics.iter().map(|(_, s)| s.messages).sum();
        let answered: u64 = o.answered.iter().map(|a| a.2).sum::<u64>() + o.deferred.len() as u64;
        let back = o
            .fallback
            .iter()
            .filter(|f| matches!(f.code, 10 | 310 | 320) && f.flag & 1 == 0)
            .count() as u64;
        self.messages.fetch_add(stored, Ordering::Relaxed);
        self.requests.fetch_add(answered, Ordering::Relaxed);
        self.handed_back.fetch_add(back, Ordering::Relaxed);
        let responses = (!o.responses.is_empty()).then(|| PyBytes::new(py, &o.responses));
        let waits: Vec<(u64, bool, i32)> = o
            .deferred
            .iter()
            .map(|d| (d.end_offset, d.wait, d.request_code))
            .collect();
        let tuples = frame_list(py, o.deferred.into_iter().map(|d| d.response).collect())?;
        let deferred = tuples
            .iter()
            .zip(waits)
            .map(|(t, (end, wait, code))| (t, end, wait, code))
            .collect();
        let topics = o
            .topics
            .into_iter()
            .map(|(t, s)| (t, s.messages, s.bytes, s.buckets))
            .collect();
        Ok((
            frame_list(py, o.fallback)?,
            o.consumed,
            responses,
            o.touched,
            topics,
            o.answered,
            o.end_offset,
            deferred,
        ))
    }
}

/// `props` with the properties the broker puts on every stored message (rmq_wire::send::stamp:
/// MSG_REGION, TRACE_ON and CLUSTER): the Python send path stamps with the native path's code.
#[pyfunction]
fn stamp_properties<'py>(py: Python<'py>, props: &[u8], cluster: &str) -> Bound<'py, PyBytes> {
    PyBytes::new(py, &rmq_wire::send::stamp(props, cluster))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<SendPath>()?;
    m.add_function(wrap_pyfunction!(stamp_properties, m)?)?;
    Ok(())
}
