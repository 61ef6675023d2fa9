//! Tests of the sweep: it equals the estimator on each config, its GPU rows equal
//! `max_batch_per_gpu`, its curve brackets the largest batch, its levers are priced.
use proptest::prelude::Just;

use super::*;
use crate::explorer::scenarios::{scenario, SCENARIOS};
use crate::{estimate, max_batch, DatasetSize, Inputs};

#[test]
fn groups_cover_every_category_once_and_add_up_to_the_total() {
    let mut seen: Vec<Cat> = MEMBERS.iter().flat_map(|m| m.iter().copied()).collect();
    seen.push(Cat::CublasWorkspace); // in the runtime overhead
    seen.sort_by_key(|&c| c as usize);
    assert_eq!(seen, Cat::ALL.to_vec());
    for s in &SCENARIOS {
        let form = ExplorerForm::for_scenario(s, "H200");
        let config = form.config().unwrap();
        let plan = estimate(&config, &form.inputs(&config)).unwrap();
        let b = Breakdown::of(&plan);
        let sum: u64 = b.groups().iter().map(|g| g.1).sum();
        assert_eq!(sum, plan.totals.total, "{}", s.key);
        // the seven named groups are the allocated tensors less the cuBLAS workspace
        let cublas = plan.peak.get(Cat::CublasWorkspace);
        assert_eq!(sum - b.runtime_overhead, plan.totals.allocated - cublas, "{}", s.key);
        if s.key == "gpt2" {
            assert!(b.weights > 0 && b.activations > 0 && b.teacher > 0 && b.kd_buffers > 0, "{b:?}");
        }
    }
}

#[test]
fn the_sweep_equals_the_estimator_on_each_config() {
    let mut form = ExplorerForm::for_scenario(scenario("fashion-mnist-cnn").unwrap(), "T4");
    form.width = 2.0;
    let s = sweep(&form).unwrap();
    assert_eq!(s.students.len(), SIZES.len());
    for st in &s.students {
        let config = form.config_at(st.scale).unwrap();
        let plan = estimate(&config, &form.inputs(&config)).unwrap();
        assert_eq!(st.breakdown.unwrap().total, plan.totals.total, "scale {}", st.scale);
        assert_eq!(st.params, Some(plan.params.student));
        assert_eq!(st.width, 2.0 * st.scale);
    }
    let config = form.config().unwrap();
    assert_eq!(s.plan, estimate(&config, &form.inputs(&config)).unwrap());
    let t4 = crate::gpu("T4").unwrap();
    assert_eq!(s.max_batch, max_batch(&config, &form.inputs(&config), t4, 0.05).unwrap());
    assert_eq!(s.capacity, t4.memory);
    assert_eq!(s.gpus.len(), crate::catalogue().len());
    assert_eq!(s.gpus[0].max_batch, s.max_batch, "T4 is the first catalogue GPU");
    // wider students never need less memory (the smallest ones share allocator segments)
    let totals: Vec<u64> = s.students.iter().map(|st| st.breakdown.unwrap().total).collect();
    assert!(totals.windows(2).all(|w| w[0] <= w[1]) && totals[0] < totals[4], "{totals:?}");
}

#[test]
fn gpu_rows_equal_max_batch_per_gpu() {
    for s in &SCENARIOS {
        for &family in s.families {
            for gpu in ["T4", "H200"] {
                let form = ExplorerForm { family, ..ExplorerForm::for_scenario(s, gpu) };
                let config = form.config().unwrap();
                let want = crate::max_batch_per_gpu(&config, &form.inputs(&config), 0.05).unwrap();
                let want: Vec<_> = want.iter().map(|(g, b)| (g.name, *b)).collect();
                let got: Vec<_> = sweep(&form).unwrap().gpus.iter().map(|r| (r.gpu, r.max_batch)).collect();
                assert_eq!(got, want, "{} {family:?} on {gpu}", s.key);
            }
        }
    }
}

#[test]
fn the_curve_brackets_the_largest_batch() {
    let form = ExplorerForm::default();
    let s = sweep(&form).unwrap();
    let m = s.max_batch.expect("the default student fits its GPU");
    let at = |b: u64| s.curve.iter().find(|p| p.batch == b).map(|p| p.total);
    assert!(at(m).unwrap() <= s.budget);
    assert!(at(m + 1).unwrap() > s.budget);
    assert!(s.curve.windows(2).all(|w| w[0].batch < w[1].batch && w[0].total <= w[1].total));
    assert!(s.curve.last().unwrap().batch >= 2 * m);
}

