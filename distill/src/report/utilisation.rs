//! How well a run used its device: the achieved FLOP/s of its training steps and the model
//! FLOPs utilisation (MFU: achieved model FLOP/s over the device's peak; Chowdhery et al. 2022,
//! PaLM, arXiv:2204.02311, appendix B), `report.json`'s `utilisation`.
//!
//! The FLOPs of a row are the estimator's (`estimator_wasm::memory::flops`: products of the
//! student's forward and backward, the online teacher's forward, the loss elementwise; the
//! recompute of checkpointing and of the flash backward is hardware, not model, FLOPs). They are
//! linear in the rows at a fixed shape, so a sample's are the rows-weighted mean of one row's
//! FLOPs at each shape the run's training batches have ([`FlopsPerSample::mean`]): one shape for
//! images, features and a language model's full windows; for text padded per batch, each
//! batch's own width (`crate::train::memory_plan::MemoryPlanner::flops_per_sample`). Achieved =
//! a sample's FLOPs x the training samples per second (optimiser steps only, this process's
//! device). The peak: on CUDA the catalogue card's dense figure for the run's precision
//! (`estimator_wasm::schema::peaks`, `docs/gpu-peaks.md`), on CPU a matmul in the run's compute
//! dtype timed on this machine ([`measure_cpu_peak`]).
use std::time::Instant;

use estimator_wasm::schema::peaks::{identify, peak_flops};
use estimator_wasm::schema::Precision;
use serde::Serialize;
use tch::{Device, Kind, Tensor};

pub use crate::train::sample_flops::FlopsPerSample;

/// `report.json`'s `utilisation`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UtilisationReport {
    /// One sample's FLOPs by part: the mean over the run's training rows ([`FlopsPerSample::mean`]).
    pub flops_per_sample: FlopsPerSample,
    /// Model FLOPs per second of training: `flops_per_sample.model` x samples/s.
    pub achieved_flops_per_s: f64,
    /// With the recompute: `flops_per_sample.hardware` x samples/s.
    pub hardware_flops_per_s: f64,
    /// The device's peak FLOP/s for the run's precision; `None` for a GPU outside the catalogue.
    pub peak_flops_per_s: Option<f64>,
    /// Where the peak comes from: `catalogue` or `measured`.
    pub peak_source: &'static str,
    /// What the peak is, in words (the card and dtype, or the timed matmul).
    pub peak_detail: String,
    /// `achieved_flops_per_s / peak_flops_per_s`, a fraction.
    pub mfu: Option<f64>,
    /// How the per-sample FLOPs were priced (for text padded per batch: each training batch at
    /// its own width).
    pub basis: String,
}

/// A device's peak FLOP/s, where it comes from, and what it is.
#[derive(Debug, Clone, PartialEq)]
pub struct Peak {
    pub flops_per_s: Option<f64>,
    pub source: &'static str,
    pub detail: String,
}

/// The utilisation of a run whose training samples cost `flops` each, trained at
/// `samples_per_s`, on a device of `peak`; `basis` says how the FLOPs were priced.
pub fn utilisation(flops: FlopsPerSample, samples_per_s: f64, peak: Peak, basis: String) -> UtilisationReport {
    let achieved = flops.model * samples_per_s;
    UtilisationReport {
        flops_per_sample: flops,
        achieved_flops_per_s: achieved,
        hardware_flops_per_s: flops.hardware * samples_per_s,
        peak_flops_per_s: peak.flops_per_s,
        peak_source: peak.source,
        peak_detail: peak.detail,
        mfu: peak.flops_per_s.filter(|&p| p > 0.0).map(|p| achieved / p),
        basis,
    }
}

/// The peak of `device` for `precision`: the catalogue's dense figure for the CUDA card its
/// compute capability and memory identify, or on CPU [`measure_cpu_peak`] in the precision's
/// compute dtype.
pub fn device_peak(device: Device, precision: Precision) -> Peak {
    match device {
        Device::Cuda(i) => {
            let card = crate::torch::shim::cuda_mem_info(i)
                .ok()
                .zip(crate::torch::shim::cuda_capability(i).ok())
                .and_then(|((_, total), cap)| identify(total, cap));
            let dtype = match precision {
                Precision::Fp32 => "fp32",
                Precision::Fp16 => "fp16 tensor-core",
                _ => "bf16 tensor-core",
            };
            match card {
                Some(g) => Peak {
                    flops_per_s: peak_flops(g).and_then(|p| p.for_precision(precision)),
                    source: "catalogue",
                    detail: format!("{} {dtype} dense peak (docs/gpu-peaks.md)", g.name),
                },
                None => Peak {
                    flops_per_s: None,
                    source: "catalogue",
                    detail: format!("cuda:{i} is not a catalogue card (docs/gpu-peaks.md): no peak, no MFU"),
                },
            }
        }
        _ => measure_cpu_peak(precision),
    }
}

/// Side of the square matmul [`measure_cpu_peak`] times.
pub const CPU_MATMUL_SIDE: i64 = 1024;

/// The dtype a run of `precision` computes its products in, and its name: bf16 under bf16
/// autocast (and the estimator-only bf16 recipes), fp16 under fp16 autocast, else fp32.
pub fn compute_dtype(precision: Precision) -> (Kind, &'static str) {
    match precision {
        Precision::Fp32 => (Kind::Float, "fp32"),
        Precision::Fp16 => (Kind::Half, "fp16"),
        Precision::Bf16 | Precision::PureBf16 | Precision::Bf16Master => (Kind::BFloat16, "bf16"),
    }
}

