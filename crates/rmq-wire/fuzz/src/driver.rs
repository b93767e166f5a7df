//! A small generic replay loop for the fuzz targets added after the record decoder
//! (`decode_frames`, `decode_batch`): seeds first (each must be accepted), then deterministic
//! mutants, catching panics. The record targets keep their own loop ([`crate::replay`]).

use std::panic::{self, AssertUnwindSafe};
use std::time::{Duration, Instant};

use crate::{Crash, XorShift};

/// What one run of a fuzz body saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Verdict {
    /// The decoder accepted the input (possibly leaving a partial frame for later).
    pub accepted: bool,
    /// Items decoded (frames or batch entries).
    pub items: usize,
    /// Worth keeping in the pool to mutate further.
    pub interesting: bool,
}

/// A fuzz target the generic loop can drive.
#[derive(Clone, Copy)]
pub struct Target {
    pub name: &'static str,
    pub seeds: fn() -> Vec<Vec<u8>>,
    pub check: fn(&[u8]) -> Verdict,
    pub mutate: fn(&mut XorShift, &mut Vec<u8>, &[u8]),
}

/// Counts from [`replay_target`].
#[derive(Debug, Default, Clone, Copy)]
pub struct TargetStats {
    pub execs: u64,
    pub accepted: u64,
    pub rejected: u64,
    pub items: u64,
    pub elapsed: Duration,
}

fn run(target: &Target, input: &[u8]) -> Result<Verdict, Crash> {
    panic::catch_unwind(AssertUnwindSafe(|| (target.check)(input))).map_err(|payload| {
        let message = payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "non-string panic".to_string());
        Crash {
            input: input.to_vec(),
            message: format!("{}: {message}", target.name),
        }
    })
}

/// Runs `target` over its seeds, then over mutants of them until `budget` has passed.
pub fn replay_target(target: &Target, budget: Duration, seed: u64) -> Result<TargetStats, Crash> {
    const POOL_MAX: usize = 512;
    let start = Instant::now();
    let mut stats = TargetStats::default();
    let tally = |v: Verdict, stats: &mut TargetStats| {
        stats.execs += 1;
        stats.items += v.items as u64;
        if v.accepted {
            stats.accepted += 1;
        } else {
            stats.rejected += 1;
        }
    };
    let mut pool = (target.seeds)();
    for s in &pool {
        let v = run(target, s)?;
        if !v.accepted {
            return Err(Crash {
                input: s.clone(),
                message: format!("{}: a seed (a valid encoding) was rejected", target.name),
            });
        }
        tally(v, &mut stats);
    }
    let n_seeds = pool.len();
    let mut rng = XorShift::new(seed);
    let mut input = Vec::new();
    loop {
        if stats.execs % 256 == 0 && start.elapsed() >= budget {
            break;
        }
        let base = &pool[rng.below(pool.len())];
        let other = &pool[rng.below(pool.len())];
        input.clear();
        input.extend_from_slice(base);
        (target.mutate)(&mut rng, &mut input, other);
        let v = run(target, &input)?;
        tally(v, &mut stats);
        if v.interesting && rng.below(8) == 0 {
            if pool.len() < POOL_MAX {
                pool.push(input.clone());
            } else {
                let i = n_seeds + rng.below(POOL_MAX - n_seeds);
                pool[i] = input.clone();
            }
        }
    }
    stats.elapsed = start.elapsed();
    Ok(stats)
}

/// Byte-level edits shared by the mutators: flips, interesting integers, inserts, deletes,
/// truncation, splices from `other`, and `tokens` dropped in.
pub fn mutate_bytes(rng: &mut XorShift, input: &mut Vec<u8>, other: &[u8], tokens: &[&[u8]]) {
    const INTERESTING: [i32; 16] = [
        0,
        1,
        -1,
        3,
        4,
        5,
        127,
        128,
        255,
        256,
        32767,
        -32768,
        65535,
        i32::MAX,
        i32::MIN,
        0x0100_0000,
    ];
    let len = input.len();
    let at = rng.below(len + 1);
    match rng.below(10) {
        0 => {
            if let Some(b) = input.get_mut(at) {
                *b ^= 1 << rng.below(8);
            }
        }
        1 => {
            if let Some(b) = input.get_mut(at) {
                *b = rng.next_u64() as u8;
            }
        }
        2 => {
            let v = INTERESTING[rng.below(INTERESTING.len())];
            put(input, at, &v.to_be_bytes());
        }
        3 => {
            let v = INTERESTING[rng.below(INTERESTING.len())] as i16;
            put(input, at, &v.to_be_bytes());
        }
        4 => {
            let n = 1 + rng.below(8);
            let bytes: Vec<u8> = (0..n).map(|_| rng.next_u64() as u8).collect();
            input.splice(at..at, bytes);
        }
        5 => {
            let end = (at + 1 + rng.below(16)).min(len);
            if at < end {
                input.drain(at..end);
            }
        }
        6 => input.truncate(at),
        7 if !other.is_empty() => {
            let from = rng.below(other.len());
            let n = 1 + rng.below(other.len() - from);
            input.splice(at..at, other[from..from + n].iter().copied());
        }
        _ if !tokens.is_empty() => {
            let t = tokens[rng.below(tokens.len())];
            if rng.below(2) == 0 {
                input.splice(at..at, t.iter().copied());
            } else {
                put(input, at, t);
            }
        }
        _ => {}
    }
}

/// Overwrites `buf[at..]` with `bytes` as far as it reaches.
pub fn put(buf: &mut [u8], at: usize, bytes: &[u8]) {
    for (i, b) in bytes.iter().enumerate() {
        if let Some(slot) = buf.get_mut(at + i) {
            *slot = *b;
        }
    }
}
