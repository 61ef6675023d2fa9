//! Progress on stderr: an epoch bar and a step bar (indicatif) on a terminal, plain status
//! lines otherwise (CI logs), nothing with `--quiet`. Results never go through here.
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verbosity {
    Quiet,
    Normal,
}

pub struct Progress {
    multi: MultiProgress,
    epochs: ProgressBar,
    steps: ProgressBar,
    /// Bars are drawn (stderr is a terminal and not quiet).
    bars: bool,
    verbosity: Verbosity,
}

impl Progress {
    pub fn new(verbosity: Verbosity) -> Progress {
        let target =
            if verbosity == Verbosity::Quiet { ProgressDrawTarget::hidden() } else { ProgressDrawTarget::stderr() };
        let bars = !target.is_hidden();
        let multi = MultiProgress::with_draw_target(target);
        let epochs = multi.add(ProgressBar::new(0));
        epochs.set_style(
            ProgressStyle::with_template("{prefix:>10.cyan.bold} [{bar:30.cyan/blue}] {pos}/{len} {msg}")
                .expect("static template")
                .progress_chars("=> "),
        );
        let steps = multi.add(ProgressBar::new(0));
        steps.set_style(
            ProgressStyle::with_template("{prefix:>10.green} [{bar:30.green/white}] {pos}/{len} {per_sec} {msg}")
                .expect("static template")
                .progress_chars("=> "),
        );
        Progress { multi, epochs, steps, bars, verbosity }
    }

    /// Starts (or resumes at optimiser step `done`) a run of `epochs` epochs of `steps` steps
    /// each, labelled `name`.
    pub fn start(&self, name: &str, epochs: u64, steps: u64, done: u64) {
        self.epochs.set_prefix(name.to_string());
        self.epochs.set_length(epochs);
        self.epochs.set_position(done / steps.max(1));
        self.epochs.set_message("");
        self.steps.set_prefix("step");
        self.steps.set_length(steps);
        self.steps.reset();
        self.steps.set_position(done % steps.max(1));
        self.steps.enable_steady_tick(Duration::from_millis(250));
    }

    /// After each optimiser step: the step bar advances, showing the running losses.
    pub fn step(&self, message: String) {
        self.steps.inc(1);
        self.steps.set_message(message);
    }

    /// At an epoch end: the epoch bar advances and a status line is kept above the bars.
    pub fn epoch(&self, line: String) {
        self.epochs.inc(1);
        self.epochs.set_message(line.clone());
        self.steps.reset();
        self.line(line);
    }

    /// A status line: above the bars on a terminal, a plain stderr line otherwise.
    pub fn line(&self, line: String) {
        match (self.verbosity, self.bars) {
            (Verbosity::Quiet, _) => {}
            (_, true) => {
                let _ = self.multi.println(line);
            }
            (_, false) => eprintln!("{line}"),
        }
    }

    /// A warning: shown even with `--quiet` (on stderr, above the bars).
    pub fn warn(&self, text: String) {
        if self.bars {
            let _ = self.multi.println(text);
        } else {
            eprintln!("{text}");
        }
    }

    /// A bar of `len` samples labelled `label` for a long pass outside training (the teacher's
    /// outputs over a dataset); hidden with `--quiet` or off a terminal. Clear it when done.
    pub fn samples(&self, label: &str, len: u64) -> ProgressBar {
        if !self.bars {
            return ProgressBar::hidden();
        }
        let bar = self.multi.add(ProgressBar::new(len));
        bar.set_style(
            ProgressStyle::with_template("{prefix:>10.yellow} [{bar:30.yellow/white}] {pos}/{len} {per_sec} eta {eta}")
                .expect("static template")
                .progress_chars("=> "),
        );
        bar.set_prefix(label.to_string());
        bar
    }

    pub fn finish(&self) {
        self.steps.finish_and_clear();
        self.epochs.finish_and_clear();
    }
}

/// Writes `line` (its own newlines included) to stderr in one call, so that the lines of a
/// data-parallel job's ranks, which share a terminal, come out whole.
pub fn whole_line(line: &str) {
    let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
}
