//! Every cfg.toml the repository ships (the examples, the throughput benchmark's students and the
//! test fixtures) parses, validates and prices, and none is a plan that `distill` cannot train:
//! a cfg edited by hand drifts from the schema without a run noticing until a user runs it.
use std::path::{Path, PathBuf};

use estimator_wasm::memory::inputs::TeacherModel;
use estimator_wasm::{estimate, Config, Inputs};

fn shipped() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut found = Vec::new();
    for dir in [
        "examples/fashion-mnist",
        "examples/minilm",
        "examples/smollm2",
        "bench/throughput",
        "tests/fixtures",
        "tests/fixtures/text",
        "tests/fixtures/lm",
    ] {
        for entry in std::fs::read_dir(root.join(dir)).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "toml") {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

#[test]
fn every_shipped_cfg_parses_prices_and_trains() {
    let cfgs = shipped();
    let names: Vec<String> = cfgs.iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
    for want in [
        "student.toml",
        "student-pruned.toml",
        "student-narrow.toml",
        "cnn-large.toml",
        "text-student.toml",
        "lm-student.toml",
    ] {
        assert!(names.iter().any(|n| n == want), "{want} not found among {names:?}");
    }
    for path in &cfgs {
        let text = std::fs::read_to_string(path).unwrap();
        let config = Config::from_toml_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        // distill passes the teacher's exact counts from its file; a fixture cfg names none
        let teacher = TeacherModel { params: 1_000_000, buffers: 0, layers: None };
        let inputs = Inputs { teacher: Some(teacher), ..Inputs::default() };
        let plan = estimate(&config, &inputs).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(plan.params.student > 0, "{}", path.display());
        assert!(!plan.notes.iter().any(|n| n.contains("cannot train")), "{}: {:?}", path.display(), plan.notes);
    }
}

/// The pruned sentence encoder prices its 896-wide feed-forward: 2 x 384 x 640 weights and
/// 640 biases fewer per layer than student.toml, in each of its 3 layers.
#[test]
fn the_pruned_encoder_prices_its_narrower_feed_forward() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/minilm");
    let params = |name: &str| {
        let text = std::fs::read_to_string(dir.join(name)).unwrap();
        estimate(&Config::from_toml_str(&text).unwrap(), &Inputs::default()).unwrap().params.student
    };
    assert_eq!(params("student.toml") - params("student-pruned.toml"), 3 * (2 * 384 * 640 + 640));
}
