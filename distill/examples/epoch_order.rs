//! Writes the training order of the first `epochs` epochs, as the trainer draws it
//! ([`distill::inputs::data::permutation`], and for text its length-bucketed form
//! [`distill::inputs::data::buckets::bucketed`]), so that a reference loop outside Rust
//! (`bench/throughput/kd_eager.py`, `bench/throughput/kd_eager_text.py`) can visit the samples in
//! exactly the same batches.
//!
//! Usage: `epoch_order N SEED EPOCHS OUT [LENGTHS BATCH]`; OUT receives `EPOCHS * N`
//! little-endian int64, epoch by epoch (read it with
//! `numpy.fromfile(OUT, "<i8").reshape(EPOCHS, N)`). With LENGTHS (N little-endian int64: each
//! sentence's token count, special tokens included, after truncation) and BATCH, each epoch's
//! permutation is regrouped into batches of similar length as `data.bucket_by_length = true`
//! does.
use std::io::Write;

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = || -> ! {
        eprintln!("usage: epoch_order N SEED EPOCHS OUT [LENGTHS BATCH]");
        std::process::exit(2);
    };
    let (n, seed, epochs, out, buckets) = match args.as_slice() {
        [n, seed, epochs, out] => (n, seed, epochs, out, None),
        [n, seed, epochs, out, lengths, batch] => (n, seed, epochs, out, Some((lengths, batch))),
        _ => usage(),
    };
    let number = |s: &str| -> u64 {
        s.parse().unwrap_or_else(|_| {
            eprintln!("epoch_order: {s:?} is not a non-negative integer");
            std::process::exit(2)
        })
    };
    let (n, seed, epochs) = (number(n) as usize, number(seed), number(epochs));
    let buckets = match buckets {
        Some((path, batch)) => {
            let bytes = std::fs::read(path)?;
            let lengths: Vec<usize> =
                bytes.chunks_exact(8).map(|b| i64::from_le_bytes(b.try_into().unwrap()) as usize).collect();
            if lengths.len() != n || bytes.len() % 8 != 0 {
                eprintln!("epoch_order: {path} holds {} int64 lengths, N = {n} needed", bytes.len() / 8);
                std::process::exit(2);
            }
            Some((lengths, number(batch) as usize))
        }
        None => None,
    };
    let mut file = std::io::BufWriter::new(std::fs::File::create(out)?);
    for epoch in 0..epochs {
        let order = distill::inputs::data::permutation(n, seed, epoch);
        let order = match &buckets {
            Some((lengths, batch)) => {
                distill::inputs::data::buckets::bucketed(order, |i| lengths[i], *batch, seed, epoch)
            }
            None => order,
        };
        for i in order {
            file.write_all(&i.to_le_bytes())?;
        }
    }
    file.flush()
}
