use super::*;

/// A planner of a small MLP over `train_samples` samples on a device of `memory` bytes.
fn planner(train_samples: u64, memory: u64) -> MemoryPlanner {
    let text = "[data]\ninput_shape = [784]\nclasses = 10\n[student]\nfamily = \"mlp\"\nhidden = [256]\n";
    let spec = Config::from_toml_str(text).unwrap();
    let sizes = LoadedSizes {
        teacher_params: 100_000,
        teacher_layers: None,
        dataset: DatasetSize { train_samples, test_samples: 10, sample_bytes: 784 },
        text: None,
    };
    let mut planner = MemoryPlanner::on(Device::Cpu, &spec, 1, false, &sizes).unwrap();
    planner.capacity.gpu.memory = memory;
    planner
}

#[test]
fn a_batch_larger_than_the_train_set_is_planned_at_the_train_set() {
    let quiet = Progress::new(crate::host::progress::Verbosity::Quiet);
    let small = planner(100, u64::MAX);
    let asked = small.plan(1_000_000, false, Path::new("cfg.toml"), &quiet).unwrap();
    let real = small.plan(100, false, Path::new("cfg.toml"), &quiet).unwrap();
    assert_eq!(asked.batch, 100);
    assert_eq!(asked, real);
    // The same batch on a train set that holds it is priced as asked, and costs more.
    let big = planner(2_000_000, u64::MAX).plan(1_000_000, false, Path::new("cfg.toml"), &quiet).unwrap();
    assert_eq!(big.batch, 1_000_000);
    assert!(big.predicted_total_bytes > asked.predicted_total_bytes);
    // a job of 2 processes: a rank holds at most its share of 101 samples, 51
    let mut job = planner(101, u64::MAX);
    job.priced.estimate.data_parallel = 2;
    assert_eq!(job.plan(1_000_000, false, Path::new("cfg.toml"), &quiet).unwrap().batch, 51);
    assert_eq!(job.plan(40, false, Path::new("cfg.toml"), &quiet).unwrap().batch, 40);
}

/// The recorded H200 run `fm-fp32` (`estimator-wasm/fidelity/gpu/h200-2026-12-04-b/`: the
/// Fashion-MNIST CNN, fp32, cached teacher logits) planned as `distill` plans it on a CUDA
/// device of `memory` bytes with compute capability 9.
fn fm_fp32_on_cuda(memory: u64) -> MemoryPlanner {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../estimator-wasm/fidelity/gpu/h200-2026-12-04-b");
    let spec = Config::from_toml_str(&std::fs::read_to_string(root.join("fm-fp32.toml")).unwrap()).unwrap();
    let gpu = cuda_device(memory, 9, None);
    let mut priced = spec.clone();
    priced.estimate.target = Target::Cuda;
    let inputs = Inputs {
        batch: None,
        teacher: Some(counted_teacher(421_738, &spec)),
        dataset: Some(DatasetSize { train_samples: 60_000, test_samples: 10_000, sample_bytes: 784 }),
        device: Some(gpu),
        text: None,
    };
    MemoryPlanner { priced, inputs, capacity: Capacity { name: "cuda:0".into(), gpu }, text: None }
}

/// At the run's batch of 128 on the H200 the report's reserved bytes are the allocator's
/// replay, 186 MiB (the run measured 188 MiB), not the peak moment's segments, and its total
/// is that replay plus the CUDA context.
#[test]
fn a_cuda_plan_reports_the_replayed_reserved_bytes() {
    let planner = fm_fp32_on_cuda(150_109_880_320);
    let quiet = Progress::new(crate::host::progress::Verbosity::Quiet);
    let memory = planner.plan(128, false, Path::new("fm-fp32.toml"), &quiet).unwrap();
    let plan = estimate(&planner.priced, &planner.inputs_at(128)).unwrap();
    assert_eq!(memory.predicted_reserved_bytes, 186 << 20);
    assert_eq!(Some(memory.predicted_reserved_bytes), plan.reserved_replay);
    // the total is what "auto" fits: the replay plus the H200's CUDA context (no NCCL on
    // one device), not the fast bound's peak moment plus its 10% reserve
    assert_eq!(plan.totals.nccl, 0);
    assert_eq!(memory.predicted_total_bytes, (186 << 20) + plan.totals.cuda_context);
    assert_eq!(memory.predicted_total_bytes, plan.fit_total());
    assert_ne!(memory.predicted_total_bytes, plan.totals.total);
    // the fast bound is another figure: the report shows the replay, not it
    assert_ne!(plan.totals.reserved, 186 << 20);
    // and its parts are the replay's: they sum to that total, with no flat 10% reserve
    let part = |name: &str| memory.predicted_breakdown.iter().find(|(n, _)| n == name).map(|&(_, b)| b);
    assert_eq!(memory.predicted_breakdown.iter().map(|(_, b)| b).sum::<u64>(), memory.predicted_total_bytes);
    assert_eq!(part("fragmentation"), None);
    assert_eq!(part("cuda_context"), Some(plan.totals.cuda_context));
    let tensors: u64 = plan.peak.iter().map(|(_, b)| b).sum();
    assert_eq!(part("allocator_cache"), Some((186 << 20) - tensors));
}

