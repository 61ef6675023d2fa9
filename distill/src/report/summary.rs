//! The human summary of a run printed at its end (stdout): teacher, student and baseline side by
//! side, from `report.json`'s [`Report`].
use std::fmt::Write;

use estimator_wasm::memory::render::human as bytes;

use crate::report::{MemoryReport, Report};
use crate::train::objective::Agreement;

impl Report {
    /// The human summary printed at the end of a run (stdout).
    pub fn summary(&self) -> String {
        let t = &self.teacher;
        let s = &self.student;
        let mut out = String::new();
        let pct = |v: f64| format!("{:.2}%", 100.0 * v);
        let _ = writeln!(out, "distill: {} -> {}", t.path, self.output_dir);
        let mut header = format!("{:<26}{:>14}{:>14}", "", "teacher", "student");
        if self.baseline.is_some() {
            header.push_str(&format!("{:>18}", "student, alpha=0"));
        }
        let _ = writeln!(out, "{header}");
        let row = |label: &str, teacher: String, student: String, baseline: Option<String>| {
            let mut line = format!("{label:<26}{teacher:>14}{student:>14}");
            if let Some(b) = baseline {
                line.push_str(&format!("{b:>18}"));
            }
            line
        };
        let b = self.baseline.as_ref();
        let maybe = |v: Option<f64>, f: &dyn Fn(f64) -> String| v.map(f).unwrap_or_else(|| "-".into());
        let cosine = s.agreement_metric == Agreement::Cosine;
        let agreement = |v: Option<f64>| if cosine { maybe(v, &|v| format!("{v:.4}")) } else { maybe(v, &pct) };
        let mut lines = Vec::new();
        if t.test_accuracy.is_some() || s.test_accuracy.is_some() {
            lines.push(row(
                "test accuracy",
                maybe(t.test_accuracy, &pct),
                maybe(s.test_accuracy, &pct),
                b.map(|b| maybe(b.test_accuracy, &pct)),
            ));
        }
        lines.push(row(
            s.agreement_metric.label(),
            "-".into(),
            agreement(s.agreement),
            b.map(|b| agreement(b.agreement)),
        ));
        if s.spearman.is_some() {
            let rho = |v: Option<f64>| maybe(v, &|v| format!("{v:.4}"));
            lines.push(row("Spearman of cosines", "-".into(), rho(s.spearman), b.map(|b| rho(b.spearman))));
        }
        if s.test_perplexity.is_some() {
            let ppl = |v: Option<f64>| maybe(v, &|v| format!("{v:.2}"));
            lines.push(row(
                "test perplexity",
                ppl(t.test_perplexity),
                ppl(s.test_perplexity),
                b.map(|b| ppl(b.test_perplexity)),
            ));
        }
        // the training speed; a language model's samples are windows of S tokens: its speed in tokens
        let window = self.data.train_text.as_ref().filter(|t| t.packing.is_some()).map(|t| t.max_tokens as f64);
        let (unit, per) = match window {
            Some(s) => ("training (tokens/s)", s),
            None => ("training (samples/s)", 1.0),
        };
        lines.extend([
            row("parameters", group(t.params), group(s.params), b.map(|b| group(b.params))),
            row(
                "file (TorchScript)",
                bytes(t.file_bytes),
                bytes(s.torchscript_bytes),
                b.map(|b| bytes(b.torchscript_bytes)),
            ),
            row("file (safetensors)", "-".into(), bytes(s.safetensors_bytes), b.map(|b| bytes(b.safetensors_bytes))),
            row(
                unit,
                "-".into(),
                format!("{:.0}", s.samples_per_s * per),
                b.map(|b| format!("{:.0}", b.samples_per_s * per)),
            ),
            row(
                "train time",
                "-".into(),
                format!("{:.1} s", s.train_seconds),
                b.map(|b| format!("{:.1} s", b.train_seconds)),
            ),
        ]);
        for line in lines {
            let _ = writeln!(out, "{line}");
        }
        let _ = match s.agreement_metric {
            Agreement::Top1 => write!(
                out,
                "compression {} (KD: T = {}, alpha = {})",
                compression(self.compression_ratio),
                s.temperature.map_or("-".to_string(), |t| t.to_string()),
                s.alpha
            ),
            Agreement::Cosine => write!(
                out,
                "compression {} (KD: {}, alpha = {})",
                compression(self.compression_ratio),
                s.objective,
                s.alpha
            ),
        };
        if let Some(gain) = self.kd_gain_points {
            let _ = write!(out, "; KD gain over labels alone {gain:+.2} points");
        }
        if let (Some(kd), Some(ce)) = (s.test_perplexity, b.and_then(|b| b.test_perplexity)) {
            let _ = write!(
                out,
                "; test perplexity {kd:.2} against {ce:.2} with labels alone ({:+.1}%)",
                100.0 * (kd / ce - 1.0)
            );
        }
        let _ = writeln!(out, "\nwall time {:.1} s on {}", self.wall_seconds, self.device);
        let _ = writeln!(out, "{}", self.phases.line(self.wall_seconds));
        if let Some(m) = &self.memory {
            let _ = writeln!(out, "{}", memory_line(m));
        }
        if let Some(u) = &self.utilisation {
            let _ = writeln!(out, "{}", crate::report::utilisation::line(u));
        }
        if let Some(w) = &t.warning {
            let _ = writeln!(out, "{w}");
        }
        out
    }
}

