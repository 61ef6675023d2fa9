//! A plain-text rendering of a [`Plan`] for terminals (`distill plan`, the pre-training
//! warning): the peak and totals, each moment (the column "phase"), the categories at the peak and the per-layer table.
//! Sizes are shown in binary units; the JSON form of the plan keeps exact bytes.
use std::fmt::Write;

use crate::memory::breakdown::{Moment, Plan};
use crate::schema::{Precision, Target};

/// `bytes` in B, KiB, MiB, GiB or TiB with one decimal.
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

fn precision_name(p: Precision) -> &'static str {
    match p {
        Precision::Fp32 => "fp32",
        Precision::Fp16 => "fp16 autocast",
        Precision::Bf16 => "bf16 autocast",
        Precision::PureBf16 => "pure bf16",
        Precision::Bf16Master => "bf16 + fp32 master",
    }
}

fn moment_name(p: Moment) -> &'static str {
    match p {
        Moment::TeacherCache => "teacher cache",
        Moment::TeacherForward => "teacher forward",
        Moment::Forward => "forward",
        Moment::Loss => "forward end (loss)",
        Moment::Backward => "backward",
        Moment::OptimizerStep => "optimizer step",
        Moment::Evaluation => "evaluation",
    }
}

impl Plan {
    /// The plan as an aligned text table.
    pub fn to_table(&self) -> String {
        let mut s = String::new();
        let t = &self.totals;
        let _ = writeln!(
            s,
            "student {} parameters, teacher {}; micro-batch {}; precision {}; target {}",
            self.params.student,
            self.params.teacher,
            self.batch,
            precision_name(self.precision),
            if self.target == Target::Cuda { "cuda" } else { "cpu" }
        );
        let peak_layer = self.moments.iter().find(|p| p.moment == self.peak_moment).and_then(|p| p.layer.clone());
        let at = peak_layer.map(|l| format!(" at {l}")).unwrap_or_default();
        let _ = writeln!(s, "peak: {}{at}, {} on the device", moment_name(self.peak_moment), human(t.total));
        if let Some(fit) = &self.fit {
            let verdict = if fit.fits {
                format!("fits ({} free)", human(fit.free))
            } else {
                format!("DOES NOT FIT ({} short)", human(fit.short))
            };
            let _ = writeln!(s, "{}: {} -> {verdict}", fit.gpu.name, human(fit.capacity));
        }
        let _ = writeln!(
            s,
            "\n{:<20} {:<16} {:>12} {:>12} {:>12}",
            "phase", "largest at", "tensors", "allocated", "reserved"
        );
        for p in &self.moments {
            let _ = writeln!(
                s,
                "{:<20} {:<16} {:>12} {:>12} {:>12}",
                moment_name(p.moment),
                p.layer.as_deref().unwrap_or("-"),
                human(p.requested),
                human(p.allocated),
                human(p.reserved)
            );
        }
        let _ = writeln!(s, "\nat the peak ({}):", moment_name(self.peak_moment));
        for (cat, bytes) in self.peak.iter() {
            let _ = writeln!(s, "  {:<22} {:>12}", cat.name(), human(bytes));
        }
        for (name, v) in [
            ("allocator reserved", t.reserved),
            ("fragmentation", t.fragmentation),
            ("cuda context", t.cuda_context),
            ("nccl", t.nccl),
            ("total", t.total),
        ] {
            if v > 0 || name == "total" {
                let _ = writeln!(s, "  {name:<22} {:>12}", human(v));
            }
        }
        let _ = writeln!(
            s,
            "\n{:<14} {:<15} {:>10} {:>11} {:>11} {:>11} {:>11}",
            "layer", "kind", "params", "weights", "grads", "optimizer", "saved"
        );
        for l in &self.layers {
            let saved = match l.kept_bytes {
                Some(k) => format!("{} (kept {})", human(l.saved_bytes), human(k)),
                None => human(l.saved_bytes),
            };
            let _ = writeln!(
                s,
                "{:<14} {:<15} {:>10} {:>11} {:>11} {:>11} {:>11}",
                l.id,
                l.kind,
                l.params,
                human(l.weight_bytes),
                human(l.grad_bytes),
                human(l.optimizer_bytes),
                saved
            );
        }
        if let Some(p) = &self.pruning {
            let _ = writeln!(
                s,
                "\npruning ({:?}, sparsity {}): masks {}; {} -> {} parameters ({} non-zero)",
                p.method,
                p.sparsity,
                human(p.mask_bytes),
                p.dense_params,
                p.final_params,
                p.nonzero_params
            );
        }
        for n in &self.notes {
            let _ = writeln!(s, "note: {n}");
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_units() {
        assert_eq!(human(512), "512 B");
        assert_eq!(human(1536), "1.5 KiB");
        assert_eq!(human(768 << 20), "768.0 MiB");
        assert_eq!(human(143_771 << 20), "140.4 GiB");
    }
}
