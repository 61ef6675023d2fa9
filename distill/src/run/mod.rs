//! One run in its output folder, `distill --teacher t.pt --student cfg.toml` (asked as
//! [`options`] says): the cfg as written (`config`), the inputs loaded and checked before any
//! output exists (`load`), the run resolved on the device (`RunSettings`), the folder with
//! `run.json` and `config.toml`, the students (`students`), then `report.json` and the folder's
//! final name; `--resume` continues an interrupted run from what its `run.json` kept.

pub mod load;
pub mod options;
pub mod plan_command;
pub mod preflight;
pub mod rundir;
pub mod train_students;
pub use options::TrainOptions;

use std::path::{Path, PathBuf};
use std::time::Instant;

use estimator_wasm::schema::{Config, Family, Norm};
use serde::{Deserialize, Serialize};

use crate::config::{HeldOutSet, WrittenCfg};
use crate::data_parallel::Launch;
use crate::host::error::{DistillError, Result};
use crate::host::progress::{Progress, Verbosity};
use crate::inputs::fingerprint::{self, Fingerprint};
use crate::inputs::teacher_cache::CacheKey;
use crate::report::{DataParallelReport, DataReport, Report, RunFacts};
use crate::run::load::Loaded;
use crate::run::preflight::{check_transformer_head, parse_device};
use crate::run::rundir::RunDir;
use crate::run::train_students::{check_baseline, Data, Students};
use crate::torch::precision::check_trainable;

/// `run.json` of an unfinished run: what `--resume` needs to continue it.
#[derive(Serialize, Deserialize)]
struct Resumable {
    options: TrainOptions,
    /// The cfg.toml's text when the run started (a resumed run uses this, not the file).
    config: String,
    /// The teacher and data files' contents when the run started (`--resume` refuses changes).
    #[serde(default)]
    inputs: Vec<Fingerprint>,
    /// Processes of the data-parallel job the run was (1: alone); its steps hold that many
    /// micro-batches, so only a job of as many can continue it.
    #[serde(default = "one")]
    world_size: usize,
}

fn one() -> usize {
    1
}

/// Runs a whole distillation and returns its report (also written to `<out>/report.json`): alone,
/// or as the rank of the data-parallel job that `launch` says (read once, by the binary).
///
/// # Errors
/// Any [`DistillError`]. Before the first checkpoint nothing is left behind; after it, the
/// `.partial` folder stays and the error says how to resume.
///
/// Under torchrun's automatic restarts (`--max-restarts`), which rerun this same command after a
/// worker fails, a restarted worker continues the run that the command started, from rank 0's
/// newest checkpoint, as `--resume` would.
pub fn run(opts: &TrainOptions, launch: &Launch) -> Result<Report> {
    start(opts, launch).map_err(|e| crate::config::overrides::pin_on_set(e, &opts.student, &opts.sets))
}

/// [`run`], before its refusals are pinned on the `--set` they come from.
fn start(opts: &TrainOptions, launch: &Launch) -> Result<Report> {
    let (cfg, teacher) = WrittenCfg::load(&opts.student, &opts.sets)?.with_teacher(&opts.teacher)?;
    let opts = &TrainOptions { teacher, ..opts.clone() };
    let out = opts.out.clone().unwrap_or_else(|| default_out(&cfg.path));
    if launch.restart() > 0 {
        let progress = Progress::new(if launch.writes_run_folder() { opts.verbosity } else { Verbosity::Quiet });
        if let Some(saved) = started_by(opts, &out) {
            progress.line(format!(
                "torchrun restart {}: continuing {} from its newest checkpoint",
                launch.restart(),
                out.display()
            ));
            if changed_since(&cfg.spec, &saved) {
                progress.warn(changed_warning(&cfg.path, &out, "the restart"));
            }
            return resume(&out, None, None, opts.verbosity, opts.stop_after, launch);
        }
        if opts.out.is_none() {
            progress.line(format!(
                "torchrun restart {}: without --out every attempt starts again in a new folder; pass --out to continue \
                 where the failed one stopped",
                launch.restart()
            ));
        }
    }
    execute(opts, cfg, &out, None, launch)
}

