//! The plan against the CUDA caching allocator: every run recorded on a GPU
//! (`fidelity/gpu/*/runs.toml`: the run's cfg, its data statistics, what the allocator measured)
//! is priced as `distill` prices its own run on that device (`distill/src/train/memory_plan.rs`: the cfg
//! at `target = "cuda"`, the teacher's exact count, the datasets, text batch widths, the device's
//! memory and compute capability). The prediction must be within 5% of the measured peak
//! allocated bytes, and the allocator's reserved bytes (the run's requests replayed on the
//! model of `c10/cuda/CUDACachingAllocator.cpp`, `estimator-wasm/src/memory/caching_allocator.rs`)
//! within 10% of the measured peak reserved, but for the runs of [`RESERVED_MISSES`]. The table
//! prints both, and the fast bound's reserved bytes (the peak moment's segments) beside.
use std::path::{Path, PathBuf};

use estimator_wasm::schema::catalogue::cuda_device;
use estimator_wasm::schema::Target;
use estimator_wasm::{estimate, max_batch, search_replayed, Config, DatasetSize, Inputs, TeacherModel, TextWidths};
use serde::Deserialize;

#[derive(Deserialize)]
struct Fixture {
    provenance: Provenance,
    run: Vec<Run>,
}

#[derive(Deserialize)]
struct Provenance {
    device: String,
    memory_bytes: u64,
    compute_capability: u32,
    date: String,
}

#[derive(Deserialize)]
struct Run {
    name: String,
    batch: u64,
    teacher_params: u64,
    train_samples: u64,
    test_samples: u64,
    sample_bytes: u64,
    text_train: Option<Vec<(u64, u64)>>,
    text_teacher_pass: Option<Vec<(u64, u64)>>,
    text_evaluation: Option<Vec<(u64, u64)>>,
    /// Every training batch of the first epoch in the trainer's order (`fidelity/gpu/text_steps.py`).
    text_steps: Option<Vec<(u64, u64)>>,
    measured_peak_allocated_bytes: u64,
    measured_peak_reserved_bytes: u64,
    predicted_allocated_bytes_before: u64,
}

/// The recorded GPU sessions, one folder each.
fn sessions() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fidelity/gpu");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap_or_else(|e| panic!("{}: {e}", root.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("runs.toml").exists())
        .collect();
    dirs.sort();
    assert!(!dirs.is_empty(), "no recorded GPU session under {}", root.display());
    dirs
}

/// `run`'s cfg and inputs as `distill` prices them on the fixture's device (at the run's batch).
fn priced(dir: &Path, p: &Provenance, run: &Run) -> (Config, Inputs) {
    let cfg_path = dir.join(format!("{}.toml", run.name));
    let text = std::fs::read_to_string(&cfg_path).unwrap();
    let mut config = Config::from_toml_str(&text).unwrap_or_else(|e| panic!("{}: {e}", cfg_path.display()));
    // as distill prices a run on its own device
    config.estimate.target = Target::Cuda;
    let inputs = Inputs {
        batch: Some(run.batch),
        teacher: Some(TeacherModel {
            params: run.teacher_params,
            buffers: config.teacher.buffers.unwrap_or(0),
            layers: None,
        }),
        dataset: Some(DatasetSize {
            train_samples: run.train_samples,
            test_samples: run.test_samples,
            sample_bytes: run.sample_bytes,
        }),
        device: Some(cuda_device(p.memory_bytes, p.compute_capability, None)),
        text: run.text_train.as_ref().map(|train| TextWidths {
            train: train.clone(),
            teacher_pass: run.text_teacher_pass.clone().unwrap_or_default(),
            evaluation: run.text_evaluation.clone().unwrap_or_default(),
            steps: run.text_steps.clone().unwrap_or_default(),
        }),
    };
    (config, inputs)
}

