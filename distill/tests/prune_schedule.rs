//! Property test of the pruning schedule at its boundaries: for every `[prune]` table the
//! cfg.toml schema accepts (start = end, start = 0, end = the last step, a span not divisible by
//! `every_steps`, `every_steps` longer than the run, one-step runs), the trainer accepts it too,
//! every event stays within `[t0, t_end]`, sparsity never decreases, and the masks hold exactly
//! `sparsity` from `t_end` to the end of the run.
use distill::prune::PruneSchedule;
use estimator_wasm::Config;
use proptest::prelude::*;

/// The digits fixture config with `epochs` and a `[prune]` table.
fn config(epochs: u64, prune: &str) -> Result<Config, String> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/digits-student.toml");
    let text = std::fs::read_to_string(path).unwrap().replace("epochs = 3", &format!("epochs = {epochs}"));
    Config::from_toml_str(&format!("{text}\n[prune]\n{prune}\n")).map_err(|e| e.to_string())
}

/// An epoch value in `[lo, hi]`: often a boundary (lo, hi, a whole epoch), otherwise anywhere.
fn epoch_in(lo: f64, hi: f64) -> BoxedStrategy<f64> {
    prop_oneof![
        Just(lo),
        Just(hi),
        (lo.ceil() as u64..=hi.floor().max(lo.ceil()) as u64).prop_map(move |e| (e as f64).clamp(lo, hi)),
        (0.0..=1.0f64).prop_map(move |a| lo + a * (hi - lo)),
    ]
    .boxed()
}

/// (steps per epoch, epochs, start_epoch, end_epoch, every_steps, initial, target).
fn case() -> impl Strategy<Value = (u64, u64, f64, Option<f64>, u64, f64, f64)> {
    (1u64..=50, 1u64..=5, 0.0..1.0f64, 0.0..=1.0f64).prop_flat_map(|(spe, epochs, target, i)| {
        let e = epochs as f64;
        epoch_in(0.0, e).prop_flat_map(move |start| {
            let end = prop_oneof![Just(None), epoch_in(start, e).prop_map(Some)];
            let every = prop_oneof![1u64..=10, 1u64..=2 * spe * epochs + 5];
            (Just(spe), Just(epochs), Just(start), end, every, Just(i * target), Just(target))
        })
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn every_schema_valid_schedule_ends_exactly_at_the_target(
        (spe, epochs, start, end, every, initial, target) in case()
    ) {
        let end_key = end.map(|e| format!("end_epoch = {e:?}\n")).unwrap_or_default();
        let table = format!(
            "sparsity = {target:?}\ninitial_sparsity = {initial:?}\nstart_epoch = {start:?}\n{end_key}every_steps = {every}"
        );
        let spec = config(epochs, &table);
        prop_assert!(spec.is_ok(), "the schema refuses {table}: {spec:?}");
        let prune = spec.unwrap().prune.unwrap();
        let s = PruneSchedule::new(&prune, spe, epochs);
        prop_assert!(s.is_ok(), "the schema accepts but the trainer refuses {table} ({spe} steps/epoch): {s:?}");
        let s = s.unwrap();
        let total = spe * epochs;
        prop_assert!(s.t0 <= s.t_end && s.t_end <= total, "{s:?}");

        // What the trainer does: an event check before the first step, then after each step.
        let mut held = 0.0;
        let mut events = Vec::new();
        for t in 0..=total {
            let curve = s.sparsity_at(t);
            prop_assert!(curve.is_finite() && (initial..=target).contains(&curve), "sparsity_at({t}) = {curve}");
            if let Some(v) = s.event(t) {
                prop_assert!(v >= held, "sparsity falls from {held} to {v} at step {t}");
                events.push(t);
                held = v;
            }
            prop_assert_eq!(s.applied_at(t), held, "step {}", t);
        }
        prop_assert_eq!(held, target);
        prop_assert_eq!(s.applied_at(total), target);
        prop_assert_eq!(s.sparsity_at(s.t_end), target);
        prop_assert_eq!(events.last().copied(), Some(s.t_end));
        prop_assert_eq!(events[0], s.t0);
        // Grid events t0, t0 + every, ... strictly before t_end, then t_end itself.
        let grid: Vec<u64> = (s.t0..s.t_end).step_by(every as usize).chain([s.t_end]).collect();
        prop_assert_eq!(events, grid);
        let start_steps = (start * spe as f64).round() as u64;
        prop_assert_eq!(s.t0, start_steps);
        match end {
            Some(e) => prop_assert_eq!(s.t_end, (e * spe as f64).round() as u64),
            None => prop_assert_eq!(s.t_end, (3 * total).div_ceil(4).max(start_steps)),
        }
    }
}