/// This machine's matmul rate in `precision`'s compute dtype ([`compute_dtype`]), measured: a
/// `CPU_MATMUL_SIDE`-square matmul of that dtype on libtorch's intra-op threads, once to warm
/// up, then the fastest of 5 (`2 n^3` FLOPs each). A measured figure, not a datasheet's: the
/// same libtorch GEMM the run's products call in the dtype autocast gives them (a bf16 product
/// on a CPU with avx512_bf16 runs ~4x an fp32 one), so an MFU against it says how far the run
/// is from what this machine's BLAS does in the best case.
pub fn measure_cpu_peak(precision: Precision) -> Peak {
    let n = CPU_MATMUL_SIDE;
    let (kind, dtype) = compute_dtype(precision);
    let _guard = tch::no_grad_guard();
    let a = Tensor::randn([n, n], (kind, Device::Cpu));
    let b = Tensor::randn([n, n], (kind, Device::Cpu));
    let _ = a.matmul(&b);
    let best = (0..5)
        .map(|_| {
            let t = Instant::now();
            let c = a.matmul(&b);
            let s = t.elapsed().as_secs_f64();
            drop(c);
            s
        })
        .fold(f64::INFINITY, f64::min);
    let flops = 2.0 * (n as f64).powi(3);
    Peak {
        flops_per_s: Some(flops / best.max(1e-9)),
        source: "measured",
        detail: format!(
            "measured on this machine: fastest of 5 {dtype} {n} x {n} matmuls on {} threads",
            tch::get_num_threads()
        ),
    }
}

/// FLOP/s in engineering units: "1.23 TFLOP/s", "456.0 MFLOP/s".
pub fn rate(v: f64) -> String {
    let units = [(1e15, "PFLOP/s"), (1e12, "TFLOP/s"), (1e9, "GFLOP/s"), (1e6, "MFLOP/s"), (1e3, "kFLOP/s")];
    match units.iter().find(|(scale, _)| v >= *scale) {
        Some((scale, unit)) => format!("{:.2} {unit}", v / scale),
        None => format!("{v:.0} FLOP/s"),
    }
}

/// The summary's line: achieved FLOP/s, then the MFU against the peak and where it comes from.
pub fn line(u: &UtilisationReport) -> String {
    let mut s = format!(
        "utilisation: {} of model FLOPs ({} per sample)",
        rate(u.achieved_flops_per_s),
        rate(u.flops_per_sample.model).replace("/s", "")
    );
    match (u.mfu, u.peak_flops_per_s) {
        (Some(m), Some(p)) => s.push_str(&format!("; MFU {:.2}% of {} ({})", 100.0 * m, rate(p), u.peak_detail)),
        _ => s.push_str(&format!("; no MFU: {}", u.peak_detail)),
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use estimator_wasm::StepFlops;

    /// The estimator's MLP 784 -> 256 -> 10, one row (estimator-wasm/tests/flops.rs).
    fn row() -> StepFlops {
        StepFlops {
            student_forward: 406_528,
            student_backward: 411_648,
            recompute: 0,
            teacher_forward: 0,
            loss: 440,
            model: 818_616,
            hardware: 818_616,
        }
    }

    #[test]
    fn achieved_is_a_samples_flops_times_the_samples_per_second() {
        let peak = Peak { flops_per_s: Some(1e10), source: "measured", detail: "timed".into() };
        let u = utilisation(FlopsPerSample::mean(&[(32, row())]), 2000.0, peak, "exact".into());
        assert_eq!(u.flops_per_sample.model, 818_616.0);
        assert_eq!(u.flops_per_sample.student_backward, 411_648.0);
        assert_eq!(u.achieved_flops_per_s, 818_616.0 * 2000.0);
        assert!((u.mfu.unwrap() - 0.163_723_2).abs() < 1e-9);
        assert_eq!(
            line(&u),
            "utilisation: 1.64 GFLOP/s of model FLOPs (818.62 kFLOP per sample); MFU 16.37% of 10.00 GFLOP/s (timed)"
        );
        let unknown = Peak { flops_per_s: None, source: "catalogue", detail: "cuda:0 is not a catalogue card".into() };
        let u = utilisation(FlopsPerSample::mean(&[(32, row())]), 2000.0, unknown, "exact".into());
        assert_eq!(u.mfu, None);
        assert!(line(&u).ends_with("; no MFU: cuda:0 is not a catalogue card"), "{}", line(&u));
    }

    #[test]
    fn the_cpu_peak_is_timed_in_the_runs_compute_dtype() {
        assert_eq!(compute_dtype(Precision::Fp32), (Kind::Float, "fp32"));
        assert_eq!(compute_dtype(Precision::Fp16), (Kind::Half, "fp16"));
        assert_eq!(compute_dtype(Precision::Bf16), (Kind::BFloat16, "bf16"));
        assert_eq!(compute_dtype(Precision::PureBf16), (Kind::BFloat16, "bf16"));
        let p = measure_cpu_peak(Precision::Fp32);
        assert_eq!(p.source, "measured");
        // any CPU libtorch runs on does more than 100 MFLOP/s and less than 100 TFLOP/s of fp32
        let f = p.flops_per_s.unwrap();
        assert!((1e8..1e14).contains(&f), "{f}");
        assert!(
            p.detail.starts_with("measured on this machine: fastest of 5 fp32 1024 x 1024 matmuls on "),
            "{}",
            p.detail
        );
        // a bf16 run's peak is a bf16 matmul's (emulated where the CPU has no bf16 units: slower
        // than fp32 there, but still what the run's products get)
        let p = measure_cpu_peak(Precision::Bf16);
        assert!(
            p.detail.starts_with("measured on this machine: fastest of 5 bf16 1024 x 1024 matmuls on "),
            "{}",
            p.detail
        );
        let f = p.flops_per_s.unwrap();
        assert!((1e7..1e15).contains(&f), "{f}");
    }
}
