//! Replays a recorded stream of tensor requests on the model of PyTorch's CUDA caching
//! allocator (`estimator_wasm::memory::caching_allocator`), to tell the allocator's rules apart
//! from the plan's order of requests when a predicted peak of reserved bytes misses:
//! `cargo run -p estimator-wasm --example replay_requests -- REQUESTS [--segments MIB]`.
//!
//! REQUESTS holds one event per line, in the order the process made them:
//! * `A <bytes> <id>`: a request of `bytes` (before rounding) for the block named `id`;
//! * `F <id>`: that block freed (a free of an id never requested is ignored: the recorder
//!   may have started after it; an id requested again before its free is an error);
//! * `M <text>`: a marker, printed beside the segments opened after it.
//!
//! Two recorders write it: `bench/alloc_trace/run.sh` (every tensor a `distill` run on the CPU
//! asks libtorch's CPU allocator for) and `bench/gpu/allocator_history.py` (the `alloc` and
//! `free_completed` events of a CUDA run's `--cuda-memory-history` snapshot).
//!
//! Prints the requests' peak allocated and peak reserved bytes (MiB), and with `--segments MIB`
//! every segment of at least MIB opened, with the request that opened it.
use std::collections::HashMap;
use std::io::{BufRead, BufReader};

use estimator_wasm::memory::caching_allocator::CachingAllocator;

const MIB: f64 = (1u64 << 20) as f64;

/// A segment opened by request number `request` (0-based), after the marker `marker`.
#[derive(Debug, PartialEq)]
struct Opened {
    request: usize,
    marker: String,
    segment: u64,
    bytes: u64,
    reserved: u64,
}

/// The allocator after every event of `lines`, and the segments it opened.
fn replay(lines: impl Iterator<Item = String>) -> Result<(CachingAllocator, Vec<Opened>, usize), String> {
    let mut a = CachingAllocator::new(u64::MAX);
    let (mut live, mut opened, mut marker, mut requests) = (HashMap::new(), Vec::new(), String::new(), 0);
    for (n, line) in lines.enumerate() {
        let mut words = line.split_whitespace();
        match (words.next(), words.next(), words.next()) {
            (Some("A"), Some(bytes), Some(id)) => {
                let bytes: u64 = bytes.parse().map_err(|e| format!("line {}: bytes {bytes:?}: {e}", n + 1))?;
                let before = a.reserved;
                if live.insert(id.to_string(), a.malloc(bytes)).is_some() {
                    return Err(format!("line {}: block {id} requested again before it was freed", n + 1));
                }
                if a.reserved > before {
                    let segment = a.reserved - before;
                    opened.push(Opened {
                        request: requests,
                        marker: marker.clone(),
                        segment,
                        bytes,
                        reserved: a.reserved,
                    });
                }
                requests += 1;
            }
            (Some("F"), Some(id), None) => {
                if let Some(address) = live.remove(id) {
                    a.free(address);
                }
            }
            (Some("M"), ..) => marker = line.trim_start()[1..].trim().to_string(),
            (None, ..) => {}
            _ => return Err(format!("line {}: {line:?} is not `A bytes id`, `F id` or `M text`", n + 1)),
        }
    }
    Ok((a, opened, requests))
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(path) = args.first() else {
        eprintln!("usage: replay_requests REQUESTS [--segments MIB]");
        std::process::exit(2);
    };
    let least = args.iter().position(|a| a == "--segments").map(|i| {
        args.get(i + 1).and_then(|m| m.parse::<f64>().ok()).unwrap_or_else(|| {
            eprintln!("--segments takes a size in MiB, e.g. --segments 10");
            std::process::exit(2)
        })
    });
    let file = std::fs::File::open(path).unwrap_or_else(|e| {
        eprintln!("{path}: {e}");
        std::process::exit(2)
    });
    let lines = BufReader::new(file).lines().map_while(Result::ok);
    let (a, opened, requests) = replay(lines).unwrap_or_else(|e| {
        eprintln!("{path}: {e}");
        std::process::exit(1)
    });
    println!(
        "{requests} requests: peak allocated {:.1} MiB, peak reserved {:.1} MiB, {} segments opened",
        a.peak_allocated as f64 / MIB,
        a.peak_reserved as f64 / MIB,
        opened.len()
    );
    for o in opened.iter().filter(|o| least.is_some_and(|m| o.segment as f64 >= m * MIB)) {
        println!(
            "  request {:>7} [{}]: segment {:.0} MiB for {:.2} MiB (reserved {:.0} MiB)",
            o.request,
            o.marker,
            o.segment as f64 / MIB,
            o.bytes as f64 / MIB,
            o.reserved as f64 / MIB
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MB: u64 = 1 << 20;

    fn run(text: &str) -> (CachingAllocator, Vec<Opened>, usize) {
        replay(text.lines().map(str::to_string)).unwrap()
    }

    #[test]
    fn a_larger_request_after_a_free_opens_a_second_segment() {
        // 100 MiB freed cannot serve 101 MiB: 100 + 102 (rounded to 2 MiB) reserved
        let (a, opened, n) = run(&format!("M teacher\nA {} x\nF x\n  M step\nA {} y\nF y\n", 100 * MB, 101 * MB));
        assert_eq!((n, a.peak_reserved, a.peak_allocated), (2, 202 * MB, 102 * MB));
        assert_eq!(
            opened[1],
            Opened { request: 1, marker: "step".into(), segment: 102 * MB, bytes: 101 * MB, reserved: 202 * MB }
        );
    }

    #[test]
    fn frees_of_unknown_ids_are_ignored_and_bad_lines_name_their_number() {
        let (a, opened, _) = run("F 0x10\nA 512 a\nA 512 b\n");
        // two small requests share one 2 MiB segment
        assert_eq!((a.peak_reserved, opened.len()), (2 * MB, 1));
        let err = replay(["A 512 a".to_string(), "A twelve b".to_string()].into_iter()).unwrap_err();
        assert!(err.starts_with("line 2: bytes \"twelve\""), "{err}");
        let err = replay(["X 1".to_string()].into_iter()).unwrap_err();
        assert!(err.starts_with("line 1: \"X 1\" is not"), "{err}");
        // a recorder that lost a free would leak the block: refused, not replayed
        let err = replay(["A 512 a".to_string(), "A 512 a".to_string()].into_iter()).unwrap_err();
        assert_eq!(err, "line 2: block a requested again before it was freed");
    }
}
