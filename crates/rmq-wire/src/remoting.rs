//! RocketMQ's remoting frame codec (every request and response on a broker/namesrv/client
//! connection), big-endian.
//!
//! ```text
//! total_len i32 (not counting itself) | ser_type u8 | header_len u24 | header | body
//! body_len = total_len - 4 - header_len
//! ```
//!
//! The header is either JSON (`ser_type` 0, the default of Java clients) or the ROCKETMQ binary
//! layout (`ser_type` 1):
//!
//! ```text
//! code i16 | language u8 | version i16 | opaque i32 | flag i32 |
//! remark_len i32 + remark | ext_len i32 + ext_len bytes of (key_len i16 + key, val_len i32 + val)
//! ```
//!
//! Decisions where the two serializations (or Java and Python) disagree:
//! - **Empty body** — a body of length 0 decodes as `None` (Java does the same), so `Some(b"")`
//!   comes back as `None`.
//! - **Empty extFields** — an empty map decodes as `None` in both serializations (Java's binary
//!   decoder does the same; the Python side treats `None` and `{}` alike).
//! - **Binary remark** — length 0 means null (RocketMQ's rule), so `Some("")` comes back as
//!   `None` from a binary header. JSON keeps `""`.
//! - **Binary extFields values (and keys) of length 0** are kept as `""` instead of becoming
//!   null: dropping the entry would lose that the key was sent, and JSON can carry `""` anyway.
//!   (A Java broker would see null there, i.e. an absent header field.)
//! - **Duplicate extFields keys** are kept in order; whoever builds a map from them lets the last
//!   one win (as Java's `HashMap` does).
//! - **Binary header** — the fields must fill `header_len` exactly: every length beyond its
//!   region and any trailing byte are errors (no encoder writes them).
//! - **JSON header** — read leniently: unknown keys are ignored (`serializeTypeCurrentRPC`
//!   too), absent or null fields take their defaults (`code` is required), integers may be
//!   given as decimal strings, `language` as its name or its number (an unknown name is
//!   `OTHER`), and extFields values that are numbers, booleans, arrays or objects become their
//!   JSON text; null values drop the entry. Written canonically: keys sorted as fastjson does,
//!   null fields omitted, `"serializeTypeCurrentRPC":"JSON"` included.
//! - **Strings** must be valid UTF-8 (Java would substitute U+FFFD; we reject the frame).
//! - **Frame size** — [`MAX_FRAME_LEN`] bounds the whole frame *including* its 4-byte length
//!   field, as Netty's `LengthFieldBasedFrameDecoder` (RocketMQ's `frameMaxLength`) does. The
//!   check fires as soon as the length field is readable.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::Value;

/// Largest frame accepted or written, counting the 4-byte length field (RocketMQ's default
/// `com.rocketmq.remoting.frameMaxLength`, 16 MiB).
pub const MAX_FRAME_LEN: usize = 16 * 1024 * 1024;
/// `ser_type` of a JSON header.
pub const SERIALIZE_JSON: u8 = 0;
/// `ser_type` of a ROCKETMQ binary header.
pub const SERIALIZE_ROCKETMQ: u8 = 1;
/// Flag bit: the frame is a response.
pub const FLAG_RESPONSE: i32 = 1;
/// Flag bit: the request is oneway (no response).
pub const FLAG_ONEWAY: i32 = 2;
/// `LanguageCode` of Java (the default when a JSON header has none).
pub const LANGUAGE_JAVA: u8 = 0;
/// `LanguageCode` OTHER, which unknown language names decode to.
pub const LANGUAGE_OTHER: u8 = 7;
/// Fixed part of the binary header (code .. flag, remark_len, ext_len).
pub const BINARY_FIXED_LEN: usize = 2 + 1 + 2 + 4 + 4 + 4 + 4;
/// Largest header length the 24-bit field can carry.
pub const MAX_HEADER_LEN: usize = 0xFF_FFFF;

/// `LanguageCode` names, indexed by code.
pub const LANGUAGE_NAMES: [&str; 14] = [
    "JAVA", "CPP", "DOTNET", "PYTHON", "DELPHI", "ERLANG", "RUBY", "OTHER", "HTTP", "GO", "PHP",
    "OMS", "RUST", "NODE_JS",
];

/// The name of a language code, if it has one.
pub fn language_name(code: u8) -> Option<&'static str> {
    LANGUAGE_NAMES.get(usize::from(code)).copied()
}

/// The code of a language name, if known.
pub fn language_code(name: &str) -> Option<u8> {
    LANGUAGE_NAMES
        .iter()
        .position(|n| *n == name)
        .and_then(|i| u8::try_from(i).ok())
}