/// Predicted (peak allocated, peak reserved, fast bound) bytes of `run` on the fixture's device;
/// reserved is the plan's [`estimator_wasm::Plan::reserved_replay`] (the caching allocator
/// replayed), the fast bound its `totals.reserved` (the peak moment's segments).
fn predict(dir: &Path, p: &Provenance, run: &Run) -> (u64, u64, u64) {
    let (config, inputs) = priced(dir, p, run);
    let plan = estimate(&config, &inputs).unwrap_or_else(|e| panic!("{}: {e}", run.name));
    let replayed = plan.reserved_replay.unwrap_or_else(|| panic!("{}: a CUDA plan replays the allocator", run.name));
    (plan.peak_allocated(), replayed, plan.totals.reserved)
}

/// Every recorded session's fixture, with its folder.
fn fixtures() -> Vec<(PathBuf, Fixture)> {
    sessions()
        .into_iter()
        .map(|dir| {
            let text = std::fs::read_to_string(dir.join("runs.toml")).unwrap();
            let fixture = basic_toml::from_str(&text).unwrap();
            (dir, fixture)
        })
        .collect()
}

/// Runs whose predicted reserved bytes are off by more than 10%: (name, error when listed, why).
/// Each must stay within [`MISS_BOUND`], and leaves the list once it is within 10% (the test
/// fails while a listed run is within 10%), so the list can only shrink.
const RESERVED_MISSES: &[(&str, f64, &str)] = &[
    (
        "text-fixture",
        -0.196,
        "the TorchScript teacher's layers are unknown to the plan (no teacher.arch): its passes' attention scores open segments the replay does not see",
    ),
    (
        "minilm-fp32",
        -0.122,
        "its 313 steps replayed in order (text_steps) as minilm-bf16's (-3.1%), with fp32 activations twice the size; the trainer's own requests on the CPU replay to -17.7% (bench/alloc_trace, docs/memory-model.md 7c): the rest is requests of CUDA kernels, which only the allocator's history of a CUDA run (--cuda-memory-history) names",
    ),
];

/// How far a run of [`RESERVED_MISSES`] may be off.
const MISS_BOUND: f64 = 0.25;

fn error(predicted: u64, measured: u64) -> f64 {
    (predicted as f64 - measured as f64) / measured as f64
}

#[test]
fn the_plan_holds_on_every_recorded_gpu_run() {
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    let mut failures = Vec::new();
    for (dir, fixture) in fixtures() {
        let p = &fixture.provenance;
        println!("{} ({}), {}", p.device, dir.file_name().unwrap().to_string_lossy(), p.date);
        println!(
            "{:<22} {:>6} {:>12} {:>12} {:>8} {:>9} {:>12} {:>12} {:>8} {:>8}",
            "run", "batch", "alloc MiB", "predicted", "error", "before", "reserved", "replayed", "error", "fast"
        );
        for run in &fixture.run {
            let (alloc, reserved, fast) = predict(&dir, p, run);
            let (ea, er) =
                (error(alloc, run.measured_peak_allocated_bytes), error(reserved, run.measured_peak_reserved_bytes));
            println!(
                "{:<22} {:>6} {:>12.1} {:>12.1} {:>+7.1}% {:>+8.1}% {:>12.1} {:>12.1} {:>+7.1}% {:>+7.1}%",
                run.name,
                run.batch,
                mib(run.measured_peak_allocated_bytes),
                mib(alloc),
                100.0 * ea,
                100.0 * error(run.predicted_allocated_bytes_before, run.measured_peak_allocated_bytes),
                mib(run.measured_peak_reserved_bytes),
                mib(reserved),
                100.0 * er,
                100.0 * error(fast, run.measured_peak_reserved_bytes)
            );
            if ea.abs() > 0.05 {
                failures.push(format!("{}: allocated {:+.1}% (more than 5%)", run.name, 100.0 * ea));
            }
            match RESERVED_MISSES.iter().find(|m| m.0 == run.name) {
                None if er.abs() > 0.10 => {
                    failures.push(format!("{}: reserved {:+.1}% (more than 10%)", run.name, 100.0 * er))
                }
                Some(_) if er.abs() <= 0.10 => failures.push(format!(
                    "{}: reserved {:+.1}%, within 10%: take it out of RESERVED_MISSES",
                    run.name,
                    100.0 * er
                )),
                Some(m) if er.abs() > MISS_BOUND => failures.push(format!(
                    "{}: reserved {:+.1}% (listed at {:+.1}%: {}), more than {}%",
                    run.name,
                    100.0 * er,
                    100.0 * m.1,
                    m.2,
                    100.0 * MISS_BOUND
                )),
                _ => {}
            }
        }
    }
    assert!(failures.is_empty(), "the plan misses the allocator:\n{}", failures.join("\n"));
}

