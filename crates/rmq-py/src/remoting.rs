//! The remoting frame codec and the SEND_BATCH_MESSAGE body codec, on plain tuples (the wire
//! tuple of `rmq_ha.protocol.command`): one call per receive buffer or per coalesced write.

use std::borrow::Cow;

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};

use rmq_wire::batch::{decode_batch, encode_batch, BatchEntry, BatchError};
use rmq_wire::remoting::{decode_frames_with_limit, encode_frame_head, Frame, MAX_FRAME_LEN};

pyo3::import_exception!(rmq_ha.errors, RemotingDecodeError);

/// Above this many bytes, `encode_frames` copies the bodies with the GIL released.
const DETACH_COPY_BYTES: usize = 1 << 20;

/// Bytes borrowed from a `bytes` object, or copied out of any other buffer (a `bytearray` or
/// `memoryview` may change under us while we hold the GIL only intermittently, so those are
/// copied once).
pub(crate) enum Data<'py> {
    Bytes(Bound<'py, PyBytes>),
    Owned(Vec<u8>),
}

impl<'py> Data<'py> {
    pub(crate) fn from_py(obj: &Bound<'py, PyAny>) -> PyResult<Self> {
        if let Ok(b) = obj.cast::<PyBytes>() {
            return Ok(Data::Bytes(b.clone()));
        }
        let buf = PyBuffer::<u8>::get(obj)?;
        Ok(Data::Owned(buf.to_vec(obj.py())?))
    }
    pub(crate) fn as_slice(&self) -> &[u8] {
        match self {
            Data::Bytes(b) => b.as_bytes(),
            Data::Owned(v) => v,
        }
    }
}

pub(crate) fn decode_err(msg: String, offset: usize) -> PyErr {
    RemotingDecodeError::new_err((msg, offset))
}

/// Decodes every complete frame of `buf`: `([wire tuple, ...], bytes consumed)`. A partial
/// frame at the end is not consumed. Raises `RemotingDecodeError` on malformed input.
#[pyfunction]
#[pyo3(signature = (buf, max_frame_len=MAX_FRAME_LEN))]
fn decode_frames<'py>(
    py: Python<'py>,
    buf: &Bound<'py, PyAny>,
    max_frame_len: usize,
) -> PyResult<(Bound<'py, PyList>, usize)> {
    let data = Data::from_py(buf)?;
    let (frames, consumed) = decode_frames_with_limit(data.as_slice(), max_frame_len)
        .map_err(|e| decode_err(e.to_string(), e.offset))?;
    Ok((frame_list(py, frames)?, consumed))
}

/// Decoded frames as a list of wire tuples.
pub(crate) fn frame_list<'py>(
    py: Python<'py>,
    frames: Vec<Frame<'_>>,
) -> PyResult<Bound<'py, PyList>> {
    let mut items = Vec::with_capacity(frames.len());
    for f in frames {
        let ext = match f.ext_fields {
            None => None,
            Some(fields) => {
                let d = PyDict::new(py);
                for (k, v) in fields {
                    d.set_item(k, v)?;
                }
                Some(d)
            }
        };
        let body = f.body.map(|b| PyBytes::new(py, &b));
        let t = (
            f.code, f.language, f.version, f.opaque, f.flag, f.remark, ext, body, f.ser_type,
        )
            .into_pyobject(py)?;
        items.push(t);
    }
    PyList::new(py, items)
}

type WireIn<'py> = (
    i32,
    u8,
    i32,
    i32,
    i32,
    Option<String>,
    Option<Bound<'py, PyDict>>,
    Option<Bound<'py, PyAny>>,
    u8,
);

