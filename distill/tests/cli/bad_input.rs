//! Bad command lines, config files and data files: one error line naming the file (or key or
//! flag) and the fix, exit code 2, and nothing left behind.
use tch::{Device, Kind, Tensor};

use crate::common::{digits_train, fixtures, Case, CFG, TEACHER};

/// A case whose train file holds `x` and `y`, which must fail with every `needle`.
fn train_file_fails_with(x: &Tensor, y: &Tensor, needles: &[&str]) {
    let case = Case::new();
    case.write_npz("digits-train.npz", x, y);
    case.fails_with(TEACHER, CFG, needles);
}

/// Digit-shaped inputs [4, 1, 8, 8] of zeros (uint8), or of shape `shape`.
fn zeros(shape: &[i64]) -> Tensor {
    Tensor::zeros(shape, (Kind::Uint8, Device::Cpu))
}

#[test]
fn missing_teacher_file() {
    Case::new().fails_with("nope.pt", CFG, &["nope.pt", "cannot read the teacher", "--teacher"]);
}

#[test]
fn corrupt_teacher_file() {
    let case = Case::new();
    std::fs::write(case.path("bad.pt"), b"this is not a zip archive").unwrap();
    case.fails_with("bad.pt", CFG, &["bad.pt", "not a TorchScript file", "torch.jit.script"]);
}

#[test]
fn missing_config_file() {
    Case::new().fails_with(TEACHER, "absent.toml", &["absent.toml", "cannot read the student config"]);
}

#[test]
fn corrupt_config_file() {
    let case = Case::new();
    std::fs::write(case.path("broken.toml"), "[data\ninput_shape = ").unwrap();
    case.fails_with(TEACHER, "broken.toml", &["broken.toml", "line 1"]);
}

#[test]
fn unknown_key_names_line_and_column() {
    let case = Case::edited("hidden = [32]", "hiden = [32]");
    case.fails_with(TEACHER, CFG, &[CFG, "line 16, column 1", "unknown field `hiden`"]);
}

#[test]
fn out_of_range_value_names_the_key() {
    Case::edited("alpha = 0.9", "alpha = 1.9").fails_with(TEACHER, CFG, &[CFG, "kd.alpha", "[0, 1]"]);
}