/// The cfg.toml text of the interrupted run in `out`'s `.partial` folder when these options
/// started it (torchrun's restarts rerun the first command, so a restarted worker finds its
/// own run).
fn started_by(opts: &TrainOptions, out: &Path) -> Option<String> {
    let saved = std::fs::read_to_string(crate::run::rundir::partial_path(out).join("run.json")).ok()?;
    let saved: Resumable = serde_json::from_str(&saved).ok()?;
    let same = serde_json::to_value(&saved.options).ok() == serde_json::to_value(absolute(opts, out)).ok();
    same.then_some(saved.config)
}

/// True when the cfg `now` (as read from the file) is not the run's `saved` cfg.toml text, the
/// resolved one ([`crate::config::RunSettings::to_toml`]: a fixed micro-batch and the target).
fn changed_since(now: &Config, saved: &str) -> bool {
    let Ok(saved) = Config::from_toml_str(saved) else { return true };
    let mut now = now.clone();
    now.estimate.target = saved.estimate.target;
    if now.train.batch_size == estimator_wasm::schema::BatchSize::Auto {
        now.train.batch_size = saved.train.batch_size;
    }
    now != saved
}

/// The warning that `cfg_path` was edited after the run in `out` started, so that `who` (a restart
/// or `--resume`) trains the run's own copy of the cfg, not the edited file.
fn changed_warning(cfg_path: &Path, out: &Path, who: &str) -> String {
    format!(
        "warning: {} changed since the run started; {who} trains the run's own copy ({}); to train the edited cfg, start \
         a new run (another --out)",
        cfg_path.display(),
        crate::run::rundir::partial_path(out).join("config.toml").display()
    )
}

/// Continues the interrupted run whose `--out` was `out`; `teacher`, when given, is where the
/// run's teacher file is now (it was moved or copied elsewhere since the run started), and
/// `cache` the `--teacher-cache` folder to use instead of the run's own.
///
/// # Errors
/// [`DistillError::Usage`] when `out` has no interrupted run; then as [`run`].
pub fn resume(
    out: &Path,
    teacher: Option<&Path>,
    cache: Option<&Path>,
    verbosity: Verbosity,
    stop_after: Option<u64>,
    launch: &Launch,
) -> Result<Report> {
    // a job's ranks above 0 read rank 0's folder, which rank 0 holds
    let rundir = RunDir::reopen(out, launch.writes_run_folder())?;
    let out = &rundir.out.clone();
    let saved = rundir.path("run.json");
    let text = std::fs::read_to_string(&saved).map_err(|e| DistillError::io(&saved, e))?;
    let saved: Resumable =
        serde_json::from_str(&text).map_err(|e| DistillError::Usage(format!("{}: {e}", saved.display())))?;
    let mut opts = saved.options;
    if let Some(teacher) = teacher {
        opts.teacher = teacher.to_path_buf();
    }
    if let Some(cache) = cache {
        opts.teacher_cache = Some(cache.to_path_buf());
    }
    opts.verbosity = verbosity;
    opts.stop_after = stop_after;
    let spec = Config::from_toml_str(&saved.config).map_err(|e| DistillError::config(&opts.student, e.to_string()))?;
    let cfg = WrittenCfg::from_spec(&opts.student, spec)?;
    // the cfg file as it reads now (with the run's --set values): edits to it are not trained
    if launch.writes_run_folder()
        && WrittenCfg::load(&opts.student, &opts.sets).is_ok_and(|now| changed_since(&now.spec, &saved.config))
    {
        Progress::new(verbosity).warn(changed_warning(&opts.student, out, "--resume"));
    }
    let world = launch.world_size();
    if saved.world_size != world {
        return Err(DistillError::Usage(format!(
            "{}: the run was {}, and this is {}: its steps hold {} micro-batches, so resume it with as many processes \
             (torchrun --nproc-per-node={} ... --resume)",
            out.display(),
            processes(saved.world_size),
            processes(world),
            saved.world_size,
            saved.world_size
        )));
    }
    fingerprint::check_unchanged(out, &saved.inputs, &input_files(&opts, &cfg))?;
    execute(&opts, cfg, out, Some(rundir), launch)
}

