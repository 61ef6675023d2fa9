//! The `distill` command line: parse flags, call the library, print the result or one error
//! line, and map it to an exit code (0 success or a stop `--stop-after-steps` asked for, 2 error,
//! 130 stopped by Ctrl-C).
use std::path::PathBuf;
use std::process::ExitCode;

use clap::builder::{OsStringValueParser, TypedValueParser};
use clap::{Parser, Subcommand};
use distill::data_parallel::Launch;
use distill::host::progress::Verbosity;
use distill::run::plan_command::PlanOptions;
use distill::TrainOptions;

/// Distil a TorchScript teacher into the student that a cfg.toml describes.
///
/// Example: distill --teacher data/fashion-mnist/t.pt --student examples/fashion-mnist/student.toml
#[derive(Parser, Debug)]
#[command(version, about, args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
struct Args {
    #[command(subcommand)]
    command: Option<Command>,
    /// TorchScript teacher (torch.jit.script or torch.jit.trace), returning logits [N, classes]
    /// or a tuple/dict holding them (see teacher.output); or a Hugging Face model folder of the
    /// Llama family (config.json, safetensors, tokenizer.json) [default: the cfg's teacher.hf].
    #[arg(long, value_parser = home_path(), value_name = "FILE|DIR")]
    teacher: Option<PathBuf>,
    /// Student and run description (cfg.toml).
    #[arg(long, value_parser = home_path(), value_name = "CFG", required_unless_present = "resume")]
    student: Option<PathBuf>,
    /// Output folder [default: runs/<cfg name>-<UTC time>].
    #[arg(long, value_parser = home_path(), value_name = "DIR", conflicts_with = "resume")]
    out: Option<PathBuf>,
    /// Replace --out if it exists (only once this run has finished).
    #[arg(long)]
    overwrite: bool,
    /// auto, cpu, cuda or cuda:N; auto picks CUDA when libtorch sees a GPU (not with --resume: a
    /// resumed run keeps the device it was started with).
    #[arg(long, default_value = "auto", conflicts_with = "resume")]
    device: String,
    /// Also train the same student with alpha = 0 (labels only) and report the KD gain.
    #[arg(long)]
    baseline: bool,
    /// Continue the interrupted run whose --out was DIR (or its DIR.partial folder), from its
    /// newest checkpoint that loads; its teacher, data and student.init must be unchanged (with
    /// --teacher: the same teacher, moved to FILE since the run started). It trains the run's
    /// own copy of the cfg (DIR.partial/config.toml), not later edits to the file.
    #[arg(long, value_parser = home_path(), value_name = "DIR", conflicts_with_all = ["student", "baseline"])]
    resume: Option<PathBuf>,
    /// Override a cfg.toml value, e.g. --set train.precision=bf16 or --set prune.sparsity=0.8
    /// (repeatable; recorded in the run's config.toml).
    #[arg(long = "set", value_name = "KEY=VALUE", conflicts_with = "resume")]
    sets: Vec<String>,
    /// Write a checkpoint and stop after N optimiser steps of a student, exit code 0 (continue
    /// with --resume).
    #[arg(long, value_name = "N")]
    stop_after_steps: Option<u64>,
    /// Keep the teacher's outputs on the train set in DIR and reuse them in later runs on the same
    /// teacher, data and [data]/[teacher] settings (a sweep over students runs the teacher once).
    #[arg(long, value_parser = home_path(), value_name = "DIR")]
    teacher_cache: Option<PathBuf>,
    /// In a data-parallel job, normalise each BatchNorm over the global batch (every rank's
    /// micro-batch: PyTorch's SyncBatchNorm, torchvision's --sync-bn) instead of each rank's own.
    #[arg(long, conflicts_with = "resume")]
    sync_batch_norm: bool,
    /// Time the exported students on the CPU (median ms at batch 1 and at the large batch, in
    /// report.json's latency); off, the run skips those seconds and the report says so. A resumed
    /// run keeps the choice it was started with.
    #[arg(long, conflicts_with = "resume")]
    latency: bool,
    /// Record the CUDA caching allocator's every segment, allocation and free, and write them at
    /// the end of the run (finished, failed or panicked) to FILE as PyTorch's pickled memory
    /// snapshot (`torch.cuda.memory._snapshot()`; each rank of a job writes FILE.rankN); for
    /// checking the memory plan (bench/gpu/allocator_history.py) or https://pytorch.org/memory_viz.
    /// CUDA only.
    #[arg(long, value_parser = home_path(), value_name = "FILE", conflicts_with = "resume")]
    cuda_memory_history: Option<PathBuf>,
    /// No progress output on stderr.
    #[arg(long, short)]
    quiet: bool,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Estimate the memory of a run before training: the breakdown by moment, category and
    /// layer on a GPU (--gpu, [estimate] gpu) or else this machine's device (the CPU's RAM
    /// available when there is no CUDA device), and the largest micro-batch per catalogue GPU.
    Plan {
        /// The run's cfg.toml.
        #[arg(long, value_parser = home_path(), value_name = "CFG")]
        student: PathBuf,
        /// TorchScript teacher: its exact parameter count replaces the cfg's [teacher] counts.
        #[arg(long, value_parser = home_path(), value_name = "FILE")]
        teacher: Option<PathBuf>,
        /// A catalogue GPU to check the fit against (overrides [estimate] gpu), e.g. A100-80GB.
        #[arg(long, value_name = "NAME")]
        gpu: Option<String>,
        /// Micro-batch to plan for (overrides train.batch_size).
        #[arg(long, value_name = "N")]
        batch: Option<u64>,
        /// Samples in data.train (a language model's: windows), for a plan without the data
        /// files; overrides what the file says.
        #[arg(long, value_name = "N")]
        train_samples: Option<u64>,
        /// Samples in data.test, likewise.
        #[arg(long, value_name = "N")]
        test_samples: Option<u64>,
        /// Print the plan as JSON (exact bytes) instead of a table.
        #[arg(long)]
        json: bool,
        /// Override a cfg.toml value, e.g. --set train.precision=bf16 (repeatable).
        #[arg(long = "set", value_name = "KEY=VALUE")]
        sets: Vec<String>,
    },
    /// Set finished runs side by side: one table (size, accuracy or Spearman or perplexity,
    /// agreement, KD gain, throughput, latency, sparsity, memory planned and measured, wall
    /// time) and one page with a bar chart per column.
    Compare {
        /// Output folders of finished runs (or their report.json files), in the order shown.
        #[arg(value_parser = home_path(), value_name = "RUN_DIR", required = true)]
        runs: Vec<PathBuf>,
        /// Where the page goes.
        #[arg(long, value_parser = home_path(), value_name = "FILE", default_value = "compare.html")]
        html: PathBuf,
    },
}