/// Encodes wire tuples back to back into one `bytes` (one write for many commands). Each
/// header is serialized as its tuple's serialize_type says. ValueError when a field does not
/// fit its serialization (e.g. a binary-header code outside i16) or a frame is too large.
#[pyfunction]
fn encode_frames<'py>(
    py: Python<'py>,
    frames: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyBytes>> {
    let mut heads: Vec<u8> = Vec::new();
    // (end of this frame's head in `heads`, its body)
    let mut parts: Vec<(usize, Option<Data<'py>>)> = Vec::new();
    let mut total = 0usize;
    for item in frames.try_iter()? {
        let item = item?;
        let (code, language, version, opaque, flag, remark, ext, body, ser_type): WireIn<'py> =
            item.extract()?;
        let ext_fields = match ext {
            None => None,
            Some(d) => {
                let mut v = Vec::with_capacity(d.len());
                for (k, val) in d.iter() {
                    v.push((k.extract::<String>()?, val.extract::<String>()?));
                }
                Some(v)
            }
        };
        let body = body.map(|b| Data::from_py(&b)).transpose()?;
        let body_len = body.as_ref().map_or(0, |b| b.as_slice().len());
        let f = Frame {
            code,
            language,
            version,
            opaque,
            flag,
            remark,
            ext_fields,
            body: None::<Cow<'_, [u8]>>,
            ser_type,
        };
        let size = encode_frame_head(&f, body_len, &mut heads)
            .map_err(|e| PyValueError::new_err(format!("frame {}: {e}", parts.len())))?;
        total += size;
        parts.push((heads.len(), body));
    }
    let slices: Vec<(&[u8], &[u8])> = {
        let mut start = 0;
        parts
            .iter()
            .map(|(end, body)| {
                let head = &heads[start..*end];
                start = *end;
                (head, body.as_ref().map_or(&[][..], |b| b.as_slice()))
            })
            .collect()
    };
    let copy = |dst: &mut [u8]| {
        let mut at = 0;
        for (head, body) in &slices {
            dst[at..at + head.len()].copy_from_slice(head);
            at += head.len();
            dst[at..at + body.len()].copy_from_slice(body);
            at += body.len();
        }
    };
    PyBytes::new_with(py, total, |dst| {
        if total >= DETACH_COPY_BYTES {
            // The sources are our own buffers and immutable `bytes` objects we hold references
            // to, so they can be read without the GIL.
            py.detach(|| copy(dst));
        } else {
            copy(dst);
        }
        Ok(())
    })
}

fn batch_err(e: BatchError) -> PyErr {
    let offset = match e {
        BatchError::Truncated { offset, .. }
        | BatchError::SizeMismatch { offset, .. }
        | BatchError::NegativeLength { offset, .. }
        | BatchError::CrcMismatch { offset, .. } => offset,
        BatchError::PropertiesTooLong { .. } | BatchError::EntryTooLarge { .. } => 0,
    };
    decode_err(format!("batch body: {e}"), offset)
}

/// Decodes a SEND_BATCH_MESSAGE body: `[(flag, body, properties), ...]`. Raises
/// `RemotingDecodeError` on a malformed body.
#[pyfunction]
fn decode_batch_body<'py>(
    py: Python<'py>,
    data: &Bound<'py, PyAny>,
) -> PyResult<Vec<Bound<'py, PyTuple>>> {
    let data = Data::from_py(data)?;
    let entries = decode_batch(data.as_slice()).map_err(batch_err)?;
    entries
        .iter()
        .map(|e| {
            (
                e.flag,
                PyBytes::new(py, e.body),
                PyBytes::new(py, e.properties),
            )
                .into_pyobject(py)
        })
        .collect()
}

/// Encodes `[(flag, body, properties), ...]` as a SEND_BATCH_MESSAGE body. ValueError when a
/// message's properties exceed 32767 bytes.
#[pyfunction]
fn encode_batch_body<'py>(
    py: Python<'py>,
    messages: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyBytes>> {
    let mut owned: Vec<(i32, Data<'py>, Data<'py>)> = Vec::new();
    for item in messages.try_iter()? {
        let (flag, body, props): (i32, Bound<'py, PyAny>, Bound<'py, PyAny>) = item?.extract()?;
        owned.push((flag, Data::from_py(&body)?, Data::from_py(&props)?));
    }
    let entries: Vec<BatchEntry<'_>> = owned
        .iter()
        .map(|(flag, body, props)| BatchEntry {
            flag: *flag,
            body: body.as_slice(),
            properties: props.as_slice(),
        })
        .collect();
    let out = encode_batch(&entries).map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok(PyBytes::new(py, &out))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(decode_frames, m)?)?;
    m.add_function(wrap_pyfunction!(encode_frames, m)?)?;
    m.add_function(wrap_pyfunction!(decode_batch_body, m)?)?;
    m.add_function(wrap_pyfunction!(encode_batch_body, m)?)?;
    m.add("MAX_FRAME_LEN", MAX_FRAME_LEN)?;
    Ok(())
}