fn execute(
    opts: &TrainOptions,
    cfg: WrittenCfg,
    out: &Path,
    reopened: Option<RunDir>,
    launch: &Launch,
) -> Result<Report> {
    let start = Instant::now();
    crate::host::phase_times::start_run();
    let device = parse_device(&opts.device)?;
    // what every rank refuses from the cfg alone, before any joins the group: a rank that
    // refused after joining could leave while another is still connecting, which would then
    // report the lost connection instead of the mistake
    check_trainable(&cfg.spec, &cfg.path)?;
    check_transformer_head(&cfg.spec, &cfg.path)?;
    if launch.is_job() {
        refuse_in_a_job(&cfg, launch.world_size())?;
    }
    let (strategy, device) = launch.join(device, &opts.device)?;
    // Only rank 0 writes the run folder; the others write theirs into a folder of their own that
    // goes when they finish. All may share a --teacher-cache (each writes through a file named by
    // its process id and renames it: the same outputs land whoever is last).
    let private = strategy.private_folder()?;
    let private_out = private.as_ref().map(|d| d.path().join("run"));
    let out = private_out.as_deref().unwrap_or(out);
    // a resumed job's ranks above 0 start from rank 0's checkpoints and keep their own folder
    let restore_from = reopened.as_ref().filter(|_| private.is_some()).map(|r| r.partial.clone());
    let reopened = reopened.filter(|_| private.is_none());
    let opts = &TrainOptions {
        overwrite: opts.overwrite || private.is_some(),
        verbosity: if private.is_some() { Verbosity::Quiet } else { opts.verbosity },
        ..opts.clone()
    };
    if reopened.is_none() {
        // refused before the teacher and data load (a second run on a folder still being written)
        RunDir::check_free(out, opts.overwrite)?;
    }
    if let Some(cache) = &opts.teacher_cache {
        crate::inputs::teacher_cache::check_folder(cache, out)?;
    }
    let progress = Progress::new(opts.verbosity);
    cfg.idle_keys().into_iter().for_each(|note| progress.line(note));
    let files = input_files(opts, &cfg);
    let objective = crate::train::objective::from_spec(&cfg.spec.kd); // built once: all below take it
    let mut loaded = Loaded::load(&cfg, &opts.teacher, objective.agreement(), device)?;
    loaded.warnings.iter().for_each(|w| progress.warn(w.clone()));
    check_baseline(opts.baseline, objective.agreement(), &loaded.train)?;
    let (world, nccl) = (strategy.world_size(), strategy.backend_name() == Some("nccl"));
    let (settings, memory) =
        crate::train::memory_plan::resolve(cfg, device, (world, nccl), &loaded.sizes(), &progress)?;
    if let Some(backend) = strategy.backend_name() {
        progress.line(format!(
            "data-parallel: {} processes ({} on {}), {} samples each per step, {} in all",
            world,
            backend,
            match device {
                tch::Device::Cuda(i) => format!("cuda:{i}"),
                _ => "cpu".into(),
            },
            settings.train().batch_size,
            settings.train().batch_size * world
        ));
    }
    // a degree the cfg set that the job does not have (the default 1 says nothing of a job)
    let planned = settings.estimate().data_parallel;
    if planned != 1 && planned as usize != world {
        let runs = match world {
            1 => "1 process runs".to_string(),
            n => format!("{n} processes run"),
        };
        progress.line(format!(
            "note: estimate.data_parallel = {planned} in the cfg.toml, but {runs}: the memory plan prices what runs"
        ));
    }

    let (norm, family) = (settings.student().norm, settings.student().family);
    let batch_norm = norm == Norm::Batch && family != Family::Transformer;
    match (opts.sync_batch_norm, strategy.is_data_parallel(), batch_norm) {
        (true, false, _) => progress
            .line("note: --sync-batch-norm in one process: its BatchNorm layers see the whole batch already".into()),
        (true, true, false) => {
            progress.line("note: --sync-batch-norm: the student has no BatchNorm (student.norm)".into())
        }
        _ => {}
    }

    let rundir = match reopened {
        Some(r) => r,
        None => RunDir::create(out, opts.overwrite)?,
    };
    let files: Vec<(&str, &Path)> = files.iter().map(|(role, path)| (*role, path.as_path())).collect();
    let inputs = fingerprint::all(&files)?;
    let cache_key = CacheKey::new(&inputs, settings.resolved_spec());
    let config = settings.to_toml();
    // every rank must train the same cfg on the same teacher and data
    let what = format!("{config}\n{inputs:?}\nsync_batch_norm={}", opts.sync_batch_norm);
    strategy.check_same_job(what.as_bytes())?;
    let world_size = strategy.world_size();
    let resumable = Resumable { options: absolute(opts, out), config, inputs, world_size };
    rundir.write("run.json", &serde_json::to_vec_pretty(&resumable).expect("run.json serialises"))?;
    rundir.write("config.toml", settings.portable_toml().as_bytes())?;
    let students = Students {
        settings: &settings,
        objective: objective.as_ref(),
        dir: &rundir.path(""),
        stop: &crate::host::interrupt::STOP,
        stop_after: opts.stop_after,
        baseline: opts.baseline,
        progress: &progress,
        cache_key,
        teacher_cache: opts.teacher_cache.as_deref(),
        strategy: &strategy,
        sync_batch_norm: opts.sync_batch_norm,
        restore_from: restore_from.as_deref(),
        latency: opts.latency,
    };
    for (role, set) in [("train", &loaded.train), ("test", &loaded.test)] {
        if let Some(stats) = set.text_stats() {
            let summary = crate::inputs::data::text_summary(stats, set.len() as u64);
            progress.line(format!("data: {role} {}: {summary}", set.path().display()));
        }
    }
    if let Some(init) = &loaded.teacher_init {
        progress.line(init.summary());
    }
    let data = Data { train: &loaded.train, test: &loaded.test, teacher_weights: loaded.teacher_weights.as_ref() };
    match students.distil(&mut loaded.teacher, &data) {
        Ok(distilled) => {
            // the device's peak FLOP/s (on CPU a matmul in the run's compute dtype, timed: inside
            // the wall time, as other)
            let precision = settings.train().precision;
            let peak = memory.is_some().then(|| crate::report::utilisation::device_peak(device, precision));
            // every fact of the report is known now: it is built once, here
            let (phases, wall_seconds) = crate::host::phase_times::finish()
                .unwrap_or_else(|| (Default::default(), start.elapsed().as_secs_f64()));
            // a sample's FLOPs: for text, every training batch at its own padded width
            let utilisation = memory.as_ref().zip(peak).map(|(m, peak)| {
                crate::report::utilisation::utilisation(
                    m.flops_per_sample,
                    distilled.student.samples_per_s,
                    peak,
                    m.flops_basis.clone(),
                )
            });
            let run = RunFacts {
                config: settings.cfg_path().display().to_string(),
                device,
                data: DataReport::new(&loaded.train, &loaded.test, settings.data()),
                memory,
                wall_seconds,
                phases,
                output_dir: rundir.out.display().to_string(),
                data_parallel: strategy.backend_name().map(|backend| DataParallelReport {
                    world_size,
                    backend,
                    micro_batch: settings.train().batch_size as u64,
                    global_batch: (settings.train().batch_size * world_size) as u64,
                }),
                utilisation,
            };
            let report = Report::new(run, distilled);
            let json = serde_json::to_string_pretty(&report).expect("report serialises");
            rundir.write("report.json", json.as_bytes())?;
            crate::report::html::write(&report, &rundir.path(""))?;
            // run.json goes only once the run has its name: a failed rename stays resumable
            let kept = rundir.kept();
            let partial = rundir.partial.clone();
            let done =
                rundir.commit().map_err(|e| if kept { e.resumable_in_job(out, &partial, world_size) } else { e })?;
            let _ = std::fs::remove_file(done.join("run.json"));
            Ok(report)
        }
        Err(e) if rundir.kept() => Err(e.resumable_in_job(out, &rundir.partial, world_size)),
        Err(e) => Err(e),
    }
}