#[test]
fn precisions_only_the_estimator_prices_are_refused() {
    let case = Case::edited("[teacher]", "[teacher]\nprecision = \"bf16_master\"");
    case.fails_with(TEACHER, CFG, &[CFG, "teacher.precision", "for `distill plan`"]);
    // the same refusal of a value given with --set names the --set: the file does not hold it
    let case = Case::new();
    let out = case.command(TEACHER, CFG, "run").args(["--set", "train.precision=pure_bf16"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.starts_with("error: --set train.precision=pure_bf16: train.precision: distill runs ")
            && stderr.trim_end().ends_with(&format!("(over {})", case.path(CFG).display()))
            && stderr.lines().count() == 1,
        "{stderr}"
    );
    assert!(!case.path("run").exists() && !case.path("run.partial").exists());
}

#[test]
fn missing_data_file() {
    let case = Case::new();
    std::fs::remove_file(case.path("digits-test.npz")).unwrap();
    case.fails_with(
        TEACHER,
        CFG,
        &["digits-test.npz", "cannot read (", "relative to its folder, with --set to the current one"],
    );
}

#[test]
fn corrupt_data_file() {
    let case = Case::new();
    std::fs::write(case.path("digits-train.npz"), vec![7u8; 300]).unwrap();
    case.fails_with(TEACHER, CFG, &["digits-train.npz", "numpy.savez"]);
}

#[test]
fn data_files_of_an_unknown_kind_or_text_without_a_tokenizer() {
    let case = Case::edited("train = \"digits-train.npz\"", "train = \"digits-train.csv\"");
    std::fs::write(case.path("digits-train.csv"), "1,2\n").unwrap();
    case.fails_with(TEACHER, CFG, &["digits-train.csv", "use .npz (arrays x and y)", "or .txt (one sentence per line"]);
    let case = Case::edited("train = \"digits-train.npz\"", "train = \"digits-train.txt\"");
    std::fs::write(case.path("digits-train.txt"), "a man is eating food\n").unwrap();
    case.fails_with(
        TEACHER,
        CFG,
        &["digits-train.txt", "text needs data.tokenizer: set it to the teacher's tokenizer.json"],
    );
}

#[test]
fn data_without_labels() {
    let case = Case::new();
    Tensor::write_npz(&[("x", zeros(&[4, 1, 8, 8]))], case.path("digits-train.npz")).unwrap();
    case.fails_with(
        TEACHER,
        CFG,
        &["digits-train.npz: has no array named \"y\" (it holds \"x\"): save it with numpy.savez"],
    );
    // numpy.savez(path, x, y) names its arrays by position: the line says what the file holds
    let (x, y) = (zeros(&[4, 1, 8, 8]), Tensor::zeros([4], (tch::Kind::Int64, tch::Device::Cpu)));
    Tensor::write_npz(&[("arr_0", x), ("arr_1", y)], case.path("digits-train.npz")).unwrap();
    case.fails_with(
        TEACHER,
        CFG,
        &["digits-train.npz: has no array named \"x\" (it holds \"arr_0\", \"arr_1\"): save it with numpy.savez(path, x=inputs, y=labels), the arrays named by keyword"],
    );
}

#[test]
fn float_labels_are_rejected() {
    let y = Tensor::zeros([4], (Kind::Float, Device::Cpu));
    train_file_fails_with(&zeros(&[4, 1, 8, 8]), &y, &["digits-train.npz", "labels must be integer class ids"]);
}

#[test]
fn labels_of_any_int_dtype_are_accepted_but_range_is_checked() {
    let y = Tensor::from_slice(&[0i16, 3, 12, 1]);
    let needles = ["digits-train.npz", "labels y span 0..=12", "data.classes = 10"];
    train_file_fails_with(&zeros(&[4, 1, 8, 8]), &y, &needles);
}

#[test]
fn input_shape_mismatch() {
    let y = Tensor::from_slice(&[0i64, 1, 2, 3]);
    let needles = ["digits-train.npz", "[4, 1, 7, 7]", "data.input_shape = [1, 8, 8]"];
    train_file_fails_with(&zeros(&[4, 1, 7, 7]), &y, &needles);
}

#[test]
fn label_count_mismatch() {
    let y = Tensor::from_slice(&[0i64, 1, 2]);
    train_file_fails_with(&zeros(&[4, 1, 8, 8]), &y, &["digits-train.npz", "y has shape [3]", "4 samples"]);
}

#[test]
fn nan_pixels_name_the_file_and_the_row() {
    let (x, y) = digits_train();
    let x = x.to_kind(Kind::Float);
    let _ = x.get(5).get(0).get(3).get(4).fill_(f64::NAN);
    let _ = x.get(9).get(0).get(0).get(0).fill_(f64::INFINITY);
    train_file_fails_with(&x, &y, &["digits-train.npz", "x row 5 holds NaN (2 row(s) in all hold NaN or inf)"]);
}

#[test]
fn train_and_test_inputs_on_different_scales_are_refused() {
    // float train inputs 0..16 against a uint8 test file 0..255
    let case = Case::new();
    let (x, y) = digits_train();
    case.write_npz("digits-train.npz", &x.to_kind(Kind::Float), &y);
    let test = Tensor::read_npz(fixtures().join("digits-test.npz")).unwrap();
    let get = |name: &str| test.iter().find(|(n, _)| n == name).unwrap().1.shallow_clone();
    let x255 = (get("x").to_kind(Kind::Float) * 16.0).clamp(0.0, 255.0).to_kind(Kind::Uint8);
    case.write_npz("digits-test.npz", &x255, &get("y"));
    case.fails_with(
        TEACHER,
        CFG,
        &[
            "digits-test.npz: its inputs x span [0.0000, 255.0000]",
            "train file",
            "digits-train.npz",
            "[0.0000, 16.0000]",
        ],
    );
}

#[test]
fn unusable_device_names_the_flag() {
    let case = Case::new();
    for (device, needle) in
        [("tpu", "--device tpu: use auto, cpu, cuda or cuda:N"), ("cuda:7", "--device cuda:7: libtorch sees")]
    {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_distill"))
            .args(["--teacher", case.path(TEACHER).to_str().unwrap()])
            .args(["--student", case.path(CFG).to_str().unwrap(), "--device", device, "--quiet"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(needle), "{stderr}");
    }
}

#[test]
fn existing_output_needs_overwrite_and_survives_a_failed_run() {
    let case = Case::new();
    std::fs::create_dir(case.path("run")).unwrap();
    std::fs::write(case.path("run/report.json"), "earlier").unwrap();
    let (code, stderr) = case.run(TEACHER, CFG);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("--overwrite"), "{stderr}");
    // With --overwrite but a failing run, the earlier result stays.
    case.edit_config("lr = 0.01", "lr = 1e30");
    let out = case.command(TEACHER, CFG, "run").arg("--overwrite").output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("loss became") && stderr.contains("at step"), "{stderr}");
    assert_eq!(std::fs::read_to_string(case.path("run/report.json")).unwrap(), "earlier");
    assert!(!case.path("run.partial").exists());
}

