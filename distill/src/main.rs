//! The `distill` command line: parse flags, call the library, print the result or one error
//! line, and map it to an exit code (0 success, 2 any error).
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use distill::progress::Verbosity;
use distill::TrainOptions;

/// Distil a TorchScript teacher into the student that a cfg.toml describes.
///
/// Example: distill --teacher data/fashion-mnist/t.pt --student examples/fashion-mnist/student.toml
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// TorchScript teacher (torch.jit.script or torch.jit.trace), returning logits [N, classes]
    /// or a tuple/dict holding them (see teacher.output).
    #[arg(long, value_name = "FILE")]
    teacher: PathBuf,
    /// Student and run description (cfg.toml).
    #[arg(long, value_name = "CFG")]
    student: PathBuf,
    /// Output folder [default: runs/<cfg name>-<UTC time>].
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Replace --out if it exists (only once this run has finished).
    #[arg(long)]
    overwrite: bool,
    /// auto, cpu, cuda or cuda:N; auto picks CUDA when libtorch sees a GPU.
    #[arg(long, default_value = "auto")]
    device: String,
    /// Also train the same student with alpha = 0 (labels only) and report the KD gain.
    #[arg(long)]
    baseline: bool,
    /// No progress output on stderr.
    #[arg(long, short)]
    quiet: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let opts = TrainOptions {
        teacher: args.teacher,
        student: args.student,
        out: args.out,
        overwrite: args.overwrite,
        device: args.device,
        baseline: args.baseline,
        verbosity: if args.quiet { Verbosity::Quiet } else { Verbosity::Normal },
    };
    match distill::run(&opts) {
        Ok(report) => {
            print!("{}", report.summary());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}