/// One remoting command. `body` borrows from the decoded buffer (or from the caller's data when
/// encoding).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Frame<'a> {
    pub code: i32,
    pub language: u8,
    pub version: i32,
    pub opaque: i32,
    pub flag: i32,
    pub remark: Option<String>,
    pub ext_fields: Option<Vec<(String, String)>>,
    pub body: Option<Cow<'a, [u8]>>,
    /// [`SERIALIZE_JSON`] or [`SERIALIZE_ROCKETMQ`]: how the header is (to be) serialized.
    pub ser_type: u8,
}

impl Frame<'_> {
    /// The same frame owning its body.
    pub fn into_owned(self) -> Frame<'static> {
        Frame {
            body: self.body.map(|b| Cow::Owned(b.into_owned())),
            code: self.code,
            language: self.language,
            version: self.version,
            opaque: self.opaque,
            flag: self.flag,
            remark: self.remark,
            ext_fields: self.ext_fields,
            ser_type: self.ser_type,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RemotingError {
    #[error("frame length {0} is negative")]
    NegativeFrameLength(i32),
    #[error("frame length {0} is below the minimum of 4")]
    FrameTooShort(i32),
    #[error("frame of {len} bytes exceeds the maximum of {max}")]
    FrameTooLong { len: u64, max: usize },
    #[error("header length {header_len} exceeds the {available} bytes left in the frame")]
    HeaderLenOutOfFrame { header_len: usize, available: usize },
    #[error("unknown serialize type {0}")]
    UnknownSerializeType(u8),
    #[error("bad JSON header: {0}")]
    Json(String),
    #[error("binary header: {field} needs {need} bytes, {have} left")]
    Truncated {
        field: &'static str,
        need: usize,
        have: usize,
    },
    #[error("binary header: negative length {len} for {field}")]
    NegativeLength { field: &'static str, len: i32 },
    #[error("{0} is not valid UTF-8")]
    InvalidUtf8(&'static str),
    #[error("binary header: {0} bytes after the last field")]
    TrailingHeaderBytes(usize),
    #[error("{field} = {value} does not fit the binary header's {width}")]
    OutOfRange {
        field: &'static str,
        value: i64,
        width: &'static str,
    },
    #[error("header of {0} bytes exceeds the 24-bit header length")]
    HeaderTooLarge(usize),
}

/// A decode failure inside a buffer: `offset` is where the bad frame starts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("frame at byte {offset}: {error}")]
pub struct FrameError {
    pub offset: usize,
    pub error: RemotingError,
}

fn be_i32(b: &[u8]) -> Option<i32> {
    Some(i32::from_be_bytes(b.get(..4)?.try_into().ok()?))
}

/// Decodes the frame at the start of `buf`: `Ok(None)` when it is not complete yet, else the
/// frame and its size on the wire. Malformed input fails as soon as it is visible (an oversize
/// or negative length from the first 4 bytes alone).
pub fn decode_frame(
    buf: &[u8],
    max_frame_len: usize,
) -> Result<Option<(Frame<'_>, usize)>, RemotingError> {
    let Some(total) = be_i32(buf) else {
        return Ok(None);
    };
    if total < 0 {
        return Err(RemotingError::NegativeFrameLength(total));
    }
    if total < 4 {
        return Err(RemotingError::FrameTooShort(total));
    }
    let size = total as u64 + 4;
    if size > max_frame_len as u64 {
        return Err(RemotingError::FrameTooLong {
            len: size,
            max: max_frame_len,
        });
    }
    let size = size as usize;
    let Some(frame) = buf.get(..size) else {
        return Ok(None);
    };
    let word = u32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
    let ser_type = (word >> 24) as u8;
    let header_len = (word & 0xFF_FFFF) as usize;
    let available = size - 8;
    if header_len > available {
        return Err(RemotingError::HeaderLenOutOfFrame {
            header_len,
            available,
        });
    }
    let header = &frame[8..8 + header_len];
    let body = &frame[8 + header_len..];
    let mut f = match ser_type {
        SERIALIZE_JSON => decode_json_header(header)?,
        SERIALIZE_ROCKETMQ => decode_binary_header(header)?,
        other => return Err(RemotingError::UnknownSerializeType(other)),
    };
    f.ser_type = ser_type;
    f.body = (!body.is_empty()).then_some(Cow::Borrowed(body));
    Ok(Some((f, size)))
}

/// Decodes every complete frame of `buf` (at most [`MAX_FRAME_LEN`] each); returns them and the
/// bytes they took. A partial frame at the end is left for the next call.
pub fn decode_frames(buf: &[u8]) -> Result<(Vec<Frame<'_>>, usize), FrameError> {
    decode_frames_with_limit(buf, MAX_FRAME_LEN)
}

/// [`decode_frames`] with another frame size limit.
pub fn decode_frames_with_limit(
    buf: &[u8],
    max_frame_len: usize,
) -> Result<(Vec<Frame<'_>>, usize), FrameError> {
    let mut frames = Vec::new();
    let mut pos = 0;
    while let Some(rest) = buf.get(pos..) {
        match decode_frame(rest, max_frame_len) {
            Ok(Some((f, n))) => {
                frames.push(f);
                pos += n;
            }
            Ok(None) => break,
            Err(error) => return Err(FrameError { offset: pos, error }),
        }
    }
    Ok((frames, pos))
}

// ---------------------------------------------------------------------------------------------
// ROCKETMQ binary header

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, field: &'static str) -> Result<&'a [u8], RemotingError> {
        let have = self.buf.len() - self.pos;
        if n > have {
            return Err(RemotingError::Truncated {
                field,
                need: n,
                have,
            });
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
    fn u8(&mut self, field: &'static str) -> Result<u8, RemotingError> {
        Ok(self.take(1, field)?[0])
    }
    fn i16(&mut self, field: &'static str) -> Result<i16, RemotingError> {
        let b = self.take(2, field)?;
        Ok(i16::from_be_bytes([b[0], b[1]]))
    }
    fn i32(&mut self, field: &'static str) -> Result<i32, RemotingError> {
        let b = self.take(4, field)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn len(&mut self, len: i32, field: &'static str) -> Result<&'a [u8], RemotingError> {
        let n = usize::try_from(len).map_err(|_| RemotingError::NegativeLength { field, len })?;
        self.take(n, field)
    }
    fn rest(&self) -> usize {
        self.buf.len() - self.pos
    }
}

fn utf8(b: &[u8], field: &'static str) -> Result<String, RemotingError> {
    std::str::from_utf8(b)
        .map(str::to_owned)
        .map_err(|_| RemotingError::InvalidUtf8(field))
}

fn decode_binary_header(h: &[u8]) -> Result<Frame<'static>, RemotingError> {
    let mut r = Reader { buf: h, pos: 0 };
    let code = i32::from(r.i16("code")?);
    let language = r.u8("language")?;
    let version = i32::from(r.i16("version")?);
    let opaque = r.i32("opaque")?;
    let flag = r.i32("flag")?;
    let n = r.i32("remark length")?;
    let remark = r.len(n, "remark")?;
    let remark = if remark.is_empty() {
        None
    } else {
        Some(utf8(remark, "remark")?)
    };
    let n = r.i32("extFields length")?;
    let ext = r.len(n, "extFields")?;
    let ext_fields = if ext.is_empty() {
        None
    } else {
        let mut e = Reader { buf: ext, pos: 0 };
        let mut out = Vec::new();
        while e.rest() > 0 {
            let kl = e.i16("extFields key length")?;
            let key = e.len(i32::from(kl), "extFields key")?;
            let vl = e.i32("extFields value length")?;
            let val = e.len(vl, "extFields value")?;
            out.push((utf8(key, "extFields key")?, utf8(val, "extFields value")?));
        }
        Some(out)
    };
    if r.rest() > 0 {
        return Err(RemotingError::TrailingHeaderBytes(r.rest()));
    }
    Ok(Frame {
        code,
        language,
        version,
        opaque,
        flag,
        remark,
        ext_fields,
        body: None,
        ser_type: SERIALIZE_ROCKETMQ,
    })
}

fn fit_i16(field: &'static str, v: i32) -> Result<i16, RemotingError> {
    i16::try_from(v).map_err(|_| RemotingError::OutOfRange {
        field,
        value: i64::from(v),
        width: "i16",
    })
}

fn len_i32(field: &'static str, n: usize) -> Result<i32, RemotingError> {
    i32::try_from(n).map_err(|_| RemotingError::OutOfRange {
        field,
        value: n as i64,
        width: "i32",
    })
}

fn encode_binary_header(f: &Frame<'_>, out: &mut Vec<u8>) -> Result<(), RemotingError> {
    out.extend_from_slice(&fit_i16("code", f.code)?.to_be_bytes());
    out.push(f.language);
    out.extend_from_slice(&fit_i16("version", f.version)?.to_be_bytes());
    out.extend_from_slice(&f.opaque.to_be_bytes());
    out.extend_from_slice(&f.flag.to_be_bytes());
    let remark = f.remark.as_deref().unwrap_or("").as_bytes();
    out.extend_from_slice(&len_i32("remark length", remark.len())?.to_be_bytes());
    out.extend_from_slice(remark);
    let ext_at = out.len();
    out.extend_from_slice(&[0; 4]);
    for (k, v) in f.ext_fields.iter().flatten() {
        let kl = i16::try_from(k.len()).map_err(|_| RemotingError::OutOfRange {
            field: "extFields key length",
            value: k.len() as i64,
            width: "i16",
        })?;
        out.extend_from_slice(&kl.to_be_bytes());
        out.extend_from_slice(k.as_bytes());
        out.extend_from_slice(&len_i32("extFields value length", v.len())?.to_be_bytes());
        out.extend_from_slice(v.as_bytes());
    }
    let ext_len = len_i32("extFields length", out.len() - ext_at - 4)?;
    out[ext_at..ext_at + 4].copy_from_slice(&ext_len.to_be_bytes());
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// JSON header

fn push_json_str(out: &mut Vec<u8>, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(b'"');
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let esc: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x08 => b"\\b",
            0x0C => b"\\f",
            0..=0x1F => b"",
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..i]);
        if esc.is_empty() {
            out.extend_from_slice(b"\\u00");
            out.push(HEX[usize::from(b >> 4)]);
            out.push(HEX[usize::from(b & 0xF)]);
        } else {
            out.extend_from_slice(esc);
        }
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

fn push_int(out: &mut Vec<u8>, v: i64) {
    out.extend_from_slice(v.to_string().as_bytes());
}

/// Keys in fastjson's (sorted) order; null fields (and an empty extFields) omitted.
fn encode_json_header(f: &Frame<'_>, out: &mut Vec<u8>) {
    out.extend_from_slice(b"{\"code\":");
    push_int(out, i64::from(f.code));
    if let Some(ext) = f.ext_fields.as_ref().filter(|e| !e.is_empty()) {
        out.extend_from_slice(b",\"extFields\":{");
        for (i, (k, v)) in ext.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            push_json_str(out, k);
            out.push(b':');
            push_json_str(out, v);
        }
        out.push(b'}');
    }
    out.extend_from_slice(b",\"flag\":");
    push_int(out, i64::from(f.flag));
    out.extend_from_slice(b",\"language\":");
    match language_name(f.language) {
        Some(name) => push_json_str(out, name),
        None => push_int(out, i64::from(f.language)),
    }
    out.extend_from_slice(b",\"opaque\":");
    push_int(out, i64::from(f.opaque));
    if let Some(r) = &f.remark {
        out.extend_from_slice(b",\"remark\":");
        push_json_str(out, r);
    }
    out.extend_from_slice(b",\"serializeTypeCurrentRPC\":\"JSON\",\"version\":");
    push_int(out, i64::from(f.version));
    out.push(b'}');
}

enum Key {
    Code,
    Language,
    Version,
    Opaque,
    Flag,
    Remark,
    ExtFields,
    Other,
}

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Key;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a header field name")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Key, E> {
                Ok(match s {
                    "code" => Key::Code,
                    "language" => Key::Language,
                    "version" => Key::Version,
                    "opaque" => Key::Opaque,
                    "flag" => Key::Flag,
                    "remark" => Key::Remark,
                    "extFields" => Key::ExtFields,
                    _ => Key::Other,
                })
            }
        }
        d.deserialize_identifier(V)
    }
}