/// On the CPU, where nothing is replayed, the parts sum to the fast bound's total: the peak
/// moment's tensors.
#[test]
fn a_cpu_plans_parts_sum_to_its_total() {
    let quiet = Progress::new(crate::host::progress::Verbosity::Quiet);
    let memory = planner(1_000, u64::MAX).plan(64, false, Path::new("cfg.toml"), &quiet).unwrap();
    let sum: u64 = memory.predicted_breakdown.iter().map(|(_, b)| b).sum();
    assert_eq!(sum, memory.predicted_total_bytes);
    // host memory has no caching allocator's segments and no fragmentation reserve: the
    // tensors alone (the MLP's 814,120 B of weights and their gradients, Adam's two states...)
    assert_eq!((sum, memory.predicted_reserved_bytes), (6_960_736, 6_960_736));
    assert_eq!(
        &memory.predicted_breakdown[..3],
        &[
            ("student_weights".to_string(), 814_120),
            ("gradients".to_string(), 814_120),
            ("optimizer_states".to_string(), 1_628_240)
        ]
    );
    assert!(memory.predicted_breakdown.iter().all(|(n, _)| n != "allocator_cache" && n != "fragmentation"));
}

/// "auto" on CUDA fills the device by the replay: on a 4 GiB device (3.8 GiB after the 5%
/// margin) the batch it chooses needs at most that by its replayed total and the next one
/// more (21,901 here, where the fast bound's batch of 23,071 overshoots by the replay).
#[test]
fn auto_on_cuda_fills_the_device_by_the_replay() {
    let planner = fm_fp32_on_cuda(4 << 30);
    let budget = (4u64 << 30) - ((4u64 << 30) as f64 * planner.priced.estimate.safety_margin).ceil() as u64;
    let b = planner.largest_batch(Path::new("fm-fp32.toml")).unwrap();
    let at = |b: u64| estimate(&planner.priced, &planner.inputs_at(b)).unwrap();
    assert!(at(b).fit_total() <= budget && at(b + 1).fit_total() > budget, "batch {b}");
    // the fast bound's reserve is too small here: its batch needs more than the budget
    let fast = max_batch(&planner.priced, &planner.inputs, &planner.capacity.gpu, 0.05).unwrap().unwrap();
    assert_eq!((b, fast), (21_901, 23_071));
    assert!(at(fast).fit_total() > budget);
}

/// A planner on the CPU of a 1-block text encoder (d 4, 1 head, MLP 4, 4-wide embeddings,
/// rows at most 16 tokens) over 10 sentences of 1..=10 tokens, length-bucketed, one epoch,
/// its teacher known by its 1,000 parameters and run online unless `cached`.
fn text_planner(cached: bool) -> MemoryPlanner {
    text_job(cached, 1)
}

