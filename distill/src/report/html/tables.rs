//! The tables of `report.html`: the teacher beside the students, the memory plan beside the
//! measured peaks, and the wall time by phase, each from `report.json`'s [`Report`].
use estimator_wasm::memory::render::human as bytes;
use plotters::style::RGBColor;

use super::bars::{Bar, BarChart};
use super::markup::escape;
use crate::export::section::StudentReport;
use crate::report::summary::{compression, group};
use crate::report::{MemoryReport, Report};
use crate::train::objective::Agreement;

/// Predicted figures' bars, and measured ones'.
pub const PREDICTED: RGBColor = RGBColor(31, 119, 180);
pub const MEASURED: RGBColor = RGBColor(255, 127, 14);

/// One row of a table: its label and its cells, escaped here.
fn row(label: &str, cells: &[String]) -> String {
    let cells: String = cells.iter().map(|c| format!("<td>{}</td>", escape(c))).collect();
    format!("<tr><th>{}</th>{cells}</tr>", escape(label))
}

/// The teacher, the student and (with `--baseline`) the alpha = 0 student side by side: the
/// held-out figures, the final loss parts, sizes, throughput and latency.
pub fn students(report: &Report) -> String {
    let (t, s, b) = (&report.teacher, &report.student, report.baseline.as_ref());
    let students: Vec<&StudentReport> = std::iter::once(s).chain(b).collect();
    let dash = || "-".to_string();
    // a run without --latency skips the timing (crate::export::latency::NOT_MEASURED)
    let unmeasured = || "not measured (--latency)".to_string();
    let maybe = |v: Option<f64>, f: &dyn Fn(f64) -> String| v.map(f).unwrap_or_else(dash);
    let pct = |v: f64| format!("{:.2}%", 100.0 * v);
    let fixed = |d: usize| move |v: f64| format!("{v:.d$}");
    let cosine = s.agreement_metric == Agreement::Cosine;
    let each = |teacher: String, f: &dyn Fn(&StudentReport) -> String| -> Vec<String> {
        std::iter::once(teacher).chain(students.iter().map(|s| f(s))).collect()
    };
    // a language model's samples are windows of S tokens: its speed in tokens
    let window = report.data.train_text.as_ref().filter(|t| t.packing.is_some()).map(|t| t.max_tokens as f64);
    let (speed, per) = match window {
        Some(s) => ("training (tokens/s)", s),
        None => ("training (samples/s)", 1.0),
    };
    let mut rows = Vec::new();
    if t.test_accuracy.is_some() || s.test_accuracy.is_some() {
        rows.push(row("test accuracy", &each(maybe(t.test_accuracy, &pct), &|s| maybe(s.test_accuracy, &pct))));
    }
    let agreement = |v: Option<f64>| if cosine { maybe(v, &fixed(4)) } else { maybe(v, &pct) };
    rows.push(row(s.agreement_metric.label(), &each(dash(), &|s| agreement(s.agreement))));
    if s.spearman.is_some() {
        rows.push(row("Spearman of cosines", &each(dash(), &|s| maybe(s.spearman, &fixed(4)))));
    }
    if s.test_perplexity.is_some() {
        rows.push(row(
            "test perplexity",
            &each(maybe(t.test_perplexity, &fixed(2)), &|s| maybe(s.test_perplexity, &fixed(2))),
        ));
    }
    rows.extend([
        row(
            if s.final_losses.hidden.is_some() { "final loss (KD, CE, hidden)" } else { "final loss (KD, CE)" },
            &each(dash(), &|s| {
                let l = &s.final_losses;
                let hidden = l.hidden.map(|h| format!(", {h:.4}")).unwrap_or_default();
                format!("{:.4} ({:.4}, {:.4}{hidden})", l.loss, l.kd, l.ce)
            }),
        ),
        row(
            "alpha, temperature",
            &each(dash(), &|s| format!("{}, {}", s.alpha, s.temperature.map_or("-".into(), |t| t.to_string()))),
        ),
        row("parameters", &each(group(t.params), &|s| group(s.params))),
        row("file (TorchScript)", &each(bytes(t.file_bytes), &|s| bytes(s.torchscript_bytes))),
        row("file (safetensors)", &each(dash(), &|s| bytes(s.safetensors_bytes))),
        row(speed, &each(dash(), &|s| format!("{:.0}", s.samples_per_s * per))),
        row("train time", &each(dash(), &|s| format!("{:.1} s", s.train_seconds))),
        row("steps x micro-batch", &each(dash(), &|s| format!("{} x {}", s.steps, s.batch_size))),
        row("precision (teacher's)", &each(dash(), &|s| format!("{} ({})", s.precision, s.teacher_precision))),
        row(
            "CPU latency, batch 1",
            &each(dash(), &|s| s.latency.map_or(unmeasured(), |l| format!("{:.3} ms", l.batch_1_ms))),
        ),
        row(
            "CPU latency, large batch",
            &each(dash(), &|s| {
                s.latency.map_or(unmeasured(), |l| format!("{:.2} ms at {}", l.large_batch_ms, l.large_batch))
            }),
        ),
    ]);
    if s.prune.is_some() {
        rows.push(row("weight sparsity", &each(dash(), &|s| maybe(s.prune.as_ref().map(|p| p.weight_sparsity), &pct))));
    }
    let mut head = "<tr><th></th><th>teacher</th><th>student</th>".to_string();
    if b.is_some() {
        head.push_str("<th>student, alpha=0</th>");
    }
    let mut notes = format!("compression {}", compression(report.compression_ratio));
    if let Some(gain) = report.kd_gain_points {
        notes.push_str(&format!("; KD gain over labels alone {gain:+.2} points"));
    }
    format!(
        "<table id=\"students\"><thead>{head}</tr></thead><tbody>{}</tbody></table><p>{}</p>",
        rows.concat(),
        escape(&notes)
    )
}