/// extFields: an object whose values are turned into strings (null drops the entry).
struct ExtFields(Option<Vec<(String, String)>>);

impl<'de> Deserialize<'de> for ExtFields {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ExtFields;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object or null")
            }
            fn visit_unit<E: de::Error>(self) -> Result<ExtFields, E> {
                Ok(ExtFields(None))
            }
            fn visit_none<E: de::Error>(self) -> Result<ExtFields, E> {
                Ok(ExtFields(None))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ExtFields, A::Error> {
                let mut out = Vec::new();
                while let Some((k, v)) = map.next_entry::<String, Value>()? {
                    let v = match v {
                        Value::Null => continue,
                        Value::String(s) => s,
                        other => other.to_string(),
                    };
                    out.push((k, v));
                }
                Ok(ExtFields(Some(out)))
            }
        }
        d.deserialize_any(V)
    }
}

struct JsonHeader(Frame<'static>);

fn int_field<E: de::Error>(field: &'static str, v: &Value) -> Result<Option<i32>, E> {
    let n = match v {
        Value::Null => return Ok(None),
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.trim().parse::<i64>().ok(),
        _ => None,
    };
    let n = n.ok_or_else(|| E::custom(format_args!("{field}: {v} is not an integer")))?;
    i32::try_from(n)
        .map(Some)
        .map_err(|_| E::custom(format_args!("{field}: {n} does not fit i32")))
}

fn language_field<E: de::Error>(v: &Value) -> Result<Option<u8>, E> {
    match v {
        Value::String(s) if s.trim().parse::<i64>().is_err() => {
            Ok(Some(language_code(s).unwrap_or(LANGUAGE_OTHER)))
        }
        _ => match int_field::<E>("language", v)? {
            None => Ok(None),
            Some(n) => u8::try_from(n)
                .map(Some)
                .map_err(|_| E::custom(format_args!("language: {n} is not a language code"))),
        },
    }
}

impl<'de> Deserialize<'de> for JsonHeader {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = JsonHeader;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a remoting header object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<JsonHeader, A::Error> {
                let mut code = None;
                let mut f = Frame {
                    ser_type: SERIALIZE_JSON,
                    ..Frame::default()
                };
                while let Some(key) = map.next_key::<Key>()? {
                    match key {
                        Key::Code => code = int_field("code", &map.next_value::<Value>()?)?,
                        Key::Language => {
                            f.language = language_field(&map.next_value::<Value>()?)?
                                .unwrap_or(LANGUAGE_JAVA);
                        }
                        Key::Version => {
                            f.version =
                                int_field("version", &map.next_value::<Value>()?)?.unwrap_or(0);
                        }
                        Key::Opaque => {
                            f.opaque =
                                int_field("opaque", &map.next_value::<Value>()?)?.unwrap_or(0);
                        }
                        Key::Flag => {
                            f.flag = int_field("flag", &map.next_value::<Value>()?)?.unwrap_or(0);
                        }
                        Key::Remark => {
                            f.remark = match map.next_value::<Value>()? {
                                Value::Null => None,
                                Value::String(s) => Some(s),
                                other => Some(other.to_string()),
                            };
                        }
                        Key::ExtFields => f.ext_fields = map.next_value::<ExtFields>()?.0,
                        Key::Other => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                f.code = code.ok_or_else(|| de::Error::missing_field("code"))?;
                if f.ext_fields.as_ref().is_some_and(Vec::is_empty) {
                    f.ext_fields = None;
                }
                Ok(JsonHeader(f))
            }
        }
        d.deserialize_map(V)
    }
}

fn decode_json_header(h: &[u8]) -> Result<Frame<'static>, RemotingError> {
    serde_json::from_slice::<JsonHeader>(h)
        .map(|j| j.0)
        .map_err(|e| RemotingError::Json(e.to_string()))
}

