//! Writes the training order of the first `epochs` epochs, as the trainer draws it
//! ([`distill::data::permutation`]), so that a reference loop outside Rust
//! (`bench/throughput/kd_eager.py`) can visit the samples in exactly the same batches.
//!
//! Usage: `epoch_order N SEED EPOCHS OUT`; OUT receives `EPOCHS * N` little-endian int64, epoch
//! by epoch (read it with `numpy.fromfile(OUT, "<i8").reshape(EPOCHS, N)`).
use std::io::Write;

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [n, seed, epochs, out] = args.as_slice() else {
        eprintln!("usage: epoch_order N SEED EPOCHS OUT");
        std::process::exit(2);
    };
    let number = |s: &str| -> u64 {
        s.parse().unwrap_or_else(|_| {
            eprintln!("epoch_order: {s:?} is not a non-negative integer");
            std::process::exit(2)
        })
    };
    let (n, seed, epochs) = (number(n) as usize, number(seed), number(epochs));
    let mut file = std::io::BufWriter::new(std::fs::File::create(out)?);
    for epoch in 0..epochs {
        for i in distill::data::permutation(n, seed, epoch) {
            file.write_all(&i.to_le_bytes())?;
        }
    }
    file.flush()
}