/// The memory plan part by part beside the measured peaks, as a table and as bars (MiB).
pub fn memory(m: &MemoryReport) -> String {
    let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
    let bar = |label: String, b: u64, colour| Bar { label, value: b as f64, length: mib(b), text: bytes(b), colour };
    let mut bars: Vec<Bar> =
        m.predicted_breakdown.iter().map(|(name, b)| bar(format!("plan: {name}"), *b, PREDICTED)).collect();
    let mut pairs = vec![("plan: peak allocated", Some(m.predicted_allocated_bytes), PREDICTED)];
    pairs.push(("measured: peak allocated (CUDA)", m.measured_peak_allocated_bytes, MEASURED));
    if m.predicted_reserved_bytes > 0 {
        // on CUDA the plan's figure is its replay of the caching allocator
        let label = match m.device.starts_with("cuda") {
            true => "plan: peak reserved (allocator replayed)",
            false => "plan: peak reserved",
        };
        pairs.push((label, Some(m.predicted_reserved_bytes), PREDICTED));
    }
    pairs.push(("measured: peak reserved (CUDA)", m.measured_peak_reserved_bytes, MEASURED));
    pairs.push(("plan: total on the device", Some(m.predicted_total_bytes), PREDICTED));
    bars.extend(pairs.into_iter().filter_map(|(label, b, colour)| Some(bar(label.to_string(), b?, colour))));
    let mut rows: String = bars.iter().map(|b| row(&b.label, std::slice::from_ref(&b.text))).collect();
    // the whole process in host RAM (libtorch's code included): not a quantity the plan prices,
    // so in the table only, where it does not dwarf the plan's bars
    if let Some(b) = m.measured_peak_resident_bytes {
        rows.push_str(&row("measured: peak resident (host RAM, the whole process)", &[bytes(b)]));
    }
    let chart = BarChart { id: "memory-bars".into(), axis: "MiB".into(), bars }.html();
    format!(
        "<p>{} at micro-batch {}, capacity {}. The plan's parts (the bars above \"plan: peak allocated\") sum to \
         \"plan: total on the device\".</p>{chart}<table id=\"memory\"><tbody>{rows}</tbody></table>",
        escape(&m.device),
        m.batch,
        bytes(m.capacity_bytes)
    )
}

