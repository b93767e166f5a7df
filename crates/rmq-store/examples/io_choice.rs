//! Measures the two ways the commitlog could write a segment: positioned writes (`pwrite`)
//! into a sparse file, or copies into a writable shared mapping of it, each followed by one
//! fdatasync/msync of everything. The figures behind the choice in commitlog.rs (docs/PERF.md).
//!
//! `cargo run --release -p rmq-store --example io_choice -- [DIR] [MIB] [BATCH_KIB] [ROUNDS]`

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::time::Instant;

fn sync_all_dirty() {
    // SAFETY: sync(2) takes no arguments and cannot fail.
    unsafe { libc::sync() };
}

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let dir = PathBuf::from(args.get(1).cloned().unwrap_or_else(|| "/tmp".into()));
    let mib: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(256);
    let batch_kib: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(70);
    let rounds: usize = args.get(4).and_then(|s| s.parse().ok()).unwrap_or(3);
    let size = mib << 20;
    let batch: Vec<u8> = (0..batch_kib << 10).map(|i| (i % 251) as u8).collect();
    let n = size as usize / batch.len();
    let mut results: Vec<(&str, Vec<f64>)> = vec![("pwrite", vec![]), ("mmap", vec![])];
    for _ in 0..rounds {
        for (name, out) in results.iter_mut() {
            let path = dir.join(format!("io-choice-{name}.seg"));
            let f = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .open(&path)?;
            f.set_len(size)?;
            sync_all_dirty();
            let t = Instant::now();
            if *name == "pwrite" {
                for i in 0..n {
                    f.write_all_at(&batch, (i * batch.len()) as u64)?;
                }
                f.sync_data()?;
            } else {
                // SAFETY: the file was just created by us at `size` bytes and nothing else maps
                // or truncates it while the mapping lives.
                let mut m = unsafe { memmap2::MmapOptions::new().len(size as usize).map_mut(&f)? };
                for i in 0..n {
                    let at = i * batch.len();
                    m[at..at + batch.len()].copy_from_slice(&batch);
                }
                m.flush()?;
            }
            let secs = t.elapsed().as_secs_f64();
            out.push((n * batch.len()) as f64 / 1e6 / secs);
            drop(f);
            std::fs::remove_file(&path)?;
        }
    }
    for (name, mut v) in results {
        v.sort_by(|a, b| a.total_cmp(b));
        println!(
            "{name:6} median {:7.0} MB/s  (runs: {})",
            v[v.len() / 2],
            v.iter()
                .map(|x| format!("{x:.0}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    Ok(())
}