/// The teacher's parameters over the student's, `ratio`, in words: "3.0x fewer parameters", or
/// for a student larger than its teacher "1.4x more parameters" (1 / ratio); within 5% of the
/// teacher's size, the student's share to two decimals ("1.03x the teacher's parameters").
pub fn compression(ratio: f64) -> String {
    if (0.95..1.05).contains(&ratio) {
        // one decimal would print "1.0x more" for a student slightly larger than its teacher
        format!("{:.2}x the teacher's parameters", 1.0 / ratio)
    } else if ratio >= 1.0 {
        format!("{ratio:.1}x fewer parameters")
    } else {
        format!("{:.1}x more parameters", 1.0 / ratio)
    }
}

/// The run's memory in one line: the plan's prediction of the device memory the run needs (on
/// CUDA the context plus the allocator's replayed reserved bytes, the total `"auto"` fits),
/// then what was measured beside the same quantity predicted (the CUDA allocator's peak
/// allocated bytes, and its reserved bytes as the plan's replay of the allocator gives them,
/// each with the prediction's error), and the process's peak resident set in host RAM, each
/// where known. On the CPU the plan prices the run's tensors only and nothing measures them
/// alone, while the resident set is the whole process (libtorch's code and allocator caches,
/// the loaded libraries, the tensors): the line labels both so that their gap is not read as
/// the plan's error.
pub fn memory_line(m: &MemoryReport) -> String {
    if m.device == "cpu" {
        let mut line =
            format!("memory on cpu at micro-batch {}: the plan's tensors {}", m.batch, bytes(m.predicted_total_bytes));
        if let Some(peak) = m.measured_peak_resident_bytes {
            line.push_str(&format!(
                "; the whole process peaked at {} resident (host RAM with libtorch's code and caches, \
                 which the plan does not price: not a measure of its error)",
                bytes(peak)
            ));
        }
        return line;
    }
    // the total "auto" fits and the fit warning compares (`Plan::fit_total`)
    let nccl = m.predicted_breakdown.iter().any(|(name, b)| name == "nccl" && *b > 0);
    let mut line = format!(
        "memory: predicted {} on {} at micro-batch {} (CUDA context{} + the allocator's replayed reserved bytes)",
        bytes(m.predicted_total_bytes),
        m.device,
        m.batch,
        if nccl { " + NCCL's buffers" } else { "" }
    );
    let error = |predicted: u64, measured: u64| match measured {
        0 => String::new(),
        _ => format!(", {:+.1}%", 100.0 * (predicted as f64 - measured as f64) / measured as f64),
    };
    if let Some(peak) = m.measured_peak_allocated_bytes {
        line.push_str(&format!(
            "; CUDA allocator peak allocated {} (predicted {}{})",
            bytes(peak),
            bytes(m.predicted_allocated_bytes),
            error(m.predicted_allocated_bytes, peak)
        ));
    }
    if let (Some(peak), true) = (m.measured_peak_reserved_bytes, m.predicted_reserved_bytes > 0) {
        line.push_str(&format!(
            ", reserved {} (predicted {} by replaying the allocator{})",
            bytes(peak),
            bytes(m.predicted_reserved_bytes),
            error(m.predicted_reserved_bytes, peak)
        ));
    }
    if let Some(peak) = m.measured_peak_resident_bytes {
        line.push_str(&format!("; peak resident {} (host RAM, this process until now)", bytes(peak)));
    }
    line
}