// ---------------------------------------------------------------------------------------------
// Encoding

/// Appends `f` to `out` as one frame, with the header serialized as `f.ser_type` says; returns
/// the frame's size. On error `out` is left as it was.
pub fn encode_frame_into(f: &Frame<'_>, out: &mut Vec<u8>) -> Result<usize, RemotingError> {
    let body = f.body.as_deref().unwrap_or(&[]);
    let size = encode_frame_head(f, body.len(), out)?;
    out.extend_from_slice(body);
    Ok(size)
}

/// Appends everything of `f`'s frame but its body (the length fields, which count a body of
/// `body_len` bytes, and the header), for callers that write the body themselves; `f.body` is
/// not looked at. Returns the size of the whole frame. On error `out` is left as it was.
pub fn encode_frame_head(
    f: &Frame<'_>,
    body_len: usize,
    out: &mut Vec<u8>,
) -> Result<usize, RemotingError> {
    let start = out.len();
    let r = encode_head_unchecked(f, body_len, out);
    if r.is_err() {
        out.truncate(start);
    }
    r
}

fn encode_head_unchecked(
    f: &Frame<'_>,
    body_len: usize,
    out: &mut Vec<u8>,
) -> Result<usize, RemotingError> {
    let start = out.len();
    out.extend_from_slice(&[0; 8]);
    match f.ser_type {
        SERIALIZE_JSON => encode_json_header(f, out),
        SERIALIZE_ROCKETMQ => encode_binary_header(f, out)?,
        other => return Err(RemotingError::UnknownSerializeType(other)),
    }
    let header_len = out.len() - start - 8;
    if header_len > MAX_HEADER_LEN {
        return Err(RemotingError::HeaderTooLarge(header_len));
    }
    let size = 8 + header_len as u64 + body_len as u64;
    if size > MAX_FRAME_LEN as u64 {
        return Err(RemotingError::FrameTooLong {
            len: size,
            max: MAX_FRAME_LEN,
        });
    }
    // Both fit: size <= MAX_FRAME_LEN (16 MiB) and header_len <= 24 bits.
    let total = (size - 4) as u32;
    out[start..start + 4].copy_from_slice(&total.to_be_bytes());
    let word = (u32::from(f.ser_type) << 24) | header_len as u32;
    out[start + 4..start + 8].copy_from_slice(&word.to_be_bytes());
    Ok(size as usize)
}

