//! Teachers that cannot teach: wrong classes, outputs or input shapes, training mode left on,
//! NaN or overflowing logits, a missing 16-bit kernel, a teacher at chance level, and text
//! teachers whose vocabulary or positions are too small or that return NaN. Each is
//! named with its cause and fix.
use crate::common::{digits_train, fixtures, python, wrapped_teacher, Case, CFG, TEACHER};

#[test]
fn teacher_classes_differ_from_config() {
    let case = Case::edited("classes = 10", "classes = 12");
    case.fails_with(TEACHER, CFG, &[TEACHER, "data.classes = 12", "the teacher has 10 classes"]);
}

#[test]
fn a_teacher_returning_class_indices_is_told_to_return_logits() {
    let case = Case::new();
    wrapped_teacher(case.dir.path(), "argmax.pt", "return logits.argmax(1)");
    case.edit_config("output = \"logits\"", "");
    case.fails_with(
        "argmax.pt",
        CFG,
        &["argmax.pt", "a 1-D tensor of shape [8]", "expected logits [N, classes] = [8, 10]"],
    );
}

#[test]
fn teacher_output_selector_must_exist() {
    let case = Case::edited("output = \"logits\"", "output = \"scores\"");
    case.fails_with(TEACHER, CFG, &[TEACHER, "teacher.output = \"scores\"", "\"logits\""]);
}

#[test]
fn teacher_rejects_the_input_shape() {
    // The scripted teacher is a CNN for [N, 1, 8, 8]; feeding flattened [N, 64] vectors fails in
    // its first convolution, which must read as a teacher error naming the input shape.
    let case = Case::edited("input_shape = [1, 8, 8]", "input_shape = [64]");
    case.fails_with(TEACHER, CFG, &[TEACHER, "forward failed on input [8, 64]"]);
}

#[test]
fn teacher_traced_in_training_mode_is_refused() {
    // eval() cannot undo a trace: dropout stays on (outputs change from call to call) and batch
    // norm keeps normalising with batch statistics (a sample's output depends on its batch).
    let case = Case::new();
    python(
        case.dir.path(),
        "import torch
from torch import nn
torch.manual_seed(0)
x = torch.randn(4, 1, 8, 8)
drop = nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.ReLU(), nn.Dropout(0.5), nn.Linear(32, 10)).train()
torch.jit.trace(drop, x, check_trace=False).save('drop.pt')
bn = nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 10)).train()
torch.jit.trace(bn, x, check_trace=False).save('bn.pt')",
    );
    case.edit_config("output = \"logits\"", "");
    let fix = "re-export it in eval mode: call model.eval() before torch.jit.trace(model, example)";
    case.fails_with("drop.pt", CFG, &["drop.pt", "different logits for the same input on two calls", fix]);
    case.fails_with(
        "bn.pt",
        CFG,
        &["bn.pt", "change with the other samples in its batch", "a batch of 4 and of 8", fix],
    );
}

#[test]
fn teacher_nan_on_a_later_train_row_is_blamed_on_the_teacher_with_the_row() {
    // The teacher returns NaN for inputs whose first pixel is above 20 (normalised); only train
    // row 100 has one (pixel 200 -> (200 / 16 - 0.5) / 0.5 = 24), so the probe batch is clean.
    let case = Case::new();
    let nan_above_20 = "return torch.where(x.flatten(1)[:, :1] > 20, torch.full_like(logits, float('nan')), logits)";
    wrapped_teacher(case.dir.path(), "nan.pt", nan_above_20);
    let (x, y) = digits_train();
    let _ = x.get(100).get(0).get(0).get(0).fill_(200i64);
    case.write_npz("digits-train.npz", &x, &y);
    case.edit_config("output = \"logits\"", "");
    let needles = ["nan.pt", "returns NaN logits for row 100 of", "digits-train.npz", "the fault is in the teacher"];
    case.fails_with("nan.pt", CFG, &needles);
    // the same when the teacher runs on every batch instead of once into a cache
    case.edit_config("[teacher]", "[teacher]\ncache_logits = false");
    case.fails_with("nan.pt", CFG, &needles);
    // and, both ways, when data.holdout splits the file: the file's row, not the split's
    case.edit_config("test = \"digits-test.npz\"", "holdout = 0.25");
    case.fails_with("nan.pt", CFG, &needles);
    case.edit_config("cache_logits = false", "");
    case.fails_with("nan.pt", CFG, &needles);
}

