//! The HA replication records (`rmq_wire::ha`) on plain tuples: encoders for each record and
//! one buffering stream decoder per direction. Malformed input raises
//! `rmq_ha.errors.RemotingDecodeError(message, offset)`, `offset` counting from the first byte
//! ever fed to that decoder; a decoder that failed keeps failing (the stream cannot be resynced).
//! No GIL release: the records are small and the decoders copy only what they buffer.

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};

use rmq_wire::ha::{
    decode_master_packets_with_limit, decode_slave_packets, encode_master_handshake,
    encode_slave_ack, encode_slave_handshake, encode_transfer_header, EpochEntry, HaError, HaState,
    HaStreamError, MasterPacket, SlaveHandshake, SlavePacket, TransferHeader, MAX_TRANSFER_BODY,
};

pyo3::import_exception!(rmq_ha.errors, RemotingDecodeError);

fn encode_err(e: HaError) -> PyErr {
    PyValueError::new_err(e.to_string())
}

/// An offset argument: ValueError when negative.
fn offset_arg(name: &str, v: i64) -> PyResult<u64> {
    u64::try_from(v).map_err(|_| PyValueError::new_err(format!("{name} is negative ({v})")))
}

/// Calls `f` with the bytes of `obj` (borrowed from a `bytes`, else copied out of the buffer).
fn with_bytes<T>(obj: &Bound<'_, PyAny>, f: impl FnOnce(&[u8]) -> PyResult<T>) -> PyResult<T> {
    if let Ok(b) = obj.cast::<PyBytes>() {
        return f(b.as_bytes());
    }
    let buf = PyBuffer::<u8>::get(obj)?;
    let owned = buf.to_vec(obj.py())?;
    f(&owned)
}

/// The 16-byte slave handshake.
#[pyfunction]
#[pyo3(name = "encode_slave_handshake")]
fn encode_slave_handshake_py<'py>(
    py: Python<'py>,
    sync_from_last_file: bool,
    async_learner: bool,
    broker_id: i64,
) -> Bound<'py, PyBytes> {
    let h = SlaveHandshake {
        sync_from_last_file,
        async_learner,
        broker_id,
    };
    PyBytes::new(py, &encode_slave_handshake(&h))
}

/// The 12-byte slave ack (its max commitlog offset). ValueError when negative.
#[pyfunction]
#[pyo3(name = "encode_slave_ack")]
fn encode_slave_ack_py<'py>(py: Python<'py>, max_offset: i64) -> PyResult<Bound<'py, PyBytes>> {
    let b = encode_slave_ack(offset_arg("max_offset", max_offset)?).map_err(encode_err)?;
    Ok(PyBytes::new(py, &b))
}

/// The master handshake with every `(epoch, start_offset)` entry (20 + 12n bytes). ValueError
/// on a negative offset or more than 1,000,000 entries.
#[pyfunction]
#[pyo3(name = "encode_master_handshake")]
fn encode_master_handshake_py<'py>(
    py: Python<'py>,
    max_offset: i64,
    last_epoch: i32,
    entries: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyBytes>> {
    let mut es = Vec::with_capacity(entries.len().unwrap_or(0));
    for item in entries.try_iter()? {
        let (epoch, start): (i32, i64) = item?.extract()?;
        es.push(EpochEntry {
            epoch,
            start_offset: offset_arg("start_offset", start)?,
        });
    }
    let b = encode_master_handshake(offset_arg("max_offset", max_offset)?, last_epoch, &es)
        .map_err(encode_err)?;
    Ok(PyBytes::new(py, &b))
}

/// The 36-byte transfer header for a body of `body_size` bytes (sent right after it).
/// ValueError on a negative offset or size, or a size above 2**31 - 1.
#[pyfunction]
#[pyo3(name = "encode_transfer_header")]
fn encode_transfer_header_py<'py>(
    py: Python<'py>,
    offset: i64,
    epoch: i32,
    epoch_start_offset: i64,
    confirm_offset: i64,
    body_size: i64,
) -> PyResult<Bound<'py, PyBytes>> {
    let h = TransferHeader {
        offset: offset_arg("offset", offset)?,
        epoch,
        epoch_start_offset: offset_arg("epoch_start_offset", epoch_start_offset)?,
        confirm_offset: offset_arg("confirm_offset", confirm_offset)?,
    };
    let size = usize::try_from(body_size)
        .map_err(|_| PyValueError::new_err(format!("body_size is negative ({body_size})")))?;
    let b = encode_transfer_header(&h, size).map_err(encode_err)?;
    Ok(PyBytes::new(py, &b))
}

/// Bytes not yet decoded, the stream position of their first byte, and a sticky failure.
#[derive(Default)]
struct Stream {
    buf: Vec<u8>,
    /// Bytes consumed before `buf[0]`.
    position: u64,
    failed: Option<(String, u64)>,
}

impl Stream {
    /// The undecoded bytes, handed over; the stream goes on after them.
    fn take<'py>(&mut self, py: Python<'py>) -> Bound<'py, PyBytes> {
        let b = std::mem::take(&mut self.buf);
        self.position += b.len() as u64;
        PyBytes::new(py, &b)
    }

    /// Appends `data` and runs `decode` over everything buffered; `decode` returns how many
    /// bytes it consumed. Only the leftover is copied when nothing was buffered before.
    fn feed<T>(
        &mut self,
        data: &[u8],
        decode: impl FnOnce(&[u8]) -> Result<(T, usize), HaStreamError>,
    ) -> PyResult<T> {
        if let Some((msg, at)) = &self.failed {
            return Err(RemotingDecodeError::new_err((msg.clone(), *at)));
        }
        let direct = self.buf.is_empty();
        if !direct {
            self.buf.extend_from_slice(data);
        }
        let input: &[u8] = if direct { data } else { &self.buf };
        match decode(input) {
            Ok((out, n)) => {
                if direct {
                    self.buf.extend_from_slice(&data[n..]);
                } else {
                    self.buf.drain(..n);
                }
                self.position += n as u64;
                Ok(out)
            }
            Err(e) => {
                let at = self.position + e.offset as u64;
                let msg = format!("HA record at stream byte {at}: {}", e.error);
                self.failed = Some((msg.clone(), at));
                self.buf = Vec::new();
                Err(RemotingDecodeError::new_err((msg, at)))
            }
        }
    }
}