/// [`text_planner`]'s run as a job of `world` processes.
fn text_job(cached: bool, world: usize) -> MemoryPlanner {
    let spec = Config::from_toml_str(&format!(
        "[data]\ntokenizer = \"t.json\"\ninput_shape = [16]\nclasses = 4\nbucket_by_length = true\n\
         [teacher]\nparams = 1000\ncache_logits = {cached}\n\
         [student]\nfamily = \"transformer\"\nactivation = \"gelu\"\n[student.transformer]\nvocab = 8\nlayers = 1\n\
         d_model = 4\nheads = 1\nmlp_width = 4\nmax_positions = 16\nhead = \"embedding\"\n\
         [kd]\nobjective = \"embedding_mse\"\nalpha = 1.0\n[train]\nepochs = 1\nbatch_size = 4\n"
    ))
    .unwrap();
    let sizes = LoadedSizes {
        teacher_params: 1000,
        teacher_layers: None,
        dataset: DatasetSize { train_samples: 10, test_samples: 2, sample_bytes: 64 },
        text: Some(TextLengths { train: (1..=10).collect(), test: vec![3, 5] }),
    };
    MemoryPlanner::on(Device::Cpu, &spec, world, false, &sizes).unwrap()
}

/// A job is planned at its own number of processes, not the cfg's `estimate.data_parallel`
/// (1 here): two ranks of 2 rows pad their own shares of each global batch of 4 ([1, 2]
/// [3, 4], [5, 6] [7, 8], [9] [10]), where one process cuts five batches of 2.
#[test]
fn a_job_is_planned_at_its_own_number_of_processes() {
    let widths = |p: &MemoryPlanner| {
        let mut steps = p.inputs_at(2).text.unwrap().steps;
        steps.sort_unstable_by_key(|s| s.1);
        steps
    };
    let job = text_job(true, 2);
    assert_eq!(job.priced.estimate.data_parallel, 2);
    assert_eq!(widths(&job), vec![(2, 4), (2, 8), (1, 10)]);
    assert_eq!(widths(&text_planner(true)), vec![(2, 2), (2, 4), (2, 6), (2, 8), (2, 10)]);
    // its FLOPs are every rank's rows at their share's width: 3 steps, not 6 batches
    let (_, basis) = job.flops_per_sample(2).unwrap();
    let steps = "exact over the epochs' padded batches: each rank's share of the 3 steps of its epoch over 2 processes";
    assert!(basis.starts_with(steps), "{basis}");
    // over Gloo a rank holds no NCCL buffers; over NCCL its 512 MiB are priced (on CUDA)
    let mut cuda = job.priced.clone();
    assert_eq!(cuda.estimate.nccl_mib, Some(0));
    cuda.estimate.target = Target::Cuda;
    let inputs = Inputs { device: Some(cuda_device(1 << 37, 9, None)), ..job.inputs_at(2) };
    assert_eq!(estimate(&cuda, &inputs).unwrap().totals.nccl, 0);
    cuda.estimate.nccl_mib = None; // as MemoryPlanner::on leaves it for an NCCL job
    assert_eq!(estimate(&cuda, &inputs).unwrap().totals.nccl, 512 << 20);
}

/// A text run's sample costs the rows-weighted mean of its batches' FLOPs, each batch at its
/// own width: sorted into one pool, batches of 4 cut 1..=10 tokens into [1-4], [5-8] and
/// [9, 10], 4 rows 4 wide, 4 rows 8 wide and 2 rows 10 wide. One row at width s (d = 4):
/// qkv 2 s 4 12 = 96 s, q k^T and probs v 4 s^2 4 = 16 s^2, the projection, fc1 and fc2
/// 32 s each: 192 s + 16 s^2 forward, twice that backward; the loss 12 x 4 = 48; the online
/// teacher, known by its count, 2 x 1,000 per token = 2,000 s.
#[test]
fn a_text_runs_sample_costs_its_batches_at_their_own_widths() {
    let quiet = Progress::new(crate::host::progress::Verbosity::Quiet);
    let student = |s: f64| 192.0 * s + 16.0 * s * s;
    let per_width = |s: f64| 3.0 * student(s) + 48.0 + 2000.0 * s;
    assert_eq!((per_width(4.0), per_width(8.0), per_width(10.0)), (11_120.0, 23_728.0, 30_608.0));
    // (4 x 11,120 + 4 x 23,728 + 2 x 30,608) / 10
    let mean = (4.0 * per_width(4.0) + 4.0 * per_width(8.0) + 2.0 * per_width(10.0)) / 10.0;
    assert_eq!(mean, 20_060.8);
    let planner = text_planner(false);
    let plan = planner.plan(4, false, Path::new("cfg.toml"), &quiet).unwrap();
    let f = plan.flops_per_sample;
    // (4 x 1,024 + 4 x 2,560 + 2 x 3,520) / 10; the teacher at the mean width, 6.8 tokens
    assert_eq!(f.student_forward, 2_137.6);
    assert_eq!(f.student_backward, 2.0 * f.student_forward);
    assert_eq!((f.loss, f.teacher_forward, f.recompute), (48.0, 13_600.0, 0.0));
    assert_eq!(f.model, mean);
    assert_eq!(f.hardware, mean);
    // not the widest batch's width for every row, which the estimator's step gives
    let step = estimate(&planner.priced, &planner.inputs_at(4)).unwrap().flops;
    assert_eq!(step.model as f64 / 4.0, per_width(10.0));
    assert_eq!(
        plan.flops_basis,
        "exact over the epochs' padded batches: each of the 3 training batches of its epoch (the trainer's order) at its own rows and width; 6.8 padded tokens per row on average, the widest batch 10"
    );
    // cached teacher logits: no teacher on the steps, at any width
    let cached = text_planner(true).plan(4, false, Path::new("cfg.toml"), &quiet).unwrap().flops_per_sample;
    assert_eq!((cached.teacher_forward, cached.model), (0.0, 6_460.8));
}