/// The wall time by phase ([`crate::host::phase_times`]), as bars (seconds) and a table with shares.
pub fn phases(report: &Report) -> String {
    let wall = report.wall_seconds.max(1e-9);
    let all = report.phases.all();
    let bars = all
        .iter()
        .map(|&(p, s)| Bar {
            label: p.label().to_string(),
            value: s,
            length: s,
            text: format!("{s:.2} s ({:.1}%)", 100.0 * s / wall),
            colour: if p == crate::host::phase_times::Phase::Training { MEASURED } else { PREDICTED },
        })
        .collect();
    let rows: String =
        all.iter().map(|&(p, s)| row(p.label(), &[format!("{s:.2} s"), format!("{:.1}%", 100.0 * s / wall)])).collect();
    let chart = BarChart { id: "phase-bars".into(), axis: "seconds".into(), bars }.html();
    format!(
        "<p>wall time {:.1} s on {}</p>{chart}<table id=\"phases\"><tbody>{rows}</tbody></table>",
        report.wall_seconds,
        escape(&report.device)
    )
}

/// The training steps' FLOPs per sample by part (the mean over the run's training rows: for text
/// padded per batch, each batch at its own width), the achieved FLOP/s, the device's peak and
/// the MFU (`report.json`'s `utilisation`), with a note of how the FLOPs were priced and what
/// the peak is.
pub fn utilisation(u: &crate::report::utilisation::UtilisationReport) -> String {
    use crate::report::utilisation::rate;
    let f = &u.flops_per_sample;
    let flops = |v: f64| rate(v).replace("/s", "");
    let rows = [
        row("student forward (per sample)", &[flops(f.student_forward)]),
        row("student backward (per sample)", &[flops(f.student_backward)]),
        row("teacher forward (per sample)", &[flops(f.teacher_forward)]),
        row("loss (per sample)", &[flops(f.loss)]),
        row("model FLOPs (per sample)", &[flops(f.model)]),
        row("recompute (per sample, not in MFU)", &[flops(f.recompute)]),
        row("achieved", &[rate(u.achieved_flops_per_s)]),
        row("peak", &[u.peak_flops_per_s.map(rate).unwrap_or_else(|| "-".into())]),
        row("MFU", &[u.mfu.map(|m| format!("{:.2}%", 100.0 * m)).unwrap_or_else(|| "-".into())]),
    ];
    format!(
        "<table>{}</table><p class=\"note\">FLOPs per sample {}; peak: {}</p>",
        rows.concat(),
        escape(&u.basis),
        escape(&u.peak_detail)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plans_reserved_bytes_are_labelled_as_the_allocators_replay_on_cuda() {
        let mut m = crate::report::test_memory::cuda_run();
        let replayed = "<tr><th>plan: peak reserved (allocator replayed)</th><td>1.2 GiB</td></tr>\
                        <tr><th>measured: peak reserved (CUDA)</th><td>512.0 MiB</td></tr>";
        assert!(memory(&m).contains(replayed), "{}", memory(&m));
        // on the CPU nothing is replayed: the peak moment's tensors, under the plain label
        (m.device, m.measured_peak_allocated_bytes, m.measured_peak_reserved_bytes) = ("cpu".into(), None, None);
        let html = memory(&m);
        assert!(html.contains("<tr><th>plan: peak reserved</th><td>1.2 GiB</td></tr>"), "{html}");
        assert!(!html.contains("replayed"), "{html}");
    }
}