#[test]
fn levers_are_priced_like_for_like() {
    let form = ExplorerForm { precision: Precision::Fp32, ..ExplorerForm::default() };
    let s = sweep(&form).unwrap();
    let now = s.plan.totals.total;
    let lever = |name: &str| s.levers.iter().find(|l| l.lever == name).unwrap();
    let ddp = lever("data_parallel").total.unwrap();
    for l in &s.levers {
        let total = l.total.unwrap_or_else(|| panic!("{}: {:?}", l.lever, l.error));
        // ZeRO is compared with DDP on the same 8 GPUs, every other lever with the form
        let reference = if l.lever == "zero_stage" { ddp } else { now };
        assert_eq!(reference - l.saves + l.costs, total, "{}", l.lever);
        assert_eq!(l.versus.as_deref(), (l.lever == "zero_stage").then_some("8 GPUs, DDP"), "{}", l.lever);
    }
    assert_eq!(s.levers.len(), 7);
    // each lever is the estimate of the form with that one field changed
    let mut zero = form.clone();
    zero.data_parallel = 8;
    zero.zero_stage = 3;
    let plan = estimate(&zero.config().unwrap(), &Inputs::default()).unwrap();
    assert_eq!(lever("zero_stage").total, Some(plan.totals.total));
    zero.zero_stage = 0;
    assert_eq!(ddp, estimate(&zero.config().unwrap(), &Inputs::default()).unwrap().totals.total);
    assert!(lever("data_parallel").costs > 0, "8 replicas add NCCL buffers and DDP buckets");
    assert!(lever("zero_stage").saves > 0, "ZeRO-3 shards what DDP replicates");
    // on several GPUs the ZeRO lever changes the stage alone, against the form
    let s8 = sweep(&ExplorerForm { data_parallel: 8, ..form.clone() }).unwrap();
    let z = s8.levers.iter().find(|l| l.lever == "zero_stage").unwrap();
    assert_eq!((z.setting.as_str(), z.versus.as_deref(), s8.levers.len()), ("ZeRO-1", None, 6));
    assert!(lever("precision").saves > 0, "bf16 activations are smaller");
    assert!(lever("checkpointing").saves > 0);
    assert!(lever("batch").saves > 0);
    assert!(lever("optimizer").saves > 0, "SGD keeps one moment, AdamW two");
    assert!(lever("sparsity").costs > 0, "masks cost memory while training");
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]
    /// Whatever the form holds, the sweep answers (figures or a message) and never panics.
    #[test]
    fn any_form_gives_an_answer_not_a_panic(
        teacher in 0usize..SCENARIOS.len(),
        family in 0usize..2,
        width in proptest::prop_oneof![Just(-1.0), Just(f64::NAN), 1e-6..80.0f64],
        depth in 1e-3..20.0f64,
        input in proptest::prop_oneof![Just(0u64), 1u64..4096, Just(1 << 20), Just(u64::MAX)],
        batch in proptest::prop_oneof![Just(0u64), 1u64..100_000, Just(MAX_BATCH), Just(u64::MAX)],
        sparsity in -0.5..1.5f64,
        data_parallel in proptest::prop_oneof![Just(0u64), 1u64..64, Just(u64::MAX)],
        zero_stage in 0u64..6,
        checkpointing in proptest::prop_oneof![Just("none"), Just("sqrt"), Just("3"), Just("0"), Just("x")],
        gpu in proptest::prop_oneof![Just("T4"), Just("H200"), Just("A100-40GB-MIG-1g.5gb"), Just("none")],
    ) {
        let s = &SCENARIOS[teacher];
        let form = ExplorerForm {
            family: s.families[family % s.families.len()],
            width, depth, input, batch, sparsity, data_parallel, zero_stage,
            checkpointing: checkpointing.into(),
            ..ExplorerForm::for_scenario(s, gpu)
        };
        match sweep(&form) {
            Ok(sw) => {
                proptest::prop_assert_eq!(sw.students.len(), SIZES.len());
                let chosen = sw.students[CHOSEN].breakdown.map(|b| b.total);
                proptest::prop_assert_eq!(chosen, Some(sw.plan.totals.total));
            }
            Err(e) => proptest::prop_assert!(!e.message.is_empty()),
        }
    }
}