#[test]
fn text_gives_the_first_epochs_steps_in_order_and_the_batches_that_can_peak() {
    let spec = Config::from_toml_str(
        "[data]\ntokenizer = \"t.json\"\ninput_shape = [16]\nclasses = 4\nbucket_by_length = true\n\
         [student]\nfamily = \"transformer\"\nactivation = \"gelu\"\n[student.transformer]\nvocab = 8\nlayers = 1\n\
         d_model = 4\nheads = 1\nmlp_width = 4\nhead = \"embedding\"\n[kd]\nobjective = \"embedding_mse\"\n\
         [train]\nepochs = 2\neval_batch_size = 3\n",
    )
    .unwrap();
    // 10 sentences of 1..=10 tokens in batches of 4: each epoch cuts [1-4] [5-8] [9, 10]
    // (widths 4, 8, 10) in its own order
    let lengths = TextLengths { train: (1..=10).collect(), test: vec![7, 3, 1, 6, 2, 5, 4] };
    let text = text_widths(&lengths, &spec, Some(4));
    assert_eq!(text.steps, step_widths(&lengths.train, 4, 1, 1, 0, true));
    let mut epoch = text.steps.clone();
    epoch.sort_unstable_by_key(|s| s.1);
    assert_eq!(epoch, vec![(4, 4), (4, 8), (2, 10)]);
    assert_eq!(text.train, vec![(4, 8), (2, 10)]);
    // the passes in length order, 3 rows at a time: [1-3] [4-6] [7-9] [10]; test [1-3] [4-6] [7]
    assert_eq!(text.teacher_pass, vec![(3, 9), (1, 10)]);
    assert_eq!(text.evaluation, vec![(3, 6), (1, 7)]);
    let unbatched = text_widths(&lengths, &spec, None);
    assert!(unbatched.steps.is_empty() && unbatched.train.is_empty());
    // two ranks of 2 rows: the same global batches of 4, each rank padded to its own share:
    // [1, 2] [3, 4], [5, 6] [7, 8], [9] [10]; a rank's replay meets the larger share of each
    let mut spec = spec;
    spec.estimate.data_parallel = 2;
    let text = text_widths(&lengths, &spec, Some(2));
    let mut steps = text.steps.clone();
    steps.sort_unstable_by_key(|s| s.1);
    assert_eq!(steps, vec![(2, 4), (2, 8), (1, 10)]);
    assert_eq!(text.train, vec![(2, 8), (1, 10)]);
}

#[test]
fn the_cuda_runtime_is_priced_as_the_catalogue_prices_the_same_generation() {
    let (t4, h200) = (estimator_wasm::gpu("T4").unwrap(), estimator_wasm::gpu("H200").unwrap());
    assert_eq!(cuda_device(t4.memory, 7, None).cublas_workspace, t4.cublas_workspace);
    assert_eq!(cuda_device(h200.memory, 9, None).cublas_workspace, h200.cublas_workspace);
    assert_eq!(cuda_device(1, 9, None).cuda_context, h200.cuda_context);
}
