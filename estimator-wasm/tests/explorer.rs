//! The explorer's form (feature `explorer`, off by default) against the schema's rules: it reads
//! names by the same loose rule as the cfg.toml, and the sweep of a pasted cfg at the schema's
//! limits stays bounded, its depth lever refused on its own field.
//!
//! Without the feature (`cargo test -p estimator-wasm`) this file says it skipped them;
//! `cargo test -p estimator-wasm --features explorer` (run by scripts/test) runs them, with the
//! explorer's unit tests in `src/explorer/`.
#[cfg(not(feature = "explorer"))]
#[test]
fn explorer_tests_skipped_without_feature_explorer() {
    use std::io::Write;
    // straight to stderr: the test harness captures eprintln! of a passing test
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED the explorer's tests (tests/explorer.rs, src/explorer/): run \
         `cargo test -p estimator-wasm --features explorer` (scripts/test does)"
    );
}

#[cfg(feature = "explorer")]
mod form {
    use estimator_wasm::explorer::{ExplorerForm, FormField, CUSTOM};
    use estimator_wasm::schema::limits::MAX_LAYERS;
    use estimator_wasm::schema::Family;

    fn lm(student_layers: u64) -> String {
        format!(
            "[data]\ninput_shape = [16]\nclasses = 4\n[teacher]\nparams = 10\n[student]\nfamily = \"transformer\"\n\
             dropout = 0.1\n[student.transformer]\nvocab = 4\nlayers = {student_layers}\nd_model = 8\nheads = 2\n"
        )
    }

    /// The explorer's form reads the same names as the cfg.toml (JSON from the widget and links).
    #[test]
    fn the_form_matches_names_loosely() {
        let form: ExplorerForm =
            serde_json::from_str(r#"{"teacher": "GPT2", "family": "Transformer", "gpu": "h200"}"#).unwrap();
        assert_eq!(form.family, Family::Transformer);
        assert_eq!(form.config().unwrap().estimate.gpu.as_deref(), Some("H200"));
    }

    /// The explorer's whole sweep (a dozen compiled models) of a pasted cfg at the limit.
    #[test]
    fn the_sweep_of_a_pasted_cfg_at_the_limit_is_bounded() {
        let form = ExplorerForm::from_cfg(&lm(MAX_LAYERS), "H200").unwrap();
        assert_eq!(form.teacher, CUSTOM);
        let sweep = estimator_wasm::explorer::sweep::sweep(&form).unwrap();
        assert_eq!(sweep.plan.layers.len(), 8197);
        // the depth multiplier cannot take it past the limit: an error on the depth field
        let deeper = ExplorerForm { depth: 2.0, ..form };
        let e = deeper.config().unwrap_err();
        assert_eq!(
            (e.field, e.message),
            (Some(FormField::Depth), "student.transformer.layers: is 8192; must be between 1 and 4096".to_string())
        );
    }
}