/// Encodes just the header of `f` (as it appears inside a frame).
pub fn encode_header(f: &Frame<'_>) -> Result<Vec<u8>, RemotingError> {
    let mut out = Vec::new();
    match f.ser_type {
        SERIALIZE_JSON => encode_json_header(f, &mut out),
        SERIALIZE_ROCKETMQ => encode_binary_header(f, &mut out)?,
        other => return Err(RemotingError::UnknownSerializeType(other)),
    }
    Ok(out)
}

/// Encodes `frames` back to back into one buffer (one write for many commands).
pub fn encode_frames<'f, 'a: 'f>(
    frames: impl IntoIterator<Item = &'f Frame<'a>>,
) -> Result<Vec<u8>, RemotingError> {
    let mut out = Vec::new();
    for f in frames {
        encode_frame_into(f, &mut out)?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn route_request(ser_type: u8) -> Frame<'static> {
        Frame {
            code: 105,
            language: LANGUAGE_JAVA,
            version: 479,
            opaque: 7,
            flag: 0,
            remark: None,
            ext_fields: Some(vec![("topic".into(), "T".into())]),
            body: None,
            ser_type,
        }
    }

    #[test]
    fn json_vector_is_byte_exact() {
        let header = br#"{"code":105,"extFields":{"topic":"T"},"flag":0,"language":"JAVA","opaque":7,"serializeTypeCurrentRPC":"JSON","version":479}"#;
        let mut expected = Vec::new();
        expected.extend_from_slice(&(4 + header.len() as i32).to_be_bytes());
        expected.extend_from_slice(&(header.len() as u32).to_be_bytes());
        expected.extend_from_slice(header);
        let f = route_request(SERIALIZE_JSON);
        let enc = encode_frames([&f]).expect("encode");
        assert_eq!(enc, expected);
        let (frames, n) = decode_frames(&enc).expect("decode");
        assert_eq!(n, enc.len());
        assert_eq!(frames, vec![f]);
    }

    #[test]
    fn binary_vector_is_byte_exact() {
        #[rustfmt::skip]
        let expected: Vec<u8> = vec![
            0, 0, 0, 37,             // total_len = 4 + 33
            1, 0, 0, 33,             // ROCKETMQ, header_len 33
            0, 105,                  // code
            0,                       // JAVA
            0x01, 0xDF,              // version 479
            0, 0, 0, 7,              // opaque
            0, 0, 0, 0,              // flag
            0, 0, 0, 0,              // remark_len
            0, 0, 0, 12,             // ext_len
            0, 5, b't', b'o', b'p', b'i', b'c',
            0, 0, 0, 1, b'T',
        ];
        let f = route_request(SERIALIZE_ROCKETMQ);
        let enc = encode_frames([&f]).expect("encode");
        assert_eq!(enc, expected);
        let (frames, n) = decode_frames(&enc).expect("decode");
        assert_eq!(n, enc.len());
        assert_eq!(frames, vec![f]);
    }

    #[test]
    fn lenient_json() {
        let header = br#" {"code":"12","language":9,"weird":[1,{"x":null}],"remark":3,
            "extFields":{"a":1,"b":true,"c":null,"d":{"e":[1]},"f":"g"},"opaque":-1,
            "serializeTypeCurrentRPC":"ROCKETMQ","flag":null} "#;
        let f = decode_json_header(header).expect("lenient");
        assert_eq!(f.code, 12);
        assert_eq!(f.language, 9);
        assert_eq!(f.opaque, -1);
        assert_eq!(f.flag, 0);
        assert_eq!(f.version, 0);
        assert_eq!(f.remark.as_deref(), Some("3"));
        let ext = f.ext_fields.expect("ext");
        let want: Vec<(String, String)> =
            [("a", "1"), ("b", "true"), ("d", r#"{"e":[1]}"#), ("f", "g")]
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
        assert_eq!(ext, want);
        let f = decode_json_header(br#"{"code":1,"language":"KLINGON"}"#).expect("unknown name");
        assert_eq!(f.language, LANGUAGE_OTHER);
        assert_eq!(f.ext_fields, None);
        let f = decode_json_header(br#"{"code":1,"extFields":{}}"#).expect("empty ext");
        assert_eq!(f.ext_fields, None);
    }

    #[test]
    fn json_errors() {
        for bad in [
            &br#"{"language":"JAVA"}"#[..],
            br#"{"code":1.5}"#,
            br#"{"code":4294967296}"#,
            br#"{"code":"x"}"#,
            br#"{"code":1,"language":300}"#,
            br#"{"code":1,"extFields":[1]}"#,
            br#"[1]"#,
            br#"{"code":1} x"#,
            br#"{"code":1"#,
            b"",
            b"{\"code\":1,\"remark\":\"\xff\"}",
        ] {
            assert!(
                matches!(decode_json_header(bad), Err(RemotingError::Json(_))),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    fn frame_bytes(ser: u8, header: &[u8], body: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&((4 + header.len() + body.len()) as i32).to_be_bytes());
        v.extend_from_slice(&((u32::from(ser) << 24) | header.len() as u32).to_be_bytes());
        v.extend_from_slice(header);
        v.extend_from_slice(body);
        v
    }

    #[test]
    fn frame_errors() {
        let e = |b: &[u8]| decode_frames(b).map(|_| ()).map_err(|e| e.error);
        assert_eq!(
            e(&(-1i32).to_be_bytes()),
            Err(RemotingError::NegativeFrameLength(-1))
        );
        assert_eq!(e(&3i32.to_be_bytes()), Err(RemotingError::FrameTooShort(3)));
        let big = (MAX_FRAME_LEN as i32 - 3).to_be_bytes();
        assert!(matches!(e(&big), Err(RemotingError::FrameTooLong { .. })));
        // The largest allowed frame only waits for more bytes.
        let ok = (MAX_FRAME_LEN as i32 - 4).to_be_bytes();
        assert_eq!(decode_frames(&ok), Ok((vec![], 0)));
        let mut b = frame_bytes(0, br#"{"code":1}"#, b"");
        b[7] += 1; // header_len beyond the frame
        assert!(matches!(
            e(&b),
            Err(RemotingError::HeaderLenOutOfFrame { .. })
        ));
        assert_eq!(
            e(&frame_bytes(2, b"", b"")),
            Err(RemotingError::UnknownSerializeType(2))
        );
        // Binary: truncated fixed part, negative and oversized lengths, bad UTF-8, trailing.
        let good = encode_header(&route_request(SERIALIZE_ROCKETMQ)).expect("h");
        assert!(matches!(
            e(&frame_bytes(1, &good[..20], b"")),
            Err(RemotingError::Truncated { .. })
        ));
        let mut h = good.clone();
        h[13..17].copy_from_slice(&(-1i32).to_be_bytes());
        assert!(matches!(
            e(&frame_bytes(1, &h, b"")),
            Err(RemotingError::NegativeLength {
                field: "remark",
                ..
            })
        ));
        let mut h = good.clone();
        h[17..21].copy_from_slice(&13i32.to_be_bytes());
        assert!(matches!(
            e(&frame_bytes(1, &h, b"")),
            Err(RemotingError::Truncated {
                field: "extFields",
                ..
            })
        ));
        let mut h = good.clone();
        h[21..23].copy_from_slice(&(-2i16).to_be_bytes());
        assert!(matches!(
            e(&frame_bytes(1, &h, b"")),
            Err(RemotingError::NegativeLength { .. })
        ));
        let mut h = good.clone();
        h[23..25].copy_from_slice(&[0xC3, 0x28]);
        assert_eq!(
            e(&frame_bytes(1, &h, b"")),
            Err(RemotingError::InvalidUtf8("extFields key"))
        );
        let mut h = good.clone();
        h.push(0);
        assert_eq!(
            e(&frame_bytes(1, &h, b"")),
            Err(RemotingError::TrailingHeaderBytes(1))
        );
        // The error names the offset of the bad frame.
        let mut two = encode_frames([&route_request(0)]).expect("enc");
        let at = two.len();
        two.extend_from_slice(&frame_bytes(0, b"{}", b""));
        assert_eq!(decode_frames(&two).map_err(|e| e.offset), Err(at));
    }

    #[test]
    fn encode_errors() {
        let mut f = route_request(SERIALIZE_ROCKETMQ);
        f.code = 40000;
        assert!(matches!(
            encode_frames([&f]),
            Err(RemotingError::OutOfRange { field: "code", .. })
        ));
        f.code = 1;
        f.ser_type = 5;
        assert_eq!(
            encode_frames([&f]),
            Err(RemotingError::UnknownSerializeType(5))
        );
        let mut out = vec![9];
        f.ser_type = 0;
        f.body = Some(Cow::Owned(vec![0; MAX_FRAME_LEN]));
        assert!(matches!(
            encode_frame_into(&f, &mut out),
            Err(RemotingError::FrameTooLong { .. })
        ));
        assert_eq!(out, vec![9]);
    }

    #[test]
    fn empty_values_and_language_numbers() {
        let f = Frame {
            code: -3,
            language: 200,
            remark: Some(String::new()),
            ext_fields: Some(vec![("".into(), "".into()), ("k".into(), "".into())]),
            body: Some(Cow::Borrowed(b"")),
            ser_type: SERIALIZE_JSON,
            ..Frame::default()
        };
        let enc = encode_frames([&f]).expect("enc");
        let (d, _) = decode_frames(&enc).expect("dec");
        assert_eq!(d[0].language, 200);
        assert_eq!(d[0].remark.as_deref(), Some(""));
        assert_eq!(d[0].ext_fields, f.ext_fields);
        assert_eq!(d[0].body, None);
        let f = Frame {
            ser_type: SERIALIZE_ROCKETMQ,
            ..f
        };
        let enc = encode_frames([&f]).expect("enc");
        let (d, _) = decode_frames(&enc).expect("dec");
        assert_eq!(d[0].remark, None);
        assert_eq!(d[0].ext_fields, f.ext_fields);
        assert_eq!(encode_frames(&d).expect("re-enc"), enc);
    }

    fn arb_string() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-zA-Z0-9_]{0,12}",
            any::<String>(),
            "[\"\\\\\u{0}-\u{1f}é€😀]{0,6}",
        ]
    }

    prop_compose! {
        fn arb_frame()(
            ser_type in 0u8..2,
            code in any::<i16>(),
            language in any::<u8>(),
            version in any::<i16>(),
            opaque in any::<i32>(),
            flag in any::<i32>(),
            remark in proptest::option::of(arb_string()),
            ext in proptest::option::of(proptest::collection::vec((arb_string(), arb_string()), 0..6)),
            body in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..200)),
            wide in any::<(i32, i32)>(),
        ) -> Frame<'static> {
            let json = ser_type == SERIALIZE_JSON;
            Frame {
                code: if json { wide.0 } else { i32::from(code) },
                language,
                version: if json { wide.1 } else { i32::from(version) },
                opaque,
                flag,
                remark,
                ext_fields: ext,
                body: body.map(Cow::Owned),
                ser_type,
            }
        }
    }

    /// What a frame looks like after a trip over the wire.
    fn normalized(mut f: Frame<'static>) -> Frame<'static> {
        if f.body.as_ref().is_some_and(|b| b.is_empty()) {
            f.body = None;
        }
        if f.ext_fields.as_ref().is_some_and(Vec::is_empty) {
            f.ext_fields = None;
        }
        if f.ser_type == SERIALIZE_ROCKETMQ && f.remark.as_deref() == Some("") {
            f.remark = None;
        }
        f
    }

    proptest! {
        #[test]
        fn roundtrip(frames in proptest::collection::vec(arb_frame(), 0..5)) {
            let enc = encode_frames(&frames).expect("encode");
            let (dec, n) = decode_frames(&enc).expect("decode");
            prop_assert_eq!(n, enc.len());
            let want: Vec<_> = frames.into_iter().map(normalized).collect();
            prop_assert_eq!(&dec, &want);
            // Canonical: the decoded frames encode to the same bytes.
            prop_assert_eq!(encode_frames(&dec).expect("re-encode"), enc);
        }

        #[test]
        fn incremental_feeding(frames in proptest::collection::vec(arb_frame(), 1..4),
                               cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..4)) {
            let enc = encode_frames(&frames).expect("encode");
            let (whole, _) = decode_frames(&enc).expect("decode");
            let whole: Vec<_> = whole.into_iter().map(Frame::into_owned).collect();
            // Every single split point, then a few random multi-way splits.
            let mut splits: Vec<Vec<usize>> = (0..=enc.len()).map(|i| vec![i]).collect();
            let mut multi: Vec<usize> = cuts.iter().map(|c| c.index(enc.len() + 1)).collect();
            multi.sort_unstable();
            splits.push(multi);
            for points in splits {
                let mut acc: Vec<u8> = Vec::new();
                let mut got = Vec::new();
                let mut last = 0;
                for &p in points.iter().chain(std::iter::once(&enc.len())) {
                    acc.extend_from_slice(&enc[last..p]);
                    last = p;
                    let (fs, n) = decode_frames(&acc).expect("partial decode");
                    got.extend(fs.into_iter().map(Frame::into_owned));
                    acc.drain(..n);
                }
                prop_assert!(acc.is_empty());
                prop_assert_eq!(&got, &whole);
            }
        }

        #[test]
        fn random_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = decode_frames(&data);
            let _ = decode_frames_with_limit(&data, 64);
        }

        #[test]
        fn mutated_frames_never_panic(frames in proptest::collection::vec(arb_frame(), 1..3),
                                      edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8)) {
            let mut enc = encode_frames(&frames).expect("encode");
            for (at, b) in edits {
                let i = at.index(enc.len());
                enc[i] = b;
            }
            if let Ok((fs, n)) = decode_frames(&enc) {
                prop_assert!(n <= enc.len());
                for f in &fs {
                    // Whatever decodes re-encodes and decodes to itself.
                    let again = encode_frames([f]).expect("re-encode");
                    let (d, m) = decode_frames(&again).expect("re-decode");
                    prop_assert_eq!(m, again.len());
                    prop_assert_eq!(&d[0], f);
                }
            }
        }
    }
}