#[test]
fn a_file_at_the_output_is_not_offered_overwrite_which_would_refuse_it() {
    // "run already exists: pass --overwrite", and --overwrite then refused it: one line, the
    // same with the flag or without, says what to do instead
    let case = Case::new();
    std::fs::write(case.path("run"), "notes").unwrap();
    let line = format!("error: {} is a file that is not a finished distill run (no report.json), which distill never replaces, --overwrite or not: move it away or choose another --out\n", case.path("run").display());
    for extra in [&[][..], &["--overwrite"]] {
        let out = case.command(TEACHER, CFG, "run").args(extra).output().unwrap();
        assert_eq!((out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned()), (Some(2), line.clone()));
    }
    assert_eq!(std::fs::read_to_string(case.path("run")).unwrap(), "notes");
}

#[test]
fn diverging_loss_stops_with_step_and_value() {
    let case = Case::edited("lr = 0.01", "lr = 1e30");
    case.fails_with(TEACHER, CFG, &["loss became", "at step 2 (epoch 1)", "lower train.lr"]);
}

#[test]
fn transformer_heads_that_do_not_fit_the_run_are_refused_before_any_work() {
    // The text fixture's student with a language-model head: refused with an embedding
    // objective, then (logits) against the sentence-encoder teacher, whose output is one
    // embedding per sentence; with a classifier head: planned by the estimator, not trained
    // by distill yet (the explorer says the same).
    let case = Case::new();
    let text = fixtures().join("text");
    let cfg = std::fs::read_to_string(text.join("text-student.toml")).unwrap();
    let cfg = ["text-train.txt", "text-test.txt", "tokenizer.json"]
        .iter()
        .fold(cfg, |c, f| c.replace(&format!("\"{f}\""), &format!("{:?}", text.join(f))));
    std::fs::copy(text.join("text-teacher.pt"), case.path("text-teacher.pt")).unwrap();
    let lm = cfg.replace("classes = 32", "classes = 1000").replace("head = \"embedding\"", "head = \"lm\"");
    let lm = lm
        .replace("normalize = true", "")
        .replace("max_positions = 64\n", "max_positions = 64\ntie_embeddings = true\n");
    std::fs::write(case.path("lm.toml"), &lm).unwrap();
    case.fails_with("text-teacher.pt", "lm.toml", &["lm.toml", "kd.objective", "set objective = \"logits\""]);
    // WordPiece's tokenizer has no end-of-text token to close each packed line with
    let lm = lm.replace("embedding_mse", "logits");
    std::fs::write(case.path("lm.toml"), &lm).unwrap();
    case.fails_with("text-teacher.pt", "lm.toml", &["tokenizer.json", "end-of-text token", "<|endoftext|>"]);
    // the language-model fixture's text and tokenizer, read by the sentence encoder
    let lm_files = fixtures().join("lm");
    let lm = ["text-train.txt", "text-test.txt", "tokenizer.json"]
        .iter()
        .zip(["lm-train.txt", "lm-test.txt", "tokenizer.json"])
        .fold(lm, |c, (from, to)| c.replace(&format!("{:?}", text.join(from)), &format!("{:?}", lm_files.join(to))));
    std::fs::write(case.path("lm.toml"), lm).unwrap();
    case.fails_with(
        "text-teacher.pt",
        "lm.toml",
        &[
            "text-teacher.pt",
            "expected next-token logits [B, S, vocab] = [8, 64, 1000]",
            "forward(input_ids, attention_mask) -> [B, S, vocab]",
        ],
    );
    let classifier = cfg.replace("head = \"embedding\"", "head = \"classifier\"").replace("normalize = true", "");
    std::fs::write(case.path("cls.toml"), classifier.replace("embedding_mse", "logits")).unwrap();
    case.fails_with("text-teacher.pt", "cls.toml", &["cls.toml", "head = \"classifier\"", "planned, not trained yet"]);
    assert!(!case.path("out").exists());
}