/// A path flag's value with a leading `~` or `~/` as the home folder: the shell expands it in
/// `--teacher ~/t.pt`, not in `--teacher=~/t.pt`, so `distill` does (as for file keys in a
/// cfg.toml and in `--set`). A path that is not UTF-8 is taken as it is, as clap's own
/// `PathBuf` parser takes it.
fn home_path() -> impl TypedValueParser<Value = PathBuf> {
    OsStringValueParser::new().map(|value| match value.to_str() {
        Some(text) => distill::config::overrides::expand_home(text),
        None => PathBuf::from(value),
    })
}

/// The exit of a command whose result is a text (`compare`, `plan`): the text on stdout and 0,
/// or the error's line on stderr and 2.
fn printed(result: distill::Result<String>) -> ExitCode {
    match result {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

fn main() -> ExitCode {
    distill::host::phase_times::process_started();
    distill::host::allocator::limit_malloc_arenas();
    let args = Args::parse();
    if let Some(Command::Compare { runs, html }) = &args.command {
        return printed(distill::report::compare::compare(runs, html));
    }
    if let Some(Command::Plan { student, teacher, gpu, batch, train_samples, test_samples, json, sets }) = args.command
    {
        let opts = PlanOptions { student, teacher, gpu, batch, train_samples, test_samples, json, sets };
        return printed(distill::run::plan_command::plan(&opts));
    }
    distill::host::interrupt::install();
    let verbosity = if args.quiet { Verbosity::Quiet } else { Verbosity::Normal };
    // the launcher's environment, read once: alone, or one rank of a data-parallel job
    let (launch, result) = match Launch::from_process() {
        Ok(launch) => {
            let result = recorded(args, verbosity, &launch);
            (launch, result)
        }
        Err(e) => (Launch::single(), Err(e)),
    };
    // a data-parallel job's summary (or stop line) comes from rank 0 alone
    let rank0 = launch.writes_run_folder();
    match result {
        Ok(report) => {
            if rank0 {
                print!("{}", report.summary());
            }
            ExitCode::SUCCESS
        }
        // a stop that was asked for: its line says where the checkpoint is and how to go on
        Err(e) if e.is_requested_stop() => {
            if rank0 {
                distill::host::progress::whole_line(&format!("{e}\n"));
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            distill::host::progress::whole_line(&format!("error: {e}\n"));
            ExitCode::from(if e.is_interrupt() { 130 } else { 2 })
        }
    }
}

/// [`train`], with the CUDA allocator's history recorded around it when
/// `--cuda-memory-history` asks: written whether the run finished, failed or panicked (an
/// out-of-memory panic of libtorch is when the history matters most; the panic goes on after
/// the write). A run that finished but whose history could not be written fails with that error.
fn recorded(args: Args, verbosity: Verbosity, launch: &Launch) -> distill::Result<distill::report::Report> {
    let Some(file) = args.cuda_memory_history.clone() else {
        return train(args, verbosity, launch);
    };
    let file = if launch.world_size() > 1 {
        let mut name = file.as_os_str().to_os_string();
        name.push(format!(".rank{}", launch.rank()));
        PathBuf::from(name)
    } else {
        file
    };
    let device = distill::run::preflight::parse_device(&args.device)?;
    let history = distill::torch::memory_history::start(&file, device)?;
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| train(args, verbosity, launch)));
    let written = history.write();
    let result = result.unwrap_or_else(|panic| std::panic::resume_unwind(panic));
    match written {
        Ok(path) => {
            if verbosity != Verbosity::Quiet {
                distill::host::progress::whole_line(&format!("cuda memory history: {}\n", path.display()));
            }
            result
        }
        Err(e) => result.and(Err(e)),
    }
}

/// Trains (or resumes, `--resume`) as `args` say, alone or as the rank `launch` says.
fn train(args: Args, verbosity: Verbosity, launch: &Launch) -> distill::Result<distill::report::Report> {
    match &args.resume {
        Some(out) => distill::resume(
            out,
            args.teacher.as_deref(),
            args.teacher_cache.as_deref(),
            verbosity,
            args.stop_after_steps,
            launch,
        ),
        None => distill::run(
            &TrainOptions {
                // empty: the cfg's teacher.hf (WrittenCfg::teacher)
                teacher: args.teacher.unwrap_or_default(),
                student: args.student.expect("clap requires --student"),
                out: args.out,
                overwrite: args.overwrite,
                device: args.device,
                baseline: args.baseline,
                sets: args.sets,
                verbosity,
                stop_after: args.stop_after_steps,
                teacher_cache: args.teacher_cache,
                sync_batch_norm: args.sync_batch_norm,
                latency: args.latency,
            },
            launch,
        ),
    }
}
