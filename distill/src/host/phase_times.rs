//! Where a run's wall time went: every moment from the process's start to the report is charged
//! to exactly one [`Phase`] (the one the run is in; the innermost where phases nest, so an
//! evaluation inside training counts as evaluation only), so the phases sum to the wall time by
//! construction and [`Phase::Other`] is what no named phase holds (the memory plan, an `"auto"`
//! micro-batch's confirming step, the run folder, `report.json`).
//!
//! The clock is per thread (a run trains on one thread; tests run several runs at once on
//! several), started by [`start_run`] and read by [`finish`]; code elsewhere marks its phase with
//! [`during`] (a phase nested in the current one) or [`switch`] (the next phase of a sequence).
use std::cell::RefCell;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// The parts of a run's wall time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Process start (before `main`, where Linux's `/proc` says when) to the start of loading:
    /// libtorch's loading, the command line, the cfg, the device.
    Startup,
    /// The data files read, tokenised, split and put on the device. They are read on a thread
    /// beside the teacher's loading ([`crate::run::load`]): this is the wait for them once the
    /// teacher has loaded, and their move to the device.
    Data,
    /// The teacher loaded (while the data files are read beside it) and checked on a probe batch
    /// (with the student built for the check).
    TeacherLoad,
    /// The teacher's passes before training: the test set, and the train set's soft targets
    /// (computed, or read back from a cache). A live teacher's forwards count as training.
    TeacherPass,
    /// The students' training steps (the live teacher's forwards, metrics lines and progress
    /// included).
    Training,
    /// The held-out evaluation at each epoch's end.
    Evaluation,
    /// Writing checkpoints.
    Checkpoints,
    /// Writing the exports and measuring them (sizes, sparsity, the shrunk student).
    Export,
    /// The CPU latency measurement of the exported students ([`crate::export::latency`]), when the
    /// run asks for it (`--latency`); 0 otherwise.
    Latency,
    /// Everything else: the memory plan, an `"auto"` micro-batch's confirming step, the run
    /// folder and its files.
    Other,
}

const PHASES: [Phase; 10] = [
    Phase::Startup,
    Phase::Data,
    Phase::TeacherLoad,
    Phase::TeacherPass,
    Phase::Training,
    Phase::Evaluation,
    Phase::Checkpoints,
    Phase::Export,
    Phase::Latency,
    Phase::Other,
];

impl Phase {
    /// The phase's name in the printed summary.
    pub fn label(self) -> &'static str {
        match self {
            Phase::Startup => "startup",
            Phase::Data => "data",
            Phase::TeacherLoad => "teacher load",
            Phase::TeacherPass => "teacher pass",
            Phase::Training => "training",
            Phase::Evaluation => "evaluation",
            Phase::Checkpoints => "checkpoints",
            Phase::Export => "export",
            Phase::Latency => "latency",
            Phase::Other => "other",
        }
    }
}

/// `report.json`'s `phases`: seconds of wall time per [`Phase`]; they sum to `wall_seconds`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct PhaseSeconds {
    pub startup_s: f64,
    pub data_s: f64,
    pub teacher_load_s: f64,
    pub teacher_pass_s: f64,
    pub training_s: f64,
    pub evaluation_s: f64,
    pub checkpoints_s: f64,
    pub export_s: f64,
    pub latency_s: f64,
    pub other_s: f64,
}

impl PhaseSeconds {
    /// The seconds of `phase`.
    pub fn get(&self, phase: Phase) -> f64 {
        *self.slot(phase)
    }

    fn slot(&self, phase: Phase) -> &f64 {
        match phase {
            Phase::Startup => &self.startup_s,
            Phase::Data => &self.data_s,
            Phase::TeacherLoad => &self.teacher_load_s,
            Phase::TeacherPass => &self.teacher_pass_s,
            Phase::Training => &self.training_s,
            Phase::Evaluation => &self.evaluation_s,
            Phase::Checkpoints => &self.checkpoints_s,
            Phase::Export => &self.export_s,
            Phase::Latency => &self.latency_s,
            Phase::Other => &self.other_s,
        }
    }