/// `1234567` as `1,234,567`.
pub fn group(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn number_formats() {
        assert_eq!(group(0), "0");
        assert_eq!(group(421_642), "421,642");
        assert_eq!(group(1_000_000), "1,000,000");
        // a teacher of 7000 parameters, students of 1000 and of 10000
        assert_eq!(compression(7000.0 / 1000.0), "7.0x fewer parameters");
        assert_eq!(compression(7000.0 / 10000.0), "1.4x more parameters");
        assert_eq!(compression(1000.0 / 1030.0), "1.03x the teacher's parameters");
        assert_eq!(compression(1.0), "1.00x the teacher's parameters");
        assert_eq!(compression(1.06), "1.1x fewer parameters");
    }

    #[test]
    fn memory_line_names_what_was_measured() {
        let mut m = MemoryReport {
            measured_peak_resident_bytes: Some(4_831_838_208),
            ..crate::report::test_memory::cuda_run()
        };
        // each measured figure beside the same quantity predicted, with the error
        assert_eq!(
            memory_line(&m),
            "memory: predicted 1.5 GiB on cuda:0 at micro-batch 64 (CUDA context + the allocator's replayed reserved \
             bytes); CUDA allocator peak allocated 1.2 GiB \
             (predicted 1.0 GiB, -20.0%), reserved 512.0 MiB (predicted 1.2 GiB by replaying the allocator, +150.0%); \
             peak resident 4.5 GiB \
             (host RAM, this process until now)"
        );
        // on the CPU the plan's tensors and the whole process are labelled as what they are
        // (the demo's 108.5 MiB against 854.0 MiB read as an 8x miss)
        m.device = "cpu".into();
        (m.predicted_total_bytes, m.batch) = (113_770_086, 128);
        (m.measured_peak_allocated_bytes, m.measured_peak_reserved_bytes) = (None, None);
        m.measured_peak_resident_bytes = Some(895_483_904);
        assert_eq!(
            memory_line(&m),
            "memory on cpu at micro-batch 128: the plan's tensors 108.5 MiB; the whole process peaked at 854.0 MiB \
             resident (host RAM with libtorch's code and caches, which the plan does not price: not a measure of its \
             error)"
        );
        m.measured_peak_resident_bytes = None;
        assert_eq!(memory_line(&m), "memory on cpu at micro-batch 128: the plan's tensors 108.5 MiB");
        // a data-parallel job's total also holds NCCL's buffers
        m.device = "cuda:0".into();
        m.predicted_breakdown = vec![("cuda_context".into(), 500 << 20), ("nccl".into(), 512 << 20)];
        assert!(memory_line(&m).starts_with(
            "memory: predicted 108.5 MiB on cuda:0 at micro-batch 128 (CUDA context + NCCL's buffers + the allocator's \
             replayed reserved bytes)"
        ));
    }
}