#[test]
fn an_image_teacher_for_a_text_run_is_named_as_no_model_of_text() {
    // the digits teacher takes float images [B, 1, 8, 8]; token ids [B, 64] fail inside it, and
    // data.input_shape (a window of tokens) is not what to change
    let case = Case::with_lm();
    case.fails_with(
        TEACHER,
        "lm-student.toml",
        &[
            "teacher-scripted.pt",
            "forward failed on token ids [",
            "a text run's teacher takes int64 token ids [B, S] and an attention mask [B, S]; is --teacher a model of text?",
        ],
    );
}

#[test]
fn a_student_init_that_cannot_be_read_names_the_key_and_the_path_rule() {
    for (init, why) in [("nothere.safetensors", "nothere.safetensors: cannot read ("), (".", ": a folder, not a file")]
    {
        let case = Case::edited("[student]", &format!("[student]\ninit = \"{init}\""));
        case.fails_with(TEACHER, CFG, &["student.init = ", why, "in a cfg.toml relative to its folder"]);
        assert!(!case.path("out").exists(), "{init}: nothing written");
    }
}

#[test]
fn a_student_init_missing_a_variable_lists_what_it_holds() {
    // a PyTorch state_dict saved whole (its "model." prefix): the line named the missing
    // variable alone, not what the file holds
    let case = Case::edited("[student]", "[student]\ninit = \"sd.safetensors\"");
    let w = Tensor::zeros([32, 64], (Kind::Float, Device::Cpu));
    Tensor::write_safetensors(&[("model.fc1.weight", &w), ("model.fc1.bias", &w.get(0))], case.path("sd.safetensors"))
        .unwrap();
    let needle = format!("student.init = {}: has no tensor \"", case.path("sd.safetensors").display());
    case.fails_with(
        TEACHER,
        CFG,
        &[&needle, "of this student (it holds \"model.fc1.bias\", \"model.fc1.weight\"): give it one tensor per student variable"],
    );
}

/// `kd.beta` outside [0, 1] (in the file or with --set) and a divergence with an embedding
/// objective: one line naming the key, exit 2, no output folder.
#[test]
fn a_jsd_beta_outside_zero_to_one_and_a_divergence_on_embeddings_are_refused() {
    const BETA: &str = "kd.beta: must be in [0, 1]: the teacher's weight in divergence = \"jsd\"'s mixture M = beta p_teacher + (1 - beta) p_student (0: forward KL, 0.5: symmetric JSD, 1: reverse KL)";
    let case = Case::edited("[kd]", "[kd]\ndivergence = \"jsd\"\nbeta = 1.5");
    let (code, stderr) = case.run(TEACHER, CFG);
    assert_eq!((code, stderr.trim_end()), (2, format!("error: {}: {BETA}", case.path(CFG).display()).as_str()));
    assert!(!case.path("run").exists() && !case.path("run.partial").exists());
    let case = Case::new();
    let out = case.command(TEACHER, CFG, "run").args(["--set", "kd.beta=-0.5"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let want = format!("error: --set kd.beta=-0.5: {BETA} (over {})", case.path(CFG).display());
    assert_eq!(stderr.trim_end(), want);
    assert!(!case.path("run").exists() && !case.path("run.partial").exists());
    let case = Case::edited("[kd]", "[kd]\nobjective = \"embedding_cosine\"\ndivergence = \"reverse_kl\"");
    let (code, stderr) = case.run(TEACHER, CFG);
    let want = "kd.divergence: compares two distributions over classes, and objective = \"embedding_cosine\" compares vectors: remove kd.divergence, or use objective = \"logits\" with a teacher that outputs logits";
    assert_eq!((code, stderr.trim_end()), (2, format!("error: {}: {want}", case.path(CFG).display()).as_str()));
}