    fn slot_mut(&mut self, phase: Phase) -> &mut f64 {
        match phase {
            Phase::Startup => &mut self.startup_s,
            Phase::Data => &mut self.data_s,
            Phase::TeacherLoad => &mut self.teacher_load_s,
            Phase::TeacherPass => &mut self.teacher_pass_s,
            Phase::Training => &mut self.training_s,
            Phase::Evaluation => &mut self.evaluation_s,
            Phase::Checkpoints => &mut self.checkpoints_s,
            Phase::Export => &mut self.export_s,
            Phase::Latency => &mut self.latency_s,
            Phase::Other => &mut self.other_s,
        }
    }

    /// Every phase with its seconds, in the run's order.
    pub fn all(&self) -> Vec<(Phase, f64)> {
        PHASES.iter().map(|&p| (p, self.get(p))).collect()
    }

    /// The sum of the phases, seconds.
    pub fn total(&self) -> f64 {
        PHASES.iter().map(|&p| self.get(p)).sum()
    }

    /// The split in one line of the summary, each phase with its share of `wall` seconds, e.g.
    /// `time: startup 0.4 s (5%), data 0.1 s (1%), ..., other 0.1 s (1%)`.
    pub fn line(&self, wall: f64) -> String {
        let parts: Vec<String> = self
            .all()
            .into_iter()
            .map(|(p, s)| format!("{} {s:.1} s ({:.0}%)", p.label(), 100.0 * s / wall.max(1e-9)))
            .collect();
        format!("time: {}", parts.join(", "))
    }
}

/// The process's start, as `main` noted it ([`process_started`]); taken by the first run.
static PROCESS_START: Mutex<Option<Instant>> = Mutex::new(None);

struct Clock {
    start: Instant,
    current: Phase,
    since: Instant,
    seconds: PhaseSeconds,
}

impl Clock {
    /// Charges the time since the last change to the current phase, then makes `next` current.
    fn change(&mut self, next: Phase) -> Phase {
        let now = Instant::now();
        *self.seconds.slot_mut(self.current) += (now - self.since).as_secs_f64();
        self.since = now;
        std::mem::replace(&mut self.current, next)
    }
}

thread_local! {
    static CLOCK: RefCell<Option<Clock>> = const { RefCell::new(None) };
}

/// Notes the process's start, for the first run's [`Phase::Startup`]: the kernel's start time of
/// the process where Linux's `/proc` gives it (so libtorch's loading before `main` counts), else
/// now. Called first thing in `main`.
pub fn process_started() {
    let now = Instant::now();
    let start = process_age().and_then(|age| now.checked_sub(age)).unwrap_or(now);
    *PROCESS_START.lock().unwrap_or_else(|e| e.into_inner()) = Some(start);
}

/// How long ago the kernel started this process: `/proc/uptime` less the process's `starttime`
/// (field 22 of `/proc/self/stat`, in clock ticks since boot; proc(5)). `None` off Linux.
fn process_age() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // the command name (field 2) may hold spaces and parentheses: fields count from its last ')'
    let after = &stat[stat.rfind(')')? + 1..];
    let ticks: f64 = after.split_whitespace().nth(19)?.parse().ok()?;
    // SAFETY: sysconf reads a constant of the C library; it has no preconditions.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let uptime: f64 = std::fs::read_to_string("/proc/uptime").ok()?.split_whitespace().next()?.parse().ok()?;
    let age = uptime - ticks / (per_second.max(1) as f64);
    (0.0..86_400.0 * 365.0).contains(&age).then(|| Duration::from_secs_f64(age))
}

/// Starts this thread's clock for a run, in [`Phase::Startup`]: from the process's start for the
/// process's first run (when `main` noted it), else from now.
pub fn start_run() {
    let now = Instant::now();
    let start = PROCESS_START.lock().unwrap_or_else(|e| e.into_inner()).take().filter(|s| *s <= now).unwrap_or(now);
    CLOCK.with(|c| {
        *c.borrow_mut() = Some(Clock { start, current: Phase::Startup, since: start, seconds: PhaseSeconds::default() })
    });
}

