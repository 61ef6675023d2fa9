//! A plain-text rendering of a [`Plan`] for terminals (`distill plan`, the pre-training
//! warning): the peak and totals, each moment (the column "phase"), the categories at the peak and the per-layer table.
//! Sizes are shown in binary units; the JSON form of the plan keeps exact bytes.
use std::fmt::Write;

use crate::memory::breakdown::{Fit, Moment, MomentBytes, Plan};
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

/// A column of the moment table: its title and its figure of a moment.
type Column = (&'static str, fn(&MomentBytes) -> u64);

impl Plan {
    /// The moment table ("phase", where it peaks, its bytes). Of the three figures each moment
    /// has, a column that tells nothing more than its neighbour is left out (the JSON keeps
    /// all three): "tensors" where the allocator's 512-byte rounding adds at most 1% in every
    /// row (always on CPU, where nothing is rounded), "reserved" where it shows the same as
    /// "allocated" in every row.
    fn write_moments(&self, s: &mut String) {
        let rounding_shows =
            self.moments.iter().any(|p| (p.allocated - p.requested.min(p.allocated)) * 100 > p.allocated);
        let segments_show = self.moments.iter().any(|p| human(p.reserved) != human(p.allocated));
        let mut columns: Vec<Column> = Vec::new();
        if rounding_shows || self.target == Target::Cpu {
            columns.push(("tensors", |p| p.requested));
        }
        if rounding_shows || self.target == Target::Cuda {
            columns.push(("allocated", |p| p.allocated));
        }
        if segments_show {
            columns.push(("reserved", |p| p.reserved));
        }
        let mut head = format!("\n{:<20} {:<16}", "phase", "largest at");
        for (title, _) in &columns {
            head.push_str(&format!(" {title:>12}"));
        }
        let _ = writeln!(s, "{head}");
        for p in &self.moments {
            let mut row = format!("{:<20} {:<16}", moment_name(p.moment), p.layer.as_deref().unwrap_or("-"));
            for (_, bytes) in &columns {
                row.push_str(&format!(" {:>12}", human(bytes(p))));
            }
            let _ = writeln!(s, "{row}");
        }
    }

    /// The categories at the peak and their sum, then what the device holds for them: the
    /// allocator's segments (which hold those tensors, so they are not added to them), the
    /// fragmentation reserve, the CUDA context and NCCL's buffers, and the total; then the
    /// caching allocator's reserved bytes, replayed over the run ([`Plan::reserved_replay`]),
    /// and the device total on them ([`Plan::replayed_total`]).
    fn write_peak(&self, s: &mut String) {
        let t = &self.totals;
        let _ = writeln!(s, "\nat the peak ({}):", moment_name(self.peak_moment));
        let mut tensors = 0u64;
        for (cat, bytes) in self.peak.iter() {
            tensors = tensors.saturating_add(bytes);
            let _ = writeln!(s, "  {:<26} {:>12}", cat.name(), human(bytes));
        }
        let _ = writeln!(s, "  {:<26} {:>12}", "= tensors", human(tensors));
        if t.total == tensors {
            let _ = writeln!(s, "  {:<26} {:>12}", "total on the device", human(t.total));
            return;
        }
        let _ = writeln!(s, "on the device:");
        for (name, v) in [
            ("allocator segments", t.reserved),
            ("+ fragmentation reserve", t.fragmentation),
            ("+ cuda context", t.cuda_context),
            ("+ nccl", t.nccl),
        ] {
            if v > 0 {
                let _ = writeln!(s, "  {name:<26} {:>12}", human(v));
            }
        }
        let _ = writeln!(s, "  {:<26} {:>12}", "= total", human(t.total));
        if let (Some(replay), Some(total)) = (self.reserved_replay, self.replayed_total()) {
            // the allocator's own peak over the run (cached blocks included), in place of the
            // fast bound's segments and reserve above: what the fit and "auto" in distill count
            let _ = writeln!(s, "  {:<26} {:>12}", "reserved, replayed run", human(replay));
            let _ = writeln!(s, "  {:<26} {:>12}", "= total, replayed run", human(total));
        }
    }

    /// The plan as an aligned text table.
    pub fn to_table(&self) -> String {
        let mut s = String::new();
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
        let _ = writeln!(s, "peak: {}{at}, {} on the device", moment_name(self.peak_moment), human(self.fit_total()));
        // judged on the total the headline gives: the replayed one where there is one
        if let Some(fit) = self.fit.map(|f| Fit::of(f.gpu, self.fit_total())) {
            let verdict = if fit.fits {
                format!("fits ({} free)", human(fit.free))
            } else {
                format!("DOES NOT FIT ({} short)", human(fit.short))
            };
            let _ = writeln!(s, "{}: {} -> {verdict}", fit.gpu.name, human(fit.capacity));
        }
        self.write_moments(&mut s);
        self.write_peak(&mut s);
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

    fn table(extra: &str) -> String {
        let text = format!(
            "[data]\ninput_shape = [784]\nclasses = 10\n[teacher]\nparams = 100000\n[student]\nfamily = \"mlp\"\n\
             hidden = [256]\n[train]\nbatch_size = 64\n{extra}"
        );
        let config = crate::schema::Config::from_toml_str(&text).unwrap();
        crate::estimate(&config, &crate::Inputs::default()).unwrap().to_table()
    }

    fn header(table: &str) -> Vec<&str> {
        table.lines().find(|l| l.starts_with("phase")).unwrap().split_whitespace().skip(3).collect()
    }

    #[test]
    fn the_moment_table_shows_the_figures_that_differ() {
        // CPU: nothing rounded or cached, one column, and the tensors are the total
        let cpu = table("[estimate]\ntarget = \"cpu\"\n");
        assert_eq!(header(&cpu), ["tensors"]);
        assert!(cpu.contains("  = tensors") && cpu.contains("  total on the device") && !cpu.contains("allocator"));
        // CUDA: the 512-byte rounding adds under 1% beside the cuBLAS workspace; the segments show
        let gpu = table("[estimate]\ngpu = \"T4\"\n");
        assert_eq!(header(&gpu), ["allocated", "reserved"]);
        // the items at the peak sum to the tensors; the segments hold them, not added to them
        let peak: Vec<&str> = gpu.lines().skip_while(|l| !l.starts_with("at the peak")).collect();
        let sum = peak.iter().position(|l| l.starts_with("  = tensors")).unwrap();
        assert!(peak[..sum].iter().all(|l| !l.contains("allocator")));
        assert_eq!(peak[sum + 1], "on the device:");
        assert!(peak[sum + 2].starts_with("  allocator segments"));
        assert!(peak.iter().any(|l| l.starts_with("  = total")));
        // the replayed reserved bytes follow the total, on CUDA only
        let total = peak.iter().position(|l| l.starts_with("  = total")).unwrap();
        assert!(peak[total + 1].starts_with("  reserved, replayed run"), "{}", peak[total + 1]);
    }
}