#[test]
fn a_size_that_cannot_be_priced_carries_its_error() {
    // 2^20 x 2^20 images: the chosen student (widths x8) is priced, the two wider ones are not
    let mut form = ExplorerForm::for_scenario(scenario("fashion-mnist-cnn").unwrap(), "T4");
    form.width = 8.0;
    form.input = 1 << 20;
    form.eval_batch = 1024; // its no-grad passes at 1,024 images push x16 past 2^64 bytes too
    let s = sweep(&form).unwrap();
    let overflow =
        "the step at micro-batch 128 overflows 64-bit bytes (more than 16 EiB): the plan is too large to price";
    let errors: Vec<Option<&str>> = s.students.iter().map(|st| st.error.as_deref()).collect();
    assert_eq!(errors, [None, None, None, Some(overflow), Some(overflow)]);
    let wide = &s.students[3];
    assert_eq!((wide.width, wide.params, wide.breakdown, wide.max_batch), (16.0, None, None, None));
    assert_eq!(s.students[CHOSEN].params, Some(s.plan.params.student));
    assert_eq!(s.students[CHOSEN].fits, Some(false));
}

#[test]
fn the_sweep_knows_the_training_set_of_a_scenario_with_files() {
    // the demo's Fashion-MNIST: 60,000 training images; memory alone allows far more on a T4
    let s = sweep(&ExplorerForm::opening()).unwrap();
    assert_eq!((s.train_samples, s.gpu), (Some(60_000), "RTX-4090"));
    assert!(s.max_batch.unwrap() > 60_000, "{:?}", s.max_batch);
    assert_eq!(s.untrainable, None, "the page opens on a cfg.toml distill trains");
    assert_eq!(sweep(&ExplorerForm::default()).unwrap().train_samples, None, "GPT-2's data is not known");
    let minilm = ExplorerForm::for_scenario(scenario("all-minilm-l6-v2").unwrap(), "T4");
    assert_eq!(sweep(&minilm).unwrap().train_samples, Some(152_373));
    // every largest batch the page shows is at most the 60,000 images, as distill plan lists it
    assert_eq!(s.within_data(s.max_batch), Some(60_000));
    assert_eq!(s.within_data(Some(512)), Some(512));
    assert_eq!(s.within_data(None), None);
    let gpt2 = sweep(&ExplorerForm::default()).unwrap();
    assert_eq!(gpt2.within_data(Some(1_000_000)), Some(1_000_000), "no known set, no cap");
}

#[test]
fn the_page_prices_the_opening_cfg_as_distill_plan_does_with_its_files() {
    // `distill plan` on the exported cfg.toml reads data/fashion-mnist/{train,test}.npz:
    // 60,000 and 10,000 uint8 images of 28 x 28 (`data::file_summary`), and prices them with
    // those inputs; the page must give the same bytes
    let form = ExplorerForm::opening();
    let config = Config::from_toml_str(&form.cfg_toml().unwrap()).unwrap();
    let files = DatasetSize { train_samples: 60_000, test_samples: 10_000, sample_bytes: 784 };
    let plan = estimate(&config, &Inputs { dataset: Some(files), ..Inputs::default() }).unwrap();
    let s = sweep(&form).unwrap();
    assert_eq!(s.plan.totals.total, plan.totals.total);
    // what the files add: the images and their int64 labels, (60,000 + 10,000) x (784 + 8)
    // = 55,440,000 bytes (52.9 MiB) before the allocator's rounding to 512-byte blocks and
    // 2 MiB segments; and the teacher's logits of the train set cached in fp32, 60,000 x 10 x 4
    // = 2,400,000 bytes, twice while the cache is built from its chunks, plus its 10,000 int64
    // test predictions
    let bare = estimate(&config, &Inputs::default()).unwrap();
    let data = s.plan.peak.get(Cat::Dataset);
    assert!((55_440_000..55_440_000 + 4 * (2 << 20)).contains(&data), "{data}");
    assert_eq!(Breakdown::of(&s.plan).data, data);
    assert!(
        s.plan.totals.total - bare.totals.total >= data + 2_400_000,
        "{} vs {}",
        s.plan.totals.total,
        bare.totals.total
    );
    assert!(s.plan.peak.get(Cat::TeacherLogitCache) >= 2_400_000 + 80_000);
    // the set's size is known, so no note says the cache is left out for want of it
    assert!(s.plan.notes.iter().all(|n| !n.contains("size is not known")), "{:?}", s.plan.notes);
    assert!(bare.notes.iter().any(|n| n.contains("size is not known")), "{:?}", bare.notes);
    // a scenario without known files keeps the note, and its data group is 0
    let gpt2 = sweep(&ExplorerForm::default()).unwrap();
    assert_eq!(Breakdown::of(&gpt2.plan).data, 0);
}
