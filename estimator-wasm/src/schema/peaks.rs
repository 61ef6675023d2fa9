//! Peak dense FLOP/s of the catalogue's GPUs per compute dtype, the denominator of model FLOPs
//! utilisation (MFU), and which catalogue card a running CUDA device is.
//!
//! Figures are NVIDIA's published peaks at boost clock, **dense** (where a datasheet prints the
//! 2:4-sparsity figure, half of it), tensor cores with fp32 accumulation (what PyTorch's 16-bit
//! matmuls use); `fp32` is the CUDA cores' rate, which PyTorch's fp32 matmuls run at (TF32 is
//! off for matmuls by default). Sources per card in `docs/gpu-peaks.md`. MIG slices of an A100
//! get the card's figures scaled by their streaming multiprocessors: 14 per compute slice of
//! the card's 108 (NVIDIA's MIG user guide, A100 profiles).
use serde::Serialize;

use crate::schema::catalogue::{catalogue, Gpu};
use crate::schema::Precision;

/// Dense peak FLOP/s of one device per compute dtype (`None`: no tensor-core support).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PeakFlops {
    pub fp32: f64,
    pub tf32: Option<f64>,
    pub bf16: Option<f64>,
    pub fp16: f64,
}

impl PeakFlops {
    /// The peak a step in `precision` runs its products at: fp32 on the CUDA cores, the 16-bit
    /// recipes on the tensor cores of their dtype (`None` for bf16 without native support).
    pub fn for_precision(&self, precision: Precision) -> Option<f64> {
        match precision {
            Precision::Fp32 => Some(self.fp32),
            Precision::Fp16 => Some(self.fp16),
            _ => self.bf16,
        }
    }
}

const T: f64 = 1e12;

/// (catalogue name, compute capability, peaks in TFLOP/s: fp32, tf32, bf16, fp16).
type Row = (&'static str, (u32, u32), f64, Option<f64>, Option<f64>, f64);
const CARDS: [Row; 8] = [
    ("T4", (7, 5), 8.1, None, None, 65.0),
    ("L4", (8, 9), 30.3, Some(60.0), Some(121.0), 121.0),
    ("RTX-3090", (8, 6), 35.6, Some(35.6), Some(71.0), 71.0),
    ("RTX-4090", (8, 9), 82.6, Some(82.6), Some(165.2), 165.2),
    ("A100-40GB", (8, 0), 19.5, Some(156.0), Some(312.0), 312.0),
    ("A100-80GB", (8, 0), 19.5, Some(156.0), Some(312.0), 312.0),
    ("H100-80GB", (9, 0), 67.0, Some(494.5), Some(989.5), 989.5),
    ("H200", (9, 0), 67.0, Some(494.5), Some(989.5), 989.5),
];

const A100_SMS: f64 = 108.0;
const SMS_PER_SLICE: f64 = 14.0;

fn card(name: &str) -> Option<&'static Row> {
    CARDS.iter().find(|r| r.0 == name)
}

/// The dense peaks of catalogue GPU `gpu` (a MIG slice: its share of its card's), `None` for a
/// device outside the catalogue.
pub fn peak_flops(gpu: &Gpu) -> Option<PeakFlops> {
    let (row, share) = match gpu.mig_of {
        None => (card(gpu.name)?, 1.0),
        Some(parent) => {
            // "A100-40GB-MIG-3g.20gb": 3 compute slices
            let slices: f64 = gpu.name.rsplit("MIG-").next()?.split('g').next()?.parse().ok()?;
            (card(parent)?, slices * SMS_PER_SLICE / A100_SMS)
        }
    };
    let s = |v: f64| v * T * share;
    Some(PeakFlops { fp32: s(row.2), tf32: row.3.map(s), bf16: row.4.map(s), fp16: s(row.5) })
}

/// The catalogue GPU a CUDA device is: the one of compute capability `capability` whose memory
/// is within 3% of `memory` bytes (`cudaMemGetInfo`'s total is a little below `nvidia-smi`'s);
/// `None` when none is, or when two are (the A100's 3g.20gb and 4g.20gb slices).
pub fn identify(memory: u64, capability: (u32, u32)) -> Option<&'static Gpu> {
    let cap_of = |g: &Gpu| card(g.mig_of.unwrap_or(g.name)).map(|r| r.1);
    let mut found = catalogue()
        .iter()
        .filter(|g| cap_of(g) == Some(capability))
        .filter(|g| (g.memory as f64 - memory as f64).abs() <= 0.03 * g.memory as f64);
    match (found.next(), found.next()) {
        (Some(g), None) => Some(g),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::catalogue::gpu;

    #[test]
    fn every_card_has_peaks_and_slices_scale_by_their_multiprocessors() {
        for g in catalogue() {
            assert!(peak_flops(g).is_some(), "{}", g.name);
        }
        let h200 = peak_flops(gpu("H200").unwrap()).unwrap();
        assert_eq!(h200.for_precision(Precision::Bf16), Some(989.5e12));
        assert_eq!(h200.for_precision(Precision::Fp32), Some(67e12));
        assert_eq!(peak_flops(gpu("T4").unwrap()).unwrap().for_precision(Precision::Bf16), None);
        // 2 slices of 14 SMs of the A100's 108: 312 x 28 / 108 = 80.9 TFLOP/s of bf16
        let slice = peak_flops(gpu("A100-80GB-MIG-2g.20gb").unwrap()).unwrap();
        assert!((slice.bf16.unwrap() - 312e12 * 28.0 / 108.0).abs() < 1.0);
    }

    #[test]
    fn a_device_is_told_by_its_capability_and_memory() {
        // cudaMemGetInfo's totals: an H100 80GB HBM3 as PyTorch commonly reports it (81,090
        // MiB; not measured here) and the H200 of the 2026-12-04 GPU runs (report.json capacity_bytes)
        assert_eq!(identify(85_029_158_912, (9, 0)).map(|g| g.name), Some("H100-80GB"));
        assert_eq!(identify(150_109_880_320, (9, 0)).map(|g| g.name), Some("H200"));
        // the L4 and the RTX 4090 share sm_89 and differ by 6.6% of memory
        assert_eq!(identify(23_034 << 20, (8, 9)).map(|g| g.name), Some("L4"));
        assert_eq!(identify(24_564 << 20, (8, 9)).map(|g| g.name), Some("RTX-4090"));
        assert_eq!(identify(19_968 << 20, (8, 0)), None, "3g.20gb or 4g.20gb");
        assert_eq!(identify(85_029_158_912, (8, 0)).map(|g| g.name), Some("A100-80GB"));
        assert_eq!(identify(12 << 30, (8, 6)), None);
    }
}