/// `train.batch_size = "auto"` to the edge: on the recorded runs whose batch "auto" chose, the
/// fast bound's plan at that batch fills the target (the device's memory less
/// `estimate.safety_margin`) within 5%, and the search `distill` runs on the allocator's replay
/// ([`search_replayed`], from the fast bound's batch) chooses a batch whose replayed total fills
/// it within 5%, never past it, in at most 32 plans (its time is printed). A text run's widths
/// depend on the batch, which `distill` recomputes from its sentences; here they stay the
/// recorded ones (their rows cut to the batch). Printed next to what the run measured (its
/// reserved bytes plus the plan's CUDA context: the process's device memory as the plan counts
/// it).
#[test]
fn auto_fills_the_target_on_the_recorded_auto_runs() {
    let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
    let mut seen = 0;
    for (dir, fixture) in fixtures() {
        let p = &fixture.provenance;
        for run in fixture.run.iter().filter(|r| r.name.ends_with("-auto")) {
            seen += 1;
            let (config, inputs) = priced(&dir, p, run);
            let margin = config.estimate.safety_margin;
            let target = p.memory_bytes - (p.memory_bytes as f64 * margin).ceil() as u64;
            let plan = estimate(&config, &inputs).unwrap();
            let fill = plan.totals.total as f64 / target as f64;
            let replayed = plan.replayed_total().unwrap();
            let measured = run.measured_peak_reserved_bytes + plan.totals.cuda_context;
            println!(
                "{}: batch {} (recorded), of the {:.1} GiB target: fast bound {:.1} GiB ({:.1}%), replay {:.1} GiB ({:.1}%), measured {:.1} GiB ({:.1}%)",
                run.name,
                run.batch,
                gib(target),
                gib(plan.totals.total),
                100.0 * fill,
                gib(replayed),
                100.0 * replayed as f64 / target as f64,
                gib(measured),
                100.0 * measured as f64 / target as f64
            );
            assert!((fill - 1.0).abs() <= 0.05, "{}: the plan fills {:.1}% of the target", run.name, 100.0 * fill);
            let auto = Inputs { batch: None, ..inputs.clone() };
            let fast = max_batch(&config, &auto, &inputs.device.unwrap(), margin).unwrap().unwrap();
            let at = |b: u64| estimate(&config, &Inputs { batch: Some(b), ..inputs.clone() });
            let clock = std::time::Instant::now();
            let found = search_replayed(at, target, fast, run.train_samples).unwrap();
            let seconds = clock.elapsed().as_secs_f64();
            let b = found.batch.unwrap();
            let fill = at(b).unwrap().fit_total() as f64 / target as f64;
            println!(
                "{}: the fast bound chooses {fast}; the replay chooses {b}, filling {:.1}% of the target ({} plans, {seconds:.2} s)",
                run.name,
                100.0 * fill,
                found.evaluations
            );
            assert!((0.95..=1.0).contains(&fill), "{}: batch {b} fills {:.1}%", run.name, 100.0 * fill);
            assert!(found.evaluations <= 32, "{}: {} plans", run.name, found.evaluations);
        }
    }
    assert!(seen >= 2, "the recorded MiniLM and SmolLM2 auto runs");
}
