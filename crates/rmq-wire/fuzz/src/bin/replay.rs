//! Stable-toolchain driver for the fuzz bodies: seeds, then deterministic mutants, for a bounded
//! time. Exits 1 and saves the input under `artifacts/replay/` on the first crash.
//!
//! ```text
//! cargo run --release --bin replay -- [SECONDS=10] [--seed N] [--target T] [--write-corpus DIR]
//! ```
//!
//! Targets: `records` (the `decode_record` and `decode_stream` bodies, which share seeds),
//! `decode_frames`, `decode_batch`, `decode_ha`, `send_frames`; by default all of them,
//! splitting SECONDS evenly.
//!
//! `--write-corpus DIR` writes the seed inputs of one target to DIR (for
//! `cargo fuzz run <target> DIR`) and exits: the `--target`'s, else the target DIR is named
//! after (`corpus/decode_frames`), else the record seeds.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use rmq_wire_fuzz::driver::{replay_target, Target};
use rmq_wire_fuzz::{batch, frames, ha, replay, seeds, send, Crash};

const TARGETS: [Target; 4] = [frames::TARGET, batch::TARGET, ha::TARGET, send::TARGET];

struct Args {
    seconds: f64,
    seed: u64,
    /// None: every target.
    target: Option<String>,
    write_corpus: Option<PathBuf>,
}

fn is_record_target(name: &str) -> bool {
    matches!(name, "records" | "decode_record" | "decode_stream")
}

fn find_target(name: &str) -> Option<&'static Target> {
    TARGETS.iter().find(|t| t.name == name)
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        seconds: 10.0,
        seed: 0x5EED_F022,
        target: None,
        write_corpus: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--seed" => {
                let v = it.next().ok_or("--seed needs a value")?;
                args.seed = v.parse().map_err(|e| format!("--seed {v}: {e}"))?;
            }
            "--target" => {
                let t = it.next().ok_or("--target needs a name")?;
                if !is_record_target(&t) && find_target(&t).is_none() {
                    return Err(format!(
                        "unknown target {t}: records, decode_record, decode_stream, \
                         decode_frames, decode_batch, decode_ha, send_frames"
                    ));
                }
                args.target = Some(t);
            }
            "--write-corpus" => {
                args.write_corpus = Some(it.next().ok_or("--write-corpus needs a DIR")?.into());
            }
            "-h" | "--help" => {
                return Err(
                    "usage: replay [SECONDS=10] [--seed N] [--target T] [--write-corpus DIR]"
                        .to_string(),
                )
            }
            s => {
                args.seconds = s
                    .parse()
                    .ok()
                    .filter(|v: &f64| v.is_finite() && *v >= 0.0)
                    .ok_or(format!("not a number of seconds: {s}"))?;
            }
        }
    }
    Ok(args)
}

fn fnv1a(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn write_corpus(dir: &Path, target: Option<&str>) -> std::io::Result<usize> {
    std::fs::create_dir_all(dir)?;
    let named = dir.file_name().and_then(|n| n.to_str());
    let seeds = match target.or(named).and_then(find_target) {
        Some(t) => (t.seeds)(),
        None => seeds(),
    };
    for s in &seeds {
        std::fs::write(dir.join(format!("seed-{:016x}", fnv1a(s))), s)?;
    }
    Ok(seeds.len())
}

fn report_crash(crash: &Crash) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("artifacts/replay");
    let path = dir.join(format!("crash-{:016x}", fnv1a(&crash.input)));
    let saved = std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(&path, &crash.input));
    eprintln!("replay: CRASH: {}", crash.message);
    match saved {
        Ok(()) => eprintln!(
            "replay: input ({} bytes) saved to {}",
            crash.input.len(),
            path.display()
        ),
        Err(e) => eprintln!(
            "replay: could not save the input to {}: {e}",
            path.display()
        ),
    }
    let hex: String = crash
        .input
        .iter()
        .take(512)
        .map(|b| format!("{b:02x}"))
        .collect();
    eprintln!("replay: input hex (first 512 bytes): {hex}");
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(msg) => {
            eprintln!("{msg}");
            return ExitCode::from(2);
        }
    };
    if let Some(dir) = args.write_corpus {
        return match write_corpus(&dir, args.target.as_deref()) {
            Ok(n) => {
                println!("replay: wrote {n} seeds to {}", dir.display());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("replay: {}: {e}", dir.display());
                ExitCode::FAILURE
            }
        };
    }
    let want = |name: &str| match &args.target {
        None => true,
        Some(t) => t == name || (is_record_target(t) && name == "records"),
    };
    let runs = usize::from(want("records")) + TARGETS.iter().filter(|t| want(t.name)).count();
    let budget = Duration::from_secs_f64(args.seconds / runs.max(1) as f64);
    if want("records") {
        if let Err(crash) = run_records(budget, args.seed) {
            report_crash(&crash);
            return ExitCode::FAILURE;
        }
    }
    for t in TARGETS.iter().filter(|t| want(t.name)) {
        match replay_target(t, budget, args.seed) {
            Ok(s) => {
                let secs = s.elapsed.as_secs_f64();
                println!(
                    "replay {}: {} execs in {secs:.1}s ({:.0}/s, seed {}): {} accepted ({} items \
                     decoded and re-encoded), {} rejected; 0 crashes",
                    t.name,
                    s.execs,
                    s.execs as f64 / secs.max(1e-9),
                    args.seed,
                    s.accepted,
                    s.items,
                    s.rejected,
                );
            }
            Err(crash) => {
                report_crash(&crash);
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}

fn run_records(budget: Duration, seed: u64) -> Result<(), Crash> {
    let s = replay(budget, seed)?;
    let secs = s.elapsed.as_secs_f64();
    println!(
        "replay: {} execs in {secs:.1}s ({:.0}/s, seed {}): {} byte-exact round trips ({} with a record CRC), \
         {} allowed re-spellings, {} fillers, {} rejected; stream walks went past \
         {} further records; 0 crashes",
        s.execs,
        s.execs as f64 / secs.max(1e-9),
        seed,
        s.records,
        s.records_with_crc,
        s.non_canonical,
        s.blanks,
        s.errors,
        s.stream_records,
    );
    Ok(())
}