#[test]
fn fp16_teacher_overflow_is_blamed_on_its_precision() {
    // Logits of about 1e5 are finite in fp32 but beyond fp16's 65504.
    let case = Case::new();
    python(
        case.dir.path(),
        "import torch
fc = torch.nn.Linear(64, 10)
with torch.no_grad():
    fc.weight.fill_(4000.0)
    fc.bias.zero_()
torch.jit.trace(torch.nn.Sequential(torch.nn.Flatten(), fc).eval(), torch.zeros(2, 1, 8, 8)).save('big.pt')",
    );
    case.edit_config("output = \"logits\"", "precision = \"fp16\"");
    case.fails_with(
        "big.pt",
        CFG,
        &["big.pt", "with teacher.precision = \"fp16\"", "in fp32 they are finite", "set teacher.precision = \"fp32\""],
    );
}

#[test]
fn a_16_bit_teacher_without_a_16_bit_kernel_is_blamed_on_its_precision() {
    // linalg.inv has no fp16 kernel: the forward fails for the precision, not the input shape
    let case = Case::new();
    python(
        case.dir.path(),
        "import torch
class T(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(64, 10)
        self.m = torch.nn.Parameter(torch.eye(10) * 2)
    def forward(self, x):
        return self.fc(x.flatten(1)) @ torch.linalg.inv(self.m)
torch.jit.script(T().eval()).save('inv.pt')",
    );
    case.edit_config("output = \"logits\"", "precision = \"fp16\"");
    case.fails_with(
        "inv.pt",
        CFG,
        &[
            "inv.pt: forward fails with teacher.precision = \"fp16\" but works in fp32",
            "(RuntimeError: linalg.inv: Low precision dtypes not supported. Got Half)",
            "set teacher.precision = \"fp32\"",
        ],
    );
}

#[test]
fn a_teacher_at_chance_level_is_reported_with_a_hint() {
    // data.scale = 1/255 on 0..16 digits squeezes every input to about -1: the teacher (98.9%
    // with scale 1/16) gets 42 of 360 right, below the most frequent class's 47.
    let case = Case::edited("scale = 0.0625", "scale = 0.00392156862745098");
    let (code, stderr) = case.run(TEACHER, CFG);
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("warning: the teacher's test accuracy 0.1167 is at chance level"), "{stderr}");
    assert!(stderr.contains("check that data.scale/mean/std"), "{stderr}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(case.path("run/report.json")).unwrap()).unwrap();
    // accuracy is a mean in f32; the chance level a ratio of counts in f64
    assert_eq!(report["teacher"]["test_accuracy"].as_f64().unwrap() as f32, 42.0 / 360.0);
    assert_eq!(report["teacher"]["chance_accuracy"].as_f64().unwrap(), 47.0 / 360.0);
    assert!(report["teacher"]["warning"].as_str().unwrap().contains("at chance level"));
    // the right scale: no warning
    case.edit_config("scale = 0.00392156862745098", "scale = 0.0625");
    std::fs::remove_dir_all(case.path("run")).unwrap();
    let (code, stderr) = case.run(TEACHER, CFG);
    assert_eq!(code, 0, "{stderr}");
    assert!(!stderr.contains("chance"), "{stderr}");
}

/// A case holding the text fixture (`text-student.toml`, its data and tokenizer of 1000 tokens)
/// and three scripted sentence encoders [B, S] -> [B, 32] (mean of token and position
/// embeddings over the mask): `small-vocab.pt` knows ids below 500, `few-positions.pt` 16
/// positions, and `nan.pt` returns NaN for a sentence holding token 980 ('##gy'), which only
/// train sentence 1913 does (none of the test file's).
fn text_case() -> Case {
    let case = Case::new();
    for f in ["text-student.toml", "text-train.txt", "text-test.txt", "tokenizer.json"] {
        std::fs::copy(fixtures().join("text").join(f), case.path(f)).unwrap();
    }
    python(
        case.dir.path(),
        "import torch
class MeanEmbedding(torch.nn.Module):
    def __init__(self, vocab: int, positions: int, nan_id: int):
        super().__init__()
        self.token = torch.nn.Embedding(vocab, 32)
        self.position = torch.nn.Embedding(positions, 32)
        self.nan_id = nan_id
    def forward(self, input_ids, attention_mask):
        h = self.token(input_ids) + self.position(torch.arange(input_ids.shape[1]).unsqueeze(0))
        m = attention_mask.unsqueeze(-1).to(h.dtype)
        e = (h * m).sum(1) / m.sum(1).clamp(min=1.0)
        bad = (input_ids == self.nan_id).any(1, keepdim=True)
        return torch.where(bad, torch.full_like(e, float('nan')), e)
torch.manual_seed(0)
for name, vocab, positions, nan_id in [('small-vocab', 500, 64, -1), ('few-positions', 1000, 16, -1), ('nan', 1000, 64, 980)]:
    torch.jit.script(MeanEmbedding(vocab, positions, nan_id).eval()).save(name + '.pt')",
    );
    case
}

#[test]
fn a_text_teacher_failing_on_the_tokens_names_its_vocabulary_or_its_positions() {
    // Both fail inside an index_select ("index out of range in self"); running the teacher
    // again on changed copies of the batch tells which table is too small, and by how much.
    let case = text_case();
    case.fails_with(
        "small-vocab.pt",
        "text-student.toml",
        &["small-vocab.pt", "but runs with ids up to 499", "set data.tokenizer to the teacher's own tokenizer.json"],
    );
    case.fails_with(
        "few-positions.pt",
        "text-student.toml",
        &["few-positions.pt", "tokens but runs on 16: the teacher has 16 positions", "set data.input_shape = [16]"],
    );
}

#[test]
fn a_text_teacher_returning_nan_is_blamed_with_the_sentence_not_the_normalisation() {
    let case = text_case();
    let needles =
        ["nan.pt", "returns NaN outputs for sentence 1913 of", "text-train.txt", "the fault is in the teacher"];
    case.fails_with("nan.pt", "text-student.toml", &needles);
}

#[test]
fn a_tokenizer_far_smaller_than_the_teachers_token_table_is_warned_about() {
    // The fixture's tokenizer has 1000 tokens; a teacher whose table has 4000 rows runs on its
    // ids, but they are likely another vocabulary's: the run warns and goes on.
    let case = text_case();
    python(
        case.dir.path(),
        "import torch
class Encoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.word_embeddings = torch.nn.Embedding(4000, 32)
    def forward(self, input_ids, attention_mask):
        m = attention_mask.unsqueeze(-1).float()
        return (self.word_embeddings(input_ids) * m).sum(1) / m.sum(1).clamp(min=1.0)
torch.manual_seed(0)
torch.jit.script(Encoder().eval()).save('wide.pt')",
    );
    let out = case.command("wide.pt", "text-student.toml", "run").args(["--set", "train.epochs=1"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let needle = format!(
        "warning: data.tokenizer {} has 1000 tokens but the teacher's token embedding word_embeddings.weight has 4000 rows",
        case.path("tokenizer.json").display()
    );
    assert!(stderr.contains(&needle), "{stderr}");
    assert!(stderr.contains("point data.tokenizer at the teacher's own tokenizer.json"), "{stderr}");
}

/// A collapsed teacher (every sentence one embedding, or nearly) trained to the end with exit 0
/// and a Spearman of null or of noise: it is refused before training, saying why.
#[test]
fn a_teacher_whose_embeddings_are_one_point_is_refused_before_training() {
    let case = text_case();
    python(
        case.dir.path(),
        "import torch
class Constant(torch.nn.Module):
    def __init__(self, wobble: float):
        super().__init__()
        self.wobble = wobble
        self.direction = torch.nn.Parameter(torch.linspace(0.5, 1.5, 32))
    def forward(self, input_ids, attention_mask):
        one = self.direction.expand(input_ids.shape[0], 32) + 0.0 * attention_mask.sum(1, keepdim=True)
        return one + self.wobble * input_ids[:, 1:2].float()
torch.jit.script(Constant(0.0).eval()).save('constant.pt')
torch.jit.script(Constant(1e-6).eval()).save('nearly.pt')",
    );
    for teacher in ["constant.pt", "nearly.pt"] {
        let needles =
            [teacher, "its embeddings of the 300 held-out sentences are all the same direction", "teaches nothing"];
        case.fails_with(teacher, "text-student.toml", &needles);
    }
}

#[test]
fn a_test_set_too_small_for_spearman_says_so() {
    // two held-out sentences make one pair: its cosines have no spread, so no rank correlation
    let case = text_case();
    std::fs::copy(fixtures().join("text/text-teacher.pt"), case.path("text-teacher.pt")).unwrap();
    let test = std::fs::read_to_string(case.path("text-test.txt")).unwrap();
    let two: String = test.lines().take(2).map(|l| format!("{l}\n")).collect();
    std::fs::write(case.path("text-test.txt"), two).unwrap();
    let (code, stderr) = case.run("text-teacher.pt", "text-student.toml");
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains("text-test.txt holds 2 sentence(s): the Spearman of pair cosines needs 3 or more"),
        "{stderr}"
    );
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(case.path("run/report.json")).unwrap()).unwrap();
    assert!(report["student"].get("spearman").is_none(), "{}", report["student"]);
    assert!(report["student"]["temperature"].is_null(), "an embedding loss has no temperature");
}

#[test]
fn alpha_zero_with_an_embedding_objective_is_refused_before_any_work() {
    // no label term is left to train: libtorch crashed on the backward of a loss without a
    // graph (exit 139, no message, the .partial folder left)
    let case = Case::new();
    for f in ["text-student.toml", "text-train.txt", "text-test.txt", "tokenizer.json", "text-teacher.pt"] {
        std::fs::copy(fixtures().join("text").join(f), case.path(f)).unwrap();
    }
    let out =
        case.command("text-teacher.pt", "text-student.toml", "run").args(["--set", "kd.alpha=0"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("kd.alpha: is 0, which leaves only the label term, and objective = \"embedding_mse\" has none: nothing would train; set alpha > 0"),
        "{stderr}"
    );
    assert!(!case.path("run").exists() && !case.path("run.partial").exists());
}

#[test]
fn teachers_whose_weights_are_constants_are_counted_and_the_report_says_how() {
    // A torch.jit.freeze'd teacher and distill's own traced student.pt hold their weights as
    // constants, no parameters: both were refused with "teacher.params: is 0", a key the cfg
    // does not hold, and `--set teacher.params=N` changed nothing.
    let case = Case::new();
    python(
        case.dir.path(),
        "import torch
torch.jit.freeze(torch.jit.load('teacher-scripted.pt').eval()).save('frozen.pt')
class Rescale(torch.nn.Module):
    def forward(self, x):
        return x.flatten(1)[:, :10] * 2.0
torch.jit.script(Rescale()).save('no-tensors.pt')",
    );
    let teacher_of = |out: &str| -> serde_json::Value {
        let text = std::fs::read_to_string(case.path(&format!("{out}/report.json"))).unwrap();
        serde_json::from_str::<serde_json::Value>(&text).unwrap()["teacher"].clone()
    };
    let ok = |out: &std::process::Output| {
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(0), "{stderr}");
    };
    ok(&case.command("frozen.pt", CFG, "frozen").args(["--set", "train.epochs=1"]).output().unwrap());
    // the conv (its BatchNorm folded in by the freeze) and the linear layer
    let t = teacher_of("frozen");
    assert_eq!((t["params"].as_u64(), t["params_source"].as_str()), (Some(2730), Some("constants")), "{t}");
    // distill's export of a 64-32-10 MLP: 64 x 32 + 32 + 32 x 10 + 10 = 2410
    std::fs::write(
        case.path("plain.toml"),
        std::fs::read_to_string(case.path(CFG)).unwrap().replace("output = \"logits\"", ""),
    )
    .unwrap();
    ok(&case.command("frozen/student.pt", "plain.toml", "again").args(["--set", "train.epochs=1"]).output().unwrap());
    let t = teacher_of("again");
    assert_eq!((t["params"].as_u64(), t["params_source"].as_str()), (Some(2410), Some("constants")), "{t}");
    // a module holding no tensor at all: the cfg's count, or a line asking for it
    let out = case.command("no-tensors.pt", "plain.toml", "none").output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("no-tensors.pt: holds no parameters, buffers or tensor constants that distill can count: give its parameter count as teacher.params in the cfg.toml"), "{stderr}");
    let set = ["--set", "teacher.params=500", "--set", "train.epochs=1"];
    ok(&case.command("no-tensors.pt", "plain.toml", "none").args(set).output().unwrap());
    let t = teacher_of("none");
    assert_eq!((t["params"].as_u64(), t["params_source"].as_str()), (Some(500), Some("cfg")), "{t}");
    // distill plan counts them alike
    let plan = |teacher: &str, sets: &[&str]| {
        let cfg = case.path("plain.toml");
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_distill"));
        c.args(["plan", "--student", cfg.to_str().unwrap(), "--teacher", case.path(teacher).to_str().unwrap()]);
        c.args(sets).output().unwrap()
    };
    let frozen = plan("frozen.pt", &[]);
    assert!(String::from_utf8_lossy(&frozen.stdout).contains(", teacher 2730;"), "{frozen:?}");
    let none = plan("no-tensors.pt", &[]);
    assert!(
        String::from_utf8_lossy(&none.stderr)
            .contains("no-tensors.pt: holds no parameters, buffers or tensor constants that distill can count"),
        "{none:?}"
    );
    let declared = plan("no-tensors.pt", &["--set", "teacher.params=500"]);
    assert!(String::from_utf8_lossy(&declared.stdout).contains(", teacher 500;"), "{declared:?}");
}