/// Decodes what a master receives from a slave. `feed` returns the complete records:
/// `("handshake", sync_from_last_file, async_learner, broker_id)` or `("ack", max_offset)`.
#[pyclass(module = "rmq_ha._native")]
struct HaMasterSideDecoder {
    stream: Stream,
}

#[pymethods]
impl HaMasterSideDecoder {
    #[new]
    fn new() -> Self {
        HaMasterSideDecoder {
            stream: Stream::default(),
        }
    }

    fn feed<'py>(
        &mut self,
        py: Python<'py>,
        data: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyList>> {
        let stream = &mut self.stream;
        let items = with_bytes(data, |bytes| {
            stream.feed(bytes, |buf| {
                let (packets, n) = decode_slave_packets(buf)?;
                Ok((slave_items(py, &packets), n))
            })?
        })?;
        PyList::new(py, items)
    }

    /// Bytes of an incomplete record waiting for more.
    #[getter]
    fn buffered(&self) -> usize {
        self.stream.buf.len()
    }

    /// Hands over the bytes of an incomplete record (to `HaMasterLoop`) and empties the buffer.
    fn take_buffered<'py>(&mut self, py: Python<'py>) -> Bound<'py, PyBytes> {
        self.stream.take(py)
    }
}

fn slave_items<'py>(
    py: Python<'py>,
    packets: &[SlavePacket],
) -> PyResult<Vec<Bound<'py, PyTuple>>> {
    packets
        .iter()
        .map(|p| match p {
            SlavePacket::Handshake(h) => (
                intern!(py, "handshake"),
                h.sync_from_last_file,
                h.async_learner,
                h.broker_id,
            )
                .into_pyobject(py),
            SlavePacket::Ack { max_offset } => (intern!(py, "ack"), *max_offset).into_pyobject(py),
        })
        .collect()
}

/// Decodes what a slave receives from its master. `feed` returns the complete records:
/// `("handshake", max_offset, last_epoch, [(epoch, start_offset), ...])` or
/// `("transfer", offset, epoch, epoch_start_offset, confirm_offset, body)`; a transfer body
/// larger than `max_body` fails.
#[pyclass(module = "rmq_ha._native")]
struct HaSlaveSideDecoder {
    stream: Stream,
    max_body: usize,
}

#[pymethods]
impl HaSlaveSideDecoder {
    #[new]
    #[pyo3(signature = (max_body=MAX_TRANSFER_BODY))]
    fn new(max_body: usize) -> Self {
        HaSlaveSideDecoder {
            stream: Stream::default(),
            max_body,
        }
    }

    fn feed<'py>(
        &mut self,
        py: Python<'py>,
        data: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyList>> {
        let max_body = self.max_body;
        let stream = &mut self.stream;
        let items = with_bytes(data, |bytes| {
            stream.feed(bytes, |buf| {
                let (packets, n) = decode_master_packets_with_limit(buf, max_body)?;
                Ok((master_items(py, &packets), n))
            })?
        })?;
        PyList::new(py, items)
    }

    /// Bytes of an incomplete record waiting for more.
    #[getter]
    fn buffered(&self) -> usize {
        self.stream.buf.len()
    }

    /// Hands over the bytes of an incomplete record (to `HaSlaveLoop`) and empties the buffer.
    fn take_buffered<'py>(&mut self, py: Python<'py>) -> Bound<'py, PyBytes> {
        self.stream.take(py)
    }
}

fn master_items<'py>(
    py: Python<'py>,
    packets: &[MasterPacket<'_>],
) -> PyResult<Vec<Bound<'py, PyTuple>>> {
    packets
        .iter()
        .map(|p| match p {
            MasterPacket::Handshake(h) => {
                let entries: Vec<(i32, u64)> = h
                    .entries
                    .iter()
                    .map(|e| (e.epoch, e.start_offset))
                    .collect();
                (
                    intern!(py, "handshake"),
                    h.max_offset,
                    h.last_epoch,
                    PyList::new(py, entries)?,
                )
                    .into_pyobject(py)
            }
            MasterPacket::Transfer { header, body } => (
                intern!(py, "transfer"),
                header.offset,
                header.epoch,
                header.epoch_start_offset,
                header.confirm_offset,
                PyBytes::new(py, body),
            )
                .into_pyobject(py),
        })
        .collect()
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(encode_slave_handshake_py, m)?)?;
    m.add_function(wrap_pyfunction!(encode_slave_ack_py, m)?)?;
    m.add_function(wrap_pyfunction!(encode_master_handshake_py, m)?)?;
    m.add_function(wrap_pyfunction!(encode_transfer_header_py, m)?)?;
    m.add_class::<HaMasterSideDecoder>()?;
    m.add_class::<HaSlaveSideDecoder>()?;
    for s in HaState::ALL {
        m.add(format!("HA_{}", s.name()), s.code())?;
    }
    Ok(())
}
