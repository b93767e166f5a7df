//! Small durable-file helpers shared by the store's files.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::Path;

use crate::error::{IoContext, Result};

/// fsyncs a directory so that renames, creations and deletions in it are durable.
pub fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir).at(dir)?.sync_all().at(dir)
}

/// Writes `data` to `path` atomically: temp file, fsync, rename, fsync of the directory.
pub fn write_atomic(path: &Path, data: &[u8]) -> Result<()> {
    // A bare file name has the parent "": that is the current directory.
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let mut tmp_name = path.file_name().unwrap_or_default().to_os_string();
    tmp_name.push(".tmp");
    let tmp = dir.join(tmp_name);
    let written = OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .open(&tmp)
        .and_then(|mut f| {
            f.write_all(data)?;
            f.sync_all()
        })
        .at(&tmp);
    if let Err(e) = written {
        // a half-written temp file would hold space a full disk needs back; the old file at
        // `path` is untouched
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    fs::rename(&tmp, path).at(path)?;
    sync_dir(dir)
}

/// Reads a file, mapping "not found" to `Ok(None)`.
pub fn read_optional(path: &Path) -> Result<Option<Vec<u8>>> {
    match fs::read(path) {
        Ok(d) => Ok(Some(d)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(crate::StoreError::Io {
            path: path.to_path_buf(),
            source: e,
        }),
    }
}
