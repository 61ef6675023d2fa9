//! The estimator against hand counts and published figures.
use estimator_wasm::memory::batch::search;
use estimator_wasm::schema::arch::{self, checkpoint_segments};
use estimator_wasm::schema::Checkpointing;
use estimator_wasm::{
    estimate, gpu, max_batch, Cat, Config, DatasetSize, EstimateError, Inputs, MemoryModel, Moment, Plan,
};

fn config(text: &str) -> Config {
    Config::from_toml_str(text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

fn moment(plan: &Plan, p: Moment) -> &estimator_wasm::memory::MomentBytes {
    plan.moments.iter().find(|x| x.moment == p).unwrap_or_else(|| panic!("no moment {p:?}"))
}

const TINY: &str = "[data]\ninput_shape = [4]\nclasses = 3\n[student]\nfamily = \"mlp\"\nhidden = [5]\n\
    [teacher]\nparams = 10\ncache_logits = false\n[train]\nbatch_size = 2\neval_batch_size = 2\n\
    [estimate]\ntarget = \"cpu\"\n";

/// A 4-5-3 ReLU MLP, fp32 AdamW, batch 2, on CPU (exact bytes), counted by hand.
#[test]
fn tiny_mlp_by_hand() {
    let plan = estimate(&config(TINY), &Inputs::default()).unwrap();
    // fc1 4*5+5, head 5*3+3 = 43 parameters: 4 B weights, 4 B grads, 8 B AdamW moments
    assert_eq!(plan.params.student, 43);
    assert_eq!((plan.model_states.weights, plan.model_states.grads, plan.model_states.optimizer), (172, 172, 344));
    // saved: fc1's input x (2*4*4 = 32), ReLU's output (2*5*4 = 40; the head's input is the same
    // storage); the loss: CE log-probs 24, labels 16, total_weight 4, KD log_softmax(s/T) 24 and
    // exp(log_softmax(t/T)) 24
    let saved: Vec<(&str, u64)> = plan.layers.iter().map(|l| (l.id.as_str(), l.saved_bytes)).collect();
    assert_eq!(saved, [("fc1", 32), ("fc1_act", 40), ("head", 0), ("loss", 92)]);
    // fc1's backward: weights, teacher, AdamW, batch (indices 16, x 32), logits (24 + 24), its input
    // 32, every gradient 172, its output's 40; above the start (saved 164 + KL's one gradient 24)
    let backward = moment(&plan, Moment::Backward);
    assert_eq!(backward.layer.as_deref(), Some("fc1"));
    assert_eq!(backward.requested, 172 + 40 + 344 + 48 + 48 + 32 + 172 + 40);
    assert_eq!(backward.categories.get(Cat::Activations), 32);
    assert_eq!(backward.categories.get(Cat::BackwardTransient), 40);
    // the optimiser step: + all gradients (172) + 3 x the largest tensor (fc1.weight, 80 B)
    let step = moment(&plan, Moment::OptimizerStep);
    assert_eq!(step.requested, 172 + 40 + 344 + 48 + 48 + 172 + 240);
    assert_eq!(plan.peak_moment, Moment::OptimizerStep);
    // the teacher's working set without an architecture: input 32 + logits 24 + fp32 copy 24
    assert_eq!(moment(&plan, Moment::TeacherForward).categories.get(Cat::TeacherTransient), 80);
    // on CPU there is no allocator, context or fragmentation
    assert_eq!(plan.totals.total, plan.totals.requested);
    assert!(plan.notes.iter().any(|n| n.contains("lower bound")), "{:?}", plan.notes);
}

#[test]
fn cuda_rounds_every_tensor_and_adds_the_runtime() {
    let cpu = estimate(&config(TINY), &Inputs::default()).unwrap();
    let cuda = estimate(&config(&TINY.replace("target = \"cpu\"", "gpu = \"T4\"")), &Inputs::default()).unwrap();
    assert_eq!(cuda.peak.get(Cat::StudentWeights), 4 * 512); // 4 parameter tensors, each rounded to 512 B
    assert_eq!(cuda.totals.cuda_context, 768 << 20);
    // the main thread's cuBLAS workspace (8320 KiB) opens a 20 MiB segment; autograd's thread's
    // (from the first backward on) is priced at its size; small tensors one 2 MiB segment
    assert_eq!(cuda.peak.get(Cat::CublasWorkspace), 2 * 8320 * 1024);
    assert_eq!(cuda.totals.reserved, (20 << 20) + 8320 * 1024 + (2 << 20));
    assert_eq!(cuda.totals.fragmentation, cuda.totals.reserved.div_ceil(10));
    let replay = (cuda.reserved_replay, cpu.reserved_replay); // replayed: both workspaces in one 20 MiB
    assert_eq!(replay, (Some((20 << 20) + (2 << 20)), None));
    assert!(cuda.totals.total > cpu.totals.total && cuda.fit.unwrap().fits);
}

/// Korthikanti et al. 2022 (arXiv:2205.05198), section 4.1: with 16-bit activations, 1-byte
/// dropout masks and math attention, a transformer layer saves `sbh(34 + 5as/h)`, and with
/// tensor parallelism `sbh(10 + 24/t + 5as/(ht))`. The estimator adds the norms' fp32 statistics
/// (2 x 2 x 4 bytes per token) that the paper leaves out.
#[test]
fn korthikanti_per_layer_activations() {
    let (s, h, a, b) = (128u64, 256u64, 8u64, 4u64);
    for t in [1u64, 2, 4] {
        let c = config(&format!(
            "[data]\ninput_shape = [{s}]\nclasses = 1000\n[student]\nfamily = \"transformer\"\nactivation = \"gelu\"\n\
             dropout = 0.1\n[student.transformer]\nvocab = 1000\nlayers = 2\nd_model = {h}\nheads = {a}\n\
             attention = \"math\"\nattention_dropout = 0.1\n[kd]\nalpha = 0.0\n[train]\nprecision = \"pure_bf16\"\n\
             batch_size = {b}\n[estimate]\ntensor_parallel = {t}\n"
        ));
        let plan = MemoryModel::new(&c, &Inputs::default()).unwrap().plan(b).unwrap();
        let per_layer: u64 = plan.layers.iter().filter(|l| l.id.starts_with("blk1_")).map(|l| l.saved_bytes).sum();
        let sbh = s * b * h;
        let expected = sbh * 10 + sbh * 24 / t + 5 * a * s * s * b / t + 16 * s * b;
        assert_eq!(per_layer, expected, "t = {t}");
        if t == 1 {
            assert_eq!(per_layer, sbh * (34 + 5 * a * s / h) + 16 * s * b);
        }
    }
}

/// Variants of the same formula (`docs/memory-model.md` section 3): no dropout gives
/// `sbh(32 + 2as/h)`, flash attention replaces the `5as^2b` term by a `4asb` logsumexp.
#[test]
fn korthikanti_variants_without_dropout_and_with_flash() {
    let (s, h, a, b) = (64u64, 128u64, 4u64, 2u64);
    let layer = |dropout: f64, kernel: &str| {
        let c = config(&format!(
            "[data]\ninput_shape = [{s}]\nclasses = 100\n[student]\nfamily = \"transformer\"\nactivation = \"gelu\"\n\
             dropout = {dropout}\n[student.transformer]\nvocab = 100\nlayers = 1\nd_model = {h}\nheads = {a}\n\
             attention = \"{kernel}\"\nattention_dropout = {dropout}\n[kd]\nalpha = 0.0\n\
             [train]\nprecision = \"pure_bf16\"\nbatch_size = {b}\n"
        ));
        let plan = MemoryModel::new(&c, &Inputs::default()).unwrap().plan(b).unwrap();
        plan.layers.iter().filter(|l| l.id.starts_with("blk1_")).map(|l| l.saved_bytes).sum::<u64>() - 16 * s * b
    };
    let sbh = s * b * h;
    assert_eq!(layer(0.0, "math"), sbh * (32 + 2 * a * s / h));
    assert_eq!(layer(0.1, "flash"), sbh * 34 + 4 * a * s * b);
}

/// `docs/memory-model.md` section 8, measured with saved_tensors_hooks on CPU: a 4-layer pre-LN
/// transformer (h 256, 4 heads, V 1000, b 4, s 128, fp32, causal SDPA) with P = 3,672,552
/// parameters saves 36,728,836 bytes; at the start of the backward AdamW holds 8P and the CE
/// backward 2 x the logits.
#[test]
fn memory_model_section_8_measurement() {
    let c = config(
        "[data]\ninput_shape = [128]\nclasses = 1000\n[student]\nfamily = \"transformer\"\nactivation = \"gelu\"\n\
         [student.transformer]\nvocab = 1000\nlayers = 4\nd_model = 256\nheads = 4\nattention = \"flash\"\n\
         [kd]\nalpha = 0.0\n[train]\nbatch_size = 4\n[estimate]\ntarget = \"cpu\"\n",
    );
    let model = MemoryModel::new(&c, &Inputs::default()).unwrap();
    assert_eq!(model.saved_bytes(4).unwrap(), 36_728_836);
    let plan = model.plan(4).unwrap();
    assert_eq!(plan.params.student, 3_672_552);
    let start = moment(&plan, Moment::Backward);
    assert_eq!(start.categories.get(Cat::StudentWeights), 14_690_208);
    assert_eq!(start.categories.get(Cat::OptimizerStates), 29_380_416);
    assert_eq!(start.categories.get(Cat::LossTransient), 4_096_000);
    assert_eq!(start.categories.get(Cat::Gradients), 0, "set-to-none: no gradient at the backward start");
    // distill also keeps the student logits (b s V x 4) alive, which the measurement freed
    assert_eq!(start.categories.get(Cat::Logits), 2_048_000);
}

#[test]
fn data_parallel_plans_on_paper() {
    let base = "[data]\ninput_shape = [1024]\nclasses = 10\n[student]\nfamily = \"mlp\"\nhidden = [4096, 4096]\n\
                [kd]\nalpha = 0.0\n[train]\nbatch_size = 8\n";
    let states = |extra: &str| {
        let plan =
            estimate(&config(&format!("{base}[estimate]\ntarget = \"cpu\"\n{extra}")), &Inputs::default()).unwrap();
        let buckets = moment(&plan, Moment::OptimizerStep).categories.get(Cat::DdpBuckets);
        (plan.model_states, buckets)
    };
    let p: u64 = 1024 * 4096 + 4096 + 4096 * 4096 + 4096 + 4096 * 10 + 10;
    let (single, no_buckets) = states("");
    assert_eq!((single.weights, single.grads, single.optimizer, no_buckets), (4 * p, 4 * p, 8 * p, 0));
    // DDP keeps a second copy of the gradients in its buckets unless they are views
    assert_eq!(states("data_parallel = 8").1, 4 * p);
    assert_eq!(states("data_parallel = 8\nbucket_view = true").1, 0);
    // ZeRO 1/2/3 shard optimiser states, then gradients, then weights
    let z = |stage: u64| states(&format!("data_parallel = 8\nzero_stage = {stage}")).0;
    let shard = p.div_ceil(8);
    assert_eq!(z(1).optimizer, 8 * shard);
    assert_eq!((z(2).grads, z(2).weights), (4 * shard, 4 * p));
    assert_eq!(z(3).weights, 4 * shard);
}

#[test]
fn pipeline_stages_hold_micro_batches_in_flight() {
    let c = |p: u64| {
        config(&format!(
            "[data]\ninput_shape = [256]\nclasses = 10\n[student]\nfamily = \"mlp\"\nhidden = [512, 512, 512]\n\
             [kd]\nalpha = 0.0\n[train]\nbatch_size = 64\n[estimate]\ntarget = \"cpu\"\npipeline_stages = {p}\n"
        ))
    };
    let one = estimate(&c(1), &Inputs::default()).unwrap();
    let two = estimate(&c(2), &Inputs::default()).unwrap();
    assert!(two.model_states.weights < one.model_states.weights);
    assert_eq!(two.layers.iter().map(|l| l.stage).max(), Some(1));
    assert!(matches!(
        estimate(&c(99), &Inputs::default()),
        Err(EstimateError::Invalid { key, .. }) if key == "estimate.pipeline_stages"
    ));
}

#[test]
fn checkpointing_keeps_only_segment_inputs() {
    // arch::checkpoint_segments is the trainer's definition: round(sqrt(13)) = 4 segments
    let segs = checkpoint_segments(13, Checkpointing::Sqrt).unwrap();
    assert_eq!(segs, vec![0..4, 4..7, 7..10, 10..13]);
    assert_eq!(checkpoint_segments(13, Checkpointing::Segments(20)).unwrap().len(), 13);
    assert_eq!(checkpoint_segments(13, Checkpointing::None), None);
    assert_eq!(arch::split(7, 3), vec![0..3, 3..5, 5..7]);

    let text = "[data]\ninput_shape = [1, 28, 28]\nclasses = 10\n[student]\nfamily = \"cnn\"\nchannels = [32, 64]\n\
                hidden = [128]\nnorm = \"batch\"\n[kd]\nalpha = 0.0\n[train]\nbatch_size = 64\n[estimate]\ntarget = \"cpu\"\n";
    let none = MemoryModel::new(&config(text), &Inputs::default()).unwrap();
    let sqrt = MemoryModel::new(
        &config(&text.replace("norm = \"batch\"", "norm = \"batch\"\ncheckpointing = \"sqrt\"")),
        &Inputs::default(),
    )
    .unwrap();
    let (a, k) = (none.saved_bytes(64).unwrap(), sqrt.saved_bytes(64).unwrap());
    assert!(k * 3 < a, "checkpointing keeps {k} of {a} bytes");
    let plan = sqrt.plan(64).unwrap();
    // 13 layers in 4 segments of 4, 3, 3 and 3 layers
    let kept: Vec<&str> =
        plan.layers.iter().filter(|l| l.kept_bytes.is_some_and(|k| k > 0)).map(|l| l.id.as_str()).collect();
    assert_eq!(kept, ["conv1", "conv2", "conv2_pool", "fc1_norm"]);
    assert_eq!(plan.layers[0].kept_bytes, Some(64 * 784 * 4));
}

#[test]
fn pruning_masks_cost_a_byte_per_weight() {
    let text =
        "[data]\ninput_shape = [100]\nclasses = 10\n[student]\nfamily = \"mlp\"\nhidden = [50]\n[kd]\nalpha = 0.0\n\
                [estimate]\ntarget = \"cpu\"\n";
    let masks = |extra: &str| {
        let plan = estimate(&config(&format!("{text}{extra}")), &Inputs::default()).unwrap();
        moment(&plan, Moment::OptimizerStep).categories.get(Cat::PruneMasks)
    };
    assert_eq!(masks(""), 0);
    assert_eq!(masks("prune_mask = \"bool\"\n[prune]\nsparsity = 0.5\n"), 100 * 50 + 50 * 10);
    assert_eq!(masks("prune_mask = \"float\"\n[prune]\nsparsity = 0.5\n"), 4 * (100 * 50 + 50 * 10));
    assert_eq!(masks("[prune]\nmethod = \"structured\"\nsparsity = 0.5\n"), 0);
    let shrunk = arch::structured(&config(text).student, 0.5);
    assert_eq!(shrunk.hidden, vec![25]);
    // the summary: magnitude pruning keeps the shapes, structured pruning shrinks them
    let plan = estimate(&config(&format!("{text}[prune]\nsparsity = 0.5\n")), &Inputs::default()).unwrap();
    let p = plan.pruning.unwrap();
    assert_eq!((p.dense_params, p.final_params, p.mask_bytes), (5560, 5560, 5500));
    assert_eq!(p.nonzero_params, 5560 - 2750);
    let plan =
        estimate(&config(&format!("{text}[prune]\nmethod = \"structured\"\nsparsity = 0.5\n")), &Inputs::default())
            .unwrap();
    let p = plan.pruning.unwrap();
    // 100 -> 25 -> 10: 2525 + 260
    assert_eq!((p.final_params, p.mask_bytes, p.final_model_states.weights), (2785, 0, 4 * 2785));
}

#[test]
fn the_teacher_is_priced_in_its_own_precision() {
    let text = |precision: &str| {
        format!(
            "[data]\ninput_shape = [32]\nclasses = 50257\n[student]\nfamily = \"transformer\"\n[student.transformer]\n\
             vocab = 50257\nlayers = 2\nd_model = 128\nheads = 2\n[teacher]\npreset = \"gpt2\"\nprecision = \"{precision}\"\n\
             cache_logits = false\n[train]\nbatch_size = 2\n"
        )
    };
    let fp32 = estimate(&config(&text("fp32")), &Inputs::default()).unwrap();
    let bf16 = estimate(&config(&text("bf16")), &Inputs::default()).unwrap();
    assert_eq!(fp32.params.teacher, 124_439_808);
    let weights = |p: &Plan| moment(p, Moment::Loss).categories.get(Cat::TeacherWeights);
    assert_eq!(weights(&fp32), (124_439_808u64 * 4).div_ceil(512) * 512);
    assert_eq!(weights(&bf16), (124_439_808u64 * 2).div_ceil(512) * 512);
    assert!(moment(&fp32, Moment::TeacherForward).categories.get(Cat::TeacherTransient) > 0);
    // distill's exact count overrides the preset's
    let exact = Inputs {
        teacher: Some(estimator_wasm::TeacherModel { params: 7, buffers: 0, layers: None }),
        ..Inputs::default()
    };
    assert_eq!(estimate(&config(&text("fp32")), &exact).unwrap().params.teacher, 7);
}

#[test]
fn cached_logits_and_resident_datasets() {
    let text = "[data]\ninput_shape = [1, 28, 28]\nclasses = 10\n[student]\nfamily = \"cnn\"\nchannels = [8]\n\
                [teacher]\npreset = \"fashion-mnist-cnn\"\n[train]\nbatch_size = 128\n";
    let data = DatasetSize { train_samples: 60_000, test_samples: 10_000, sample_bytes: 784 };
    let plan = estimate(&config(text), &Inputs { dataset: Some(data), ..Inputs::default() }).unwrap();
    let step = moment(&plan, Moment::OptimizerStep);
    // uint8 images and int64 labels of both sets, each tensor rounded to 512 B
    let r = |x: u64| x.div_ceil(512) * 512;
    assert_eq!(step.categories.get(Cat::Dataset), r(60_000 * 784) + r(60_000 * 8) + r(10_000 * 784) + r(10_000 * 8));
    // the cached teacher logits (N x C x 4) and the teacher's test predictions
    assert_eq!(step.categories.get(Cat::TeacherLogitCache), r(60_000 * 40) + r(10_000 * 8));
    assert!(plan.moments.iter().any(|p| p.moment == Moment::TeacherCache));
    assert!(!plan.moments.iter().any(|p| p.moment == Moment::TeacherForward));
}

/// The batch search: closed form, then verified; `b` fits and `b + 1` does not.
#[test]
fn max_batch_is_verified_step_by_step() {
    let text =
        "[data]\ninput_shape = [3, 64, 64]\nclasses = 100\n[student]\nfamily = \"cnn\"\nchannels = [64, 128, 256]\n\
                hidden = [512]\nnorm = \"batch\"\n[teacher]\nparams = 25000000\n[train]\nbatch_size = \"auto\"\n\
                eval_batch_size = 64\n";
    let c = config(text);
    let t4 = gpu("T4").unwrap();
    let model = MemoryModel::new(&c, &Inputs::default()).unwrap();
    let found = search(&model, t4, 0.05).unwrap();
    let b = found.batch.unwrap();
    assert!(b > 1 && b <= found.closed_form, "{found:?}");
    let fits = |b: u64| model.plan(b).unwrap().totals.total <= found.budget;
    assert!(fits(b) && !fits(b + 1), "{found:?}");
    assert!(found.evaluations < 64);
    assert_eq!(max_batch(&c, &Inputs::default(), t4, 0.05).unwrap(), Some(b));
    // "auto" with a GPU estimates at that batch
    let mut with_gpu = c.clone();
    with_gpu.estimate.gpu = Some("T4".into());
    assert_eq!(estimate(&with_gpu, &Inputs::default()).unwrap().batch, b);
    // a larger card takes a larger batch; a MIG slice a smaller one
    let h200 = search(&model, gpu("H200").unwrap(), 0.05).unwrap().batch.unwrap();
    let mig = search(&model, gpu("A100-40GB-MIG-1g.5gb").unwrap(), 0.05).unwrap().batch.unwrap();
    assert!(mig < b && b < h200, "{mig} {b} {h200}");
    // "auto" without a batch or a GPU is an error, not a guess
    assert!(matches!(estimate(&c, &Inputs::default()), Err(EstimateError::Invalid { .. })));
}

#[test]
fn nothing_fits_gives_none() {
    // a preset that cannot read the data is a config error
    let e = Config::from_toml_str(
        "[data]\ninput_shape = [1024]\nclasses = 10\n[student]\nfamily = \"mlp\"\n[teacher]\npreset = \"fashion-mnist-cnn\"\n",
    )
    .unwrap_err();
    assert!(e.to_string().starts_with("teacher.preset"), "{e}");
    let c = config(
        "[data]\ninput_shape = [1024]\nclasses = 10\n[student]\nfamily = \"mlp\"\nhidden = [65536, 65536]\n\
         [teacher]\nparams = 1000\n",
    );
    assert_eq!(max_batch(&c, &Inputs::default(), gpu("T4").unwrap(), 0.05).unwrap(), None);
}

#[test]
fn typed_errors_never_panics() {
    let base =
        "[data]\ninput_shape = [16]\nclasses = 4\n[student]\nfamily = \"mlp\"\nhidden = [8]\n[teacher]\nparams = 10\n";
    // a zero size, a negative size, a missing field
    assert!(matches!(
        Config::from_toml_str(&base.replace("[8]", "[0]")),
        Err(estimator_wasm::SpecError::Invalid { .. })
    ));
    assert!(matches!(
        Config::from_toml_str(&base.replace("[8]", "[-8]")),
        Err(estimator_wasm::SpecError::Parse { .. })
    ));
    assert!(matches!(
        Config::from_toml_str(&base.replace("classes = 4\n", "")),
        Err(estimator_wasm::SpecError::Parse { .. })
    ));
    // batch 0 and an absurd batch: train.batch_size's own rule
    let model = MemoryModel::new(&config(base), &Inputs::default()).unwrap();
    let batch_rule = |b: u64| {
        let message = format!("is {b}; must be between 1 and 1099511627776");
        EstimateError::Spec(estimator_wasm::SpecError::Invalid { key: "train.batch_size".into(), message })
    };
    assert_eq!(model.plan(0).unwrap_err(), batch_rule(0));
    assert_eq!(model.plan(u64::MAX).unwrap_err(), batch_rule(u64::MAX));
    assert_eq!(model.totals(u64::MAX / 3).unwrap_err(), batch_rule(u64::MAX / 3));
    // a 1-trillion-parameter student is priced (16 TB of model states) and does not fit
    let huge = config(
        "[data]\ninput_shape = [1000000]\nclasses = 10\n[student]\nfamily = \"mlp\"\nhidden = [1000000]\n\
         [teacher]\nparams = 10\n[train]\nbatch_size = 1\n[estimate]\ngpu = \"H200\"\n",
    );
    let plan = estimate(&huge, &Inputs::default()).unwrap();
    assert!(plan.params.student > 1_000_000_000_000);
    assert!(!plan.fit.unwrap().fits);
    // on 1024 GPUs with DDP buckets and ZeRO-3, still priced (in bounded time) and typed
    for zero in 0..=3 {
        let mut c = huge.clone();
        c.estimate.data_parallel = 1024;
        c.estimate.zero_stage = zero;
        assert!(estimate(&c, &Inputs::default()).is_ok(), "zero {zero}");
    }
    // beyond 2^64 bytes: a typed overflow (2^24 weights of 4 bytes at 2^40 samples)
    let absurd = config(
        "[data]\ninput_shape = [16777216]\nclasses = 10\n[student]\nfamily = \"mlp\"\nhidden = [16777216]\n\
         [teacher]\nparams = 10\n",
    );
    let e = MemoryModel::new(&absurd, &Inputs::default()).unwrap().plan(1 << 40).unwrap_err();
    assert_eq!(
        e.to_string(),
        "the step at micro-batch 1099511627776 overflows 64-bit bytes (more than 16 EiB): the plan is too large to price"
    );
    // unknown GPU: the error lists the catalogue
    let e = Config::from_toml_str(&format!("{base}[estimate]\ngpu = \"V100\"\n")).unwrap_err().to_string();
    assert!(e.contains("estimate.gpu") && e.contains("H100-80GB"), "{e}");
}

#[test]
fn plans_serialise_to_json_in_bytes() {
    let plan = estimate(&config(TINY), &Inputs::default()).unwrap();
    let json: serde_json::Value = serde_json::to_value(&plan).unwrap();
    assert_eq!(json["peak_phase"], "optimizer_step");
    assert_eq!(json["params"]["student"], 43);
    assert_eq!(json["layers"][3]["id"], "loss");
    assert!(json["phases"].as_array().unwrap().iter().all(|p| p["categories"].is_object()));
    assert_eq!(json["peak"]["gradients"], 172);
}

#[test]
fn the_text_table_names_every_layer_and_the_verdict() {
    let text = TINY.replace("target = \"cpu\"", "gpu = \"T4\"");
    let table = estimate(&config(&text), &Inputs::default()).unwrap().to_table();
    for needle in ["fc1", "fc1_act", "head", "loss", "optimizer step", "T4", "fits", "total"] {
        assert!(table.contains(needle), "{needle} missing:\n{table}");
    }
}

/// Under tensor parallelism an mlp splits its weights but keeps activations and logits whole; a
/// transformer's head is vocab-parallel.
#[test]
fn tensor_parallel_splits_weights_not_mlp_activations() {
    let text = |t: u64| {
        format!(
            "[data]\ninput_shape = [64]\nclasses = 10\n[student]\nfamily = \"mlp\"\nhidden = [128]\n[kd]\nalpha = 0.0\n\
             [train]\nbatch_size = 4\n[estimate]\ntarget = \"cpu\"\ntensor_parallel = {t}\n"
        )
    };
    let (one, two) = (
        estimate(&config(&text(1)), &Inputs::default()).unwrap(),
        estimate(&config(&text(2)), &Inputs::default()).unwrap(),
    );
    assert_eq!(two.model_states.weights * 2, one.model_states.weights);
    let saved = |p: &Plan| p.layers.iter().map(|l| l.saved_bytes).collect::<Vec<_>>();
    assert_eq!(saved(&one), saved(&two));
    let lm = |t: u64| {
        let c = config(&format!(
            "[data]\ninput_shape = [16]\nclasses = 64\n[student]\nfamily = \"transformer\"\n[student.transformer]\nvocab = 64\n\
             layers = 1\nd_model = 32\nheads = 2\n[kd]\nalpha = 0.0\n[train]\nbatch_size = 2\n[estimate]\ntarget = \"cpu\"\n\
             tensor_parallel = {t}\n"
        ));
        estimate(&c, &Inputs::default()).unwrap().layers.last().unwrap().saved_bytes
    };
    // CE log-probs b*s*V*4 halve; labels (b*s*8) and total_weight do not
    assert_eq!(lm(1) - lm(2), 2 * 16 * 64 * 4 / 2);
}

/// The example sentence encoder (examples/minilm/student.toml) at its batch of 64 on CPU,
/// counted by hand (docs/memory-model.md, section 3, "Sentence encoders").
#[test]
fn minilm_example_encoder_by_hand() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/minilm/student.toml");
    let text = std::fs::read_to_string(path).unwrap() + "\n[estimate]\ntarget = \"cpu\"\n";
    let plan = estimate(&config(&text), &Inputs::default()).unwrap();
    assert_eq!(plan.batch, 64);
    let (b, s, h, i) = (64u64, 128u64, 384u64, 1536u64);
    // embeddings (vocab + positions + 2 token types) and their norm; per layer: qkv + proj and a
    // norm, fc1 + fc2 and a norm; no head (classes = d_model)
    let per_layer = (4 * h * h + 4 * h + 2 * h) + (2 * h * i + i + h + 2 * h);
    assert_eq!(plan.params.student, (30522 + 512 + 2) * h + 2 * h + 3 * per_layer);
    let saved = |id: &str| plan.layers.iter().find(|l| l.id == id).unwrap_or_else(|| panic!("{id}")).saved_bytes;
    let sh = s * h * 4; // one fp32 [s, h] tensor
                        // post-norm attention: x, q, k, v, softmax (12 heads x s^2), out-projection input, residual sum, statistics
    assert_eq!(saved("blk2_attn"), b * (sh * 6 + 12 * s * s * 4 + s * 8));
    // post-norm MLP: x, GELU input and output (s x i), residual sum, statistics
    assert_eq!(saved("blk2_mlp"), b * (sh * 2 + 2 * s * i * 4 + s * 8));
    assert_eq!(saved("pool"), b * (s * 4 + 4), "the float mask and the token count");
    assert_eq!(saved("normalize"), b * (h * 4 + 8), "x, its norm and the clamped norm");
    assert_eq!(saved("loss"), 2 * b * h * 4, "MSE saves the fp32 embedding and the teacher's");
    assert!(plan.notes.iter().any(|n| n.contains("S = 128 tokens")), "{:?}", plan.notes);
    assert!(!plan.notes.iter().any(|n| n.contains("cannot train")), "{:?}", plan.notes);
    // the teacher's cached embeddings: N x E fp32 (and 8 B per test sample), like the logit cache
    let dataset = DatasetSize { train_samples: 10_000, test_samples: 100, sample_bytes: s * 8 };
    let plan = estimate(&config(&text), &Inputs { dataset: Some(dataset), ..Inputs::default() }).unwrap();
    assert_eq!(plan.peak.get(Cat::TeacherLogitCache), 10_000 * h * 4 + 100 * 8);
}

/// From ZeRO-1 on each GPU updates only its shard of every parameter, so the update's
/// temporaries (3 x the largest tensor for a loop over parameters) are 3 x its shard.
#[test]
fn zero_shards_the_updates_temporaries() {
    let step_transient = |dp: u64, zero: u64| {
        let text =
            TINY.replace("hidden = [5]", "hidden = [1000]") + &format!("data_parallel = {dp}\nzero_stage = {zero}\n");
        let plan = estimate(&config(&text), &Inputs::default()).unwrap();
        moment(&plan, Moment::OptimizerStep).categories.get(Cat::StepTransient)
    };
    // fc1.weight, 4 x 1000 fp32 elements, is the largest tensor
    assert_eq!(step_transient(1, 0), 3 * 4000 * 4);
    assert_eq!(step_transient(8, 0), 3 * 4000 * 4, "DDP: every GPU updates every element");
    for zero in [1, 2, 3] {
        assert_eq!(step_transient(8, zero), 3 * 500 * 4, "ZeRO-{zero} on 8 GPUs");
    }
    assert_eq!(step_transient(3, 1), 3 * 1334 * 4, "a shard rounds up");
}

/// A language model's chunked loss (`kd.loss_chunk`) prices the loss tensors of one chunk of
/// positions instead of the whole sequence, plus two fp32 gradients of the final hidden
/// states; the teacher's logits stay whole. S = 64, V = 1000, d = 32, batch 2, fp32 on CPU.
#[test]
fn a_chunked_token_loss_prices_one_chunk() {
    let lm =
        "[data]\ntokenizer = \"t.json\"\ninput_shape = [64]\nclasses = 1000\n[student]\nfamily = \"transformer\"\n\
              [student.transformer]\nvocab = 1000\nlayers = 1\nd_model = 32\nheads = 4\nrope_theta = 10000.0\n\
              tie_embeddings = true\nhead = \"lm\"\n[kd]\nobjective = \"logits\"\n[teacher]\nparams = 1000\n\
              cache_logits = false\n[train]\nbatch_size = 2\neval_batch_size = 2\n[estimate]\ntarget = \"cpu\"\n";
    let whole = estimate(&config(lm), &Inputs::default()).unwrap();
    let chunked = estimate(
        &config(&lm.replace("objective = \"logits\"", "objective = \"logits\"\nloss_chunk = 16")),
        &Inputs::default(),
    )
    .unwrap();
    let (b, s, v, d) = (2u64, 64u64, 1000u64, 32u64);
    let loss_saved = |p: &Plan| p.layers.iter().find(|l| l.id == "loss").unwrap().saved_bytes;
    // CE log-probs, log_softmax(s/T), exp(log_softmax(t/T)): 3 fp32 [rows, V], 64 or 16 rows
    assert_eq!(loss_saved(&whole) - loss_saved(&chunked), 3 * b * (s - 16) * v * 4);
    let at = |p: &Plan| moment(p, Moment::Backward).clone();
    let (w, c) = (at(&whole), at(&chunked));
    // the student's logits for 16 of 64 positions; the teacher's whole in both
    assert_eq!(w.categories.get(Cat::Logits) - c.categories.get(Cat::Logits), b * (s - 16) * v * 4);
    // forward KL's one loss gradient of [rows, V] fp32 (section 7b); with chunks 2 of [S, d]
    let grads = |rows: u64| b * rows * v * 4;
    assert_eq!(w.categories.get(Cat::LossTransient), grads(s));
    assert_eq!(c.categories.get(Cat::LossTransient), grads(16) + 2 * b * s * d * 4);
    assert!(chunked.totals.total < whole.totals.total);
}
