//! Ctrl-C, SIGTERM and SIGHUP (what torchrun sends the other workers when one fails, and Slurm's
//! scancel and Kubernetes before their SIGKILL): the stop flag the run polls, what the run is
//! doing when the signal comes ([`Phase`]), and so what the first interrupt does.
//!
//! The first one sets [`STOP`]: the teacher's passes stop before their next batch, training
//! checkpoints after its current step, and from the last step on the run evaluates and exports.
//! In a data-parallel job every rank gets the signal from its launcher (torchrun, Slurm); one
//! rank interrupted alone during the teacher's pass stops, and the others then fail in their
//! first collective naming it ("rank 1 is gone"): nothing was trained yet.
//! The second one quits at once with `_exit(130)`: no atexit handlers, so libtorch's static
//! destructors do not run under a forward still in flight (with `exit`, that forward failed
//! with a libtorch assertion or a panic, blamed on the teacher).
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

/// Set by the first interrupt; polled between teacher batches and training steps.
pub static STOP: AtomicBool = AtomicBool::new(false);

static PHASE: AtomicU8 = AtomicU8::new(Phase::Setup as u8);

/// What the run is doing, as the interrupt handler sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Phase {
    /// Reading the cfg, the data and the teacher.
    Setup = 0,
    /// The teacher's passes over the test and train sets, before training.
    Teacher = 1,
    /// Training steps (and the evaluations at each epoch's end).
    Training = 2,
    /// A student's last training step, its final evaluation and export.
    Finishing = 3,
}

impl Phase {
    /// What the first interrupt does in this phase, as the line printed when it comes.
    pub fn first_interrupt(self) -> &'static str {
        match self {
            Phase::Setup => "interrupt: stopping before training starts (interrupt again to quit at once)",
            Phase::Teacher => {
                "interrupt: stopping the teacher's pass, before training (interrupt again to quit at once)"
            }
            Phase::Training => "interrupt: writing a checkpoint after this step (interrupt again to quit at once)",
            Phase::Finishing => {
                "interrupt: the last step is under way or done; the run finishes it, its evaluation and export (interrupt again to quit at once)"
            }
        }
    }

    fn from_u8(v: u8) -> Phase {
        match v {
            1 => Phase::Teacher,
            2 => Phase::Training,
            3 => Phase::Finishing,
            _ => Phase::Setup,
        }
    }
}

/// Records that the run now does `phase`.
pub fn enter(phase: Phase) {
    PHASE.store(phase as u8, Ordering::SeqCst);
}

/// The phase the run is in.
pub fn phase() -> Phase {
    Phase::from_u8(PHASE.load(Ordering::SeqCst))
}

/// Installs the handler: the first interrupt sets [`STOP`] and says what it does now, the
/// second quits at once (exit status 130). Call it once, early in `main`.
pub fn install() {
    let _ = ctrlc::set_handler(|| {
        if STOP.swap(true, Ordering::SeqCst) {
            crate::host::progress::whole_line("\ninterrupt: quitting now\n");
            quit_now(130);
        }
        crate::host::progress::whole_line(&format!("\n{}\n", phase().first_interrupt()));
    });
}

#[cfg(unix)]
fn quit_now(code: i32) -> ! {
    // SAFETY: `_exit` ends the process without running atexit handlers or destructors; it has
    // no preconditions.
    unsafe { libc::_exit(code) }
}

#[cfg(not(unix))]
fn quit_now(code: i32) -> ! {
    std::process::exit(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_phase_round_trips_and_says_what_an_interrupt_does() {
        for p in [Phase::Setup, Phase::Teacher, Phase::Training, Phase::Finishing] {
            assert_eq!(Phase::from_u8(p as u8), p);
        }
        assert!(Phase::Teacher.first_interrupt().contains("stopping the teacher's pass"));
        assert!(Phase::Training.first_interrupt().contains("checkpoint after this step"));
        assert!(Phase::Finishing.first_interrupt().contains("finishes it, its evaluation and export"));
    }
}