/// Makes `next` the current phase (the time until now goes to the one before); returns that one.
/// Does nothing (and returns `next`) on a thread whose clock was not started.
pub fn switch(next: Phase) -> Phase {
    CLOCK.with(|c| c.borrow_mut().as_mut().map_or(next, |clock| clock.change(next)))
}

/// Runs `f` in `phase`, then returns to the phase it was called in.
pub fn during<T>(phase: Phase, f: impl FnOnce() -> T) -> T {
    let before = switch(phase);
    let out = f();
    switch(before);
    out
}

/// Stops this thread's clock: the seconds of each phase until now (the current phase's time
/// charged to it), and the wall time from the clock's start. `None` when no clock was started.
pub fn finish() -> Option<(PhaseSeconds, f64)> {
    CLOCK.with(|c| {
        let mut clock = c.borrow_mut().take()?;
        clock.change(Phase::Other);
        Some((clock.seconds, (clock.since - clock.start).as_secs_f64()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spin(seconds: f64) {
        let t = Instant::now();
        while t.elapsed().as_secs_f64() < seconds {}
    }

    #[test]
    fn each_moment_is_charged_to_the_innermost_phase_and_the_phases_sum_to_the_wall_time() {
        // Each span is also timed from outside, so the bounds hold however loaded the machine is:
        // a phase holds at least its spin and at most the span around it.
        let begin = Instant::now();
        start_run();
        spin(0.01);
        let data_begins = Instant::now();
        switch(Phase::Data);
        let startup = begin.elapsed().as_secs_f64();
        spin(0.02);
        switch(Phase::Other);
        let data = data_begins.elapsed().as_secs_f64();
        let mut inner = 0.0;
        let t = Instant::now();
        during(Phase::Training, || {
            spin(0.03);
            let t = Instant::now();
            during(Phase::Evaluation, || spin(0.02));
            inner = t.elapsed().as_secs_f64();
            spin(0.01);
        });
        let outer = t.elapsed().as_secs_f64();
        let (s, wall) = finish().expect("started");
        assert!(s.startup_s >= 0.01 && s.startup_s <= startup, "{s:?} against {startup}");
        assert!(s.data_s >= 0.02 && s.data_s <= data, "{s:?} against {data}");
        assert!(s.evaluation_s >= 0.02 && s.evaluation_s <= inner, "{s:?} against {inner}");
        // the evaluation inside training is not training's: were it charged to both, training
        // would hold the whole outer span
        assert!(s.training_s >= 0.04 && s.training_s <= outer - s.evaluation_s, "{s:?} against {outer}");
        assert_eq!((s.teacher_load_s, s.latency_s), (0.0, 0.0));
        assert!((s.total() - wall).abs() < 1e-9, "{} against {wall}", s.total());
        assert!(wall >= 0.09, "{wall}");
        let line = PhaseSeconds { startup_s: 0.3, training_s: 0.4, other_s: 0.3, ..Default::default() }.line(1.0);
        assert_eq!(
            line,
            "time: startup 0.3 s (30%), data 0.0 s (0%), teacher load 0.0 s (0%), teacher pass 0.0 s (0%), training \
             0.4 s (40%), evaluation 0.0 s (0%), checkpoints 0.0 s (0%), export 0.0 s (0%), latency 0.0 s (0%), other \
             0.3 s (30%)"
        );
        // the clock is gone: a second finish has nothing, and switch does nothing
        assert_eq!(finish(), None);
        assert_eq!(switch(Phase::Export), Phase::Export);
    }

    #[test]
    fn the_process_is_older_than_this_test() {
        let age = process_age().expect("Linux's /proc");
        assert!(age > Duration::ZERO && age < Duration::from_secs(3600), "{age:?}");
    }
}