/// The files whose content a resumed run must find unchanged, by role.
fn input_files(opts: &TrainOptions, cfg: &WrittenCfg) -> Vec<(&'static str, PathBuf)> {
    let mut files = vec![("teacher", opts.teacher.clone()), ("data.train", cfg.data.train.clone())];
    if let HeldOutSet::File(test) = &cfg.data.held_out {
        files.push(("data.test", test.clone()));
    }
    files.extend(cfg.data.tokenizer.clone().map(|t| ("data.tokenizer", t)));
    // read when a student starts from step 0: the baseline of a resumed run, or a run resumed
    // before its first checkpoint
    files.extend(cfg.init.clone().map(|init| ("student.init", init)));
    files
}

/// Options with absolute paths, so `--resume` works from any folder.
fn absolute(opts: &TrainOptions, out: &Path) -> TrainOptions {
    let abs = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    TrainOptions {
        teacher: abs(&opts.teacher),
        student: abs(&opts.student),
        out: Some(abs(out)),
        teacher_cache: opts.teacher_cache.as_deref().map(abs),
        // a relative file path set with --set names a file of the folder it was typed in
        sets: crate::config::overrides::absolute_file_sets(&opts.sets),
        ..opts.clone()
    }
}

/// `runs/<cfg stem>-<UTC time>`.
fn default_out(cfg: &Path) -> PathBuf {
    let stem = cfg.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "run".into());
    let now = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string().replace(':', "-");
    PathBuf::from("runs").join(format!("{stem}-{now}"))
}

/// What a data-parallel job of `world` processes refuses before its ranks join the group: an
/// `"auto"` micro-batch (each rank would measure its own).
fn refuse_in_a_job(cfg: &WrittenCfg, world: usize) -> Result<()> {
    use estimator_wasm::schema::BatchSize;
    if cfg.spec.train.batch_size == BatchSize::Auto {
        return Err(DistillError::config(
            &cfg.path,
            format!(
                "train.batch_size = \"auto\" in a data-parallel job of {world} processes: each would measure its own \
                 size; set train.batch_size to a number (each process's micro-batch)"
            ),
        ));
    }
    Ok(())
}

/// "one process" or "a data-parallel job of N processes".
fn processes(world: usize) -> String {
    if world == 1 {
        "one process".into()
    } else {
        format!("a data-parallel job of {world} processes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_text_runs_tokenizer_is_one_of_its_fingerprinted_inputs() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/minilm/student.toml");
        let cfg = WrittenCfg::load(&path, &[]).unwrap();
        let opts = TrainOptions::quiet_cpu("t.pt", path.clone());
        // the cfg's `../../data/minilm/...`, resolved lexically (no `folder/..` in the paths)
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let data = |name: &str| root.join("data/minilm").join(name);
        assert_eq!(
            input_files(&opts, &cfg),
            [
                ("teacher", PathBuf::from("t.pt")),
                ("data.train", data("train.txt")),
                ("data.test", data("test.txt")),
                ("data.tokenizer", data("tokenizer.json")),
            ]
        );
    }

    #[test]
    fn a_restart_notes_a_cfg_edited_since_the_run_started() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/digits-student.toml");
        let spec = WrittenCfg::load(&path, &[]).unwrap().spec;
        let mut resolved = spec.clone();
        resolved.estimate.target = estimator_wasm::schema::Target::Cpu;
        assert!(!changed_since(&spec, &resolved.to_toml_string()), "the resolved target is no change");
        let edited = WrittenCfg::load(&path, &["train.lr=0.02".to_string()]).unwrap().spec;
        assert!(changed_since(&edited, &resolved.to_toml_string()));
        let auto = WrittenCfg::load(&path, &["train.batch_size=\"auto\"".to_string()]).unwrap().spec;
        assert!(!changed_since(&auto, &resolved.to_toml_string()), "auto resolved to the saved micro-batch");
    }
}
