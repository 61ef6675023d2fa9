//! A language model's three vocabularies against each other: the tokenizer's (`data.tokenizer`),
//! the student's (`data.classes = student.transformer.vocab`) and the width of the teacher's
//! logits, which may be padded past its tokenizer (`teacher.vocab`: rows added to round the
//! embedding up, e.g. 128 spare rows). Each mismatch is named once with both sizes and the fix,
//! the padded teacher is cut to the shared vocabulary explicitly ([`shared_vocab`]), and a
//! student wider than its tokenizer is warned about (it would learn tokens no text holds).
use tch::Tensor;

/// The vocabulary sizes a language-model run declares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VocabSizes {
    /// `data.classes` (= `student.transformer.vocab`): the student's logit width.
    pub classes: u64,
    /// Tokens of `data.tokenizer`, when one is given.
    pub tokenizer: Option<u64>,
    /// `teacher.vocab`: the teacher's logit width when it is padded past `classes`.
    pub teacher: Option<u64>,
}

/// The teacher's logits `logits` [B, S, V] cut to the vocabulary they share with the student
/// (`padded` = `(V, shared)`, from `TeacherSpec::padded_vocab`): a view of their first `shared`
/// columns. The KD loss's softmax over them renormalises the teacher's distribution over the
/// shared tokens: p_i = exp(t_i / T) / sum_{j < shared} exp(t_j / T). Logits of another width,
/// and runs without padding, pass unchanged (the shape check names the first).
pub fn shared_vocab(logits: Tensor, padded: Option<(u64, u64)>) -> Tensor {
    match padded {
        Some((full, shared)) if logits.dim() == 3 && logits.size()[2] == full as i64 => {
            logits.narrow(2, 0, shared as i64)
        }
        _ => logits,
    }
}

/// What is wrong with a language-model teacher's output of shape `size` for token ids
/// [batch, seq] under the run's vocabularies `vocab`, as [`crate::inputs::teacher::Teacher::output`]
/// returns it (a padded teacher's logits already cut by [`shared_vocab`]): expected
/// [batch, seq, classes]; `None` when right.
pub fn token_logits_problem(size: &[i64], batch: i64, seq: i64, vocab: &VocabSizes) -> Option<String> {
    let width = vocab.classes;
    Some(match *size {
        [b, s, v] if b == batch && s == seq && v == width as i64 => return None,
        [b, s, v] if b == batch && s == seq => width_problem(v as u64, vocab),
        _ => format!(
            "the teacher outputs shape {size:?} for token ids [{batch}, {seq}]; expected next-token logits [B, S, vocab] = \
             [{batch}, {seq}, {width}]: return the logits of every position (forward(input_ids, attention_mask) -> [B, S, vocab])"
        ),
    })
}

/// The one line for a teacher whose logits are `v` wide where `vocab` expects another width.
fn width_problem(v: u64, vocab: &VocabSizes) -> String {
    let classes = vocab.classes;
    let both = format!("data.classes = student.transformer.vocab = {classes}");
    let tokenizer = vocab.tokenizer.map(|n| format!(" (data.tokenizer has {n} tokens)")).unwrap_or_default();
    match vocab.teacher {
        Some(declared) if v >= classes => format!(
            "the teacher outputs logits over {v} tokens but teacher.vocab = {declared}: set teacher.vocab = {v}, the width of \
             its logits (KD compares their first {classes}, {both}{tokenizer})"
        ),
        Some(_) => format!(
            "the teacher outputs logits over {v} tokens, fewer than {both}: set both to {v}, the teacher's vocabulary, and \
             remove teacher.vocab"
        ),
        None if v > classes => format!(
            "the teacher outputs logits over {v} tokens but {both}{tokenizer}: if its last {} columns pad its vocabulary past \
             the tokenizer's, set teacher.vocab = {v} to distil over the {classes} tokens they share; if the tokenizer has {v} \
             tokens, set data.classes and student.transformer.vocab to {v}",
            v - classes
        ),
        None => format!("the teacher outputs logits over {v} tokens but {both}: set both to {v}, the teacher's vocabulary"),
    }
}

/// A warning when the student's vocabulary is wider than the tokenizer's: its last columns are
/// tokens no text holds, and KD teaches it the teacher's probabilities for them.
pub fn phantom_tokens_warning(vocab: &VocabSizes) -> Option<String> {
    let n = vocab.tokenizer.filter(|&n| n < vocab.classes)?;
    let classes = vocab.classes;
    let teacher = match vocab.teacher {
        None => format!(" and teacher.vocab = {classes}"),
        Some(_) => String::new(),
    };
    Some(format!(
        "warning: data.classes = student.transformer.vocab = {classes} but data.tokenizer has {n} tokens: the student's last {} \
         logits stand for tokens no text holds, and it learns the teacher's probabilities for them; if the teacher's vocabulary \
         is padded past its tokenizer, set data.classes = student.transformer.vocab = {n}{teacher} to distil over the {n} shared tokens",
        classes - n
    ))
}

/// What the rows of a teacher's token table `src` (`teacher` [rows, d]) against a student's
/// (`student` [rows, d]) say to change: a vocabulary padded on one side, or another vocabulary.
pub fn vocab_table_fix(src: &str, teacher: &[i64], student: &[i64]) -> String {
    let (t, s) = (teacher[0], student[0]);
    let width = match (teacher.get(1), student.get(1)) {
        (Some(a), Some(b)) if a != b => format!("; and set student.transformer.d_model = {a}"),
        _ => String::new(),
    };
    let fix = if t > s {
        format!(
            "if the teacher's rows past {s} pad its vocabulary past the tokenizer's, set teacher.vocab = {t} (its logits' width) \
             to copy and distil the {s} shared tokens; if its vocabulary has {t} tokens, set data.classes and student.transformer.vocab to {t}"
        )
    } else if t < s {
        format!(
            "the teacher's vocabulary is {t} tokens: set data.classes = student.transformer.vocab = {t}, and teacher.vocab = {s} if \
             its logits are padded to {s} columns"
        )
    } else {
        String::new()
    };
    match (fix.is_empty(), width.is_empty()) {
        (true, true) => format!("{src}: shapes differ"),
        (true, false) => width.trim_start_matches("; and ").to_string(),
        (false, _) => fix + &width,
    }
}

/// Names that end a teacher's token embedding table in common checkpoints: BERT, GPT-2, LLaMA
/// and OPT (Hugging Face), Meta's LLaMA, GPT-NeoX, T5.
const TOKEN_TABLES: [&str; 6] = [
    "word_embeddings.weight",
    "wte.weight",
    "embed_tokens.weight",
    "tok_embeddings.weight",
    "embed_in.weight",
    "shared.weight",
];

/// Names that end a teacher's output head over the vocabulary (Hugging Face's `lm_head`,
/// GPT-NeoX's `embed_out`, Meta's LLaMA `output`).
const HEADS: [&str; 4] = ["lm_head.weight", "lm_head.bias", "embed_out.weight", "output.weight"];

/// The teacher's parameters with each token table and output head of `full` rows cut to its
/// first `shared` (`padded` = `(full, shared)`), so `student.init_from_teacher` and the fitted
/// factorised head take the vocabulary the student shares with it; others unchanged.
pub fn shared_vocab_tables(params: Vec<(String, Tensor)>, padded: Option<(u64, u64)>) -> Vec<(String, Tensor)> {
    let Some((full, shared)) = padded else { return params };
    let vocab_table = |n: &str| TOKEN_TABLES.iter().chain(HEADS.iter()).any(|s| n.ends_with(s));
    params
        .into_iter()
        .map(|(n, t)| match t.dim() >= 1 && t.size()[0] == full as i64 && vocab_table(&n) {
            true => {
                let cut = t.narrow(0, 0, shared as i64);
                (n, cut)
            }
            false => (n, t),
        })
        .collect()
}

/// A warning when `tokenizer` (of `tokens` tokens) looks like another model's than the teacher
/// whose parameters are `teacher`: its token embedding table (found by name, [`TOKEN_TABLES`])
/// has more than `tokens / 0.9` rows. Ids of another vocabulary fit such a table and run, but
/// mean other words, so the student would learn from nonsense. Tables padded past their
/// tokenizer (to a multiple of 64 or 128 for speed) stay within 10%; a larger tokenizer than the
/// table fails in the teacher's forward instead ([`crate::inputs::teacher::Teacher::output`]).
pub fn tokenizer_warning(tokens: u64, teacher: &[(String, Tensor)], tokenizer: &std::path::Path) -> Option<String> {
    let (name, table) = teacher.iter().find(|(n, t)| t.dim() == 2 && TOKEN_TABLES.iter().any(|s| n.ends_with(s)))?;
    let rows = table.size()[0] as u64;
    (tokens * 10 < rows * 9).then(|| {
        format!(
            "warning: data.tokenizer {} has {tokens} tokens but the teacher's token embedding {name} has {rows} rows: \
             it may be another model's tokenizer (its ids would mean other words to the teacher); point data.tokenizer \
             at the teacher's own tokenizer.json",
            tokenizer.display()
        )
    })
}

#[cfg(test)]
mod tests {
    use tch::{Device, Kind};

    use super::*;

    fn sizes(classes: u64, tokenizer: Option<u64>, teacher: Option<u64>) -> VocabSizes {
        VocabSizes { classes, tokenizer, teacher }
    }

    /// KD over the shared vocabulary: the teacher's rows [ln 1, ln 2, ln 4 | 9] and [0, 0, 0 | -3]
    /// (the column past 3 padding) cut to 3 give p = (1/7, 2/7, 4/7) and uniform; against a
    /// uniform student, T = 1 and alpha = 1: KL = (1/7 ln(3/7) + 2/7 ln(6/7) + 4/7 ln(12/7)) / 2
    /// per predicting token = 0.0714562 (by hand). Uncut, the padding column would hold 99.9% of
    /// the teacher's mass.
    #[test]
    fn kd_over_the_shared_vocabulary_matches_the_hand_computed_value() {
        use crate::train::objective::Objective;
        let teacher = Tensor::from_slice(&[0f32, 2f32.ln(), 4f32.ln(), 9.0, 0.0, 0.0, 0.0, -3.0]).reshape([1, 2, 4]);
        let cut = shared_vocab(teacher.shallow_clone(), Some((4, 3)));
        assert_eq!(cut.size(), [1, 2, 3]);
        let student = Tensor::zeros([1, 2, 3], (Kind::Float, Device::Cpu));
        let labels = Tensor::from_slice(&[1i64, 2]).reshape([1, 2]);
        let kd = crate::train::objective::LogitKd::forward_kl(1.0, 1.0);
        let parts = kd.loss(&student, Some(&cut), Some(&labels));
        assert!((parts.kd.double_value(&[]) - 0.071_456_198_777_787_64).abs() < 1e-6, "{}", parts.kd.double_value(&[]));
        // logits of another width, and runs without padding, pass as they are
        assert_eq!(shared_vocab(teacher.shallow_clone(), Some((5, 3))).size(), [1, 2, 4]);
        assert_eq!(shared_vocab(teacher, None).size(), [1, 2, 4]);
    }

    /// Each width mismatch names both sizes once and offers teacher.vocab where the teacher is wider.
    #[test]
    fn a_padded_teacher_is_named_once_with_both_sizes_and_the_slice() {
        let padded = token_logits_problem(&[2, 8, 640], 2, 8, &sizes(512, Some(512), None)).unwrap();
        assert_eq!(
            padded,
            "the teacher outputs logits over 640 tokens but data.classes = student.transformer.vocab = 512 (data.tokenizer has \
             512 tokens): if its last 128 columns pad its vocabulary past the tokenizer's, set teacher.vocab = 640 to distil \
             over the 512 tokens they share; if the tokenizer has 640 tokens, set data.classes and student.transformer.vocab to 640"
        );
        // declared: the 640 logits reach the check cut to the 512 shared
        assert_eq!(token_logits_problem(&[2, 8, 512], 2, 8, &sizes(512, Some(512), Some(640))), None);
        let declared = token_logits_problem(&[2, 8, 700], 2, 8, &sizes(512, None, Some(640))).unwrap();
        assert!(declared.starts_with(
            "the teacher outputs logits over 700 tokens but teacher.vocab = 640: set teacher.vocab = 700"
        ));
        let narrower = token_logits_problem(&[2, 8, 500], 2, 8, &sizes(512, None, None)).unwrap();
        assert!(narrower.ends_with("set both to 500, the teacher's vocabulary"), "{narrower}");
        assert!(token_logits_problem(&[2, 640], 2, 8, &sizes(512, None, None)).unwrap().contains("[2, 8, 512]"));
        // the student's token table against the teacher's, either side padded
        assert!(vocab_table_fix("embed_tokens.weight", &[640, 32], &[512, 32]).starts_with(
            "if the teacher's rows past 512 pad its vocabulary past the tokenizer's, set teacher.vocab = 640"
        ));
        let head_only = vocab_table_fix("embed_tokens.weight", &[512, 32], &[640, 32]);
        assert!(head_only
            .starts_with("the teacher's vocabulary is 512 tokens: set data.classes = student.transformer.vocab = 512"));
        assert!(head_only.ends_with("and teacher.vocab = 640 if its logits are padded to 640 columns"), "{head_only}");
        assert!(vocab_table_fix("wte.weight", &[640, 64], &[512, 32])
            .ends_with("; and set student.transformer.d_model = 64"));
    }

    #[test]
    fn a_student_wider_than_its_tokenizer_is_warned_about() {
        let w = phantom_tokens_warning(&sizes(640, Some(512), None)).unwrap();
        assert!(w.contains("the student's last 128 logits stand for tokens no text holds"), "{w}");
        assert!(w.ends_with("set data.classes = student.transformer.vocab = 512 and teacher.vocab = 640 to distil over the 512 shared tokens"));
        assert_eq!(phantom_tokens_warning(&sizes(512, Some(512), Some(640))), None);
        assert_eq!(phantom_tokens_warning(&sizes(640, None, None)), None);
    }

    /// The token table and head of 6 rows are cut to the 4 shared; a table of another size, a
    /// layer whose rows happen to be 6, and runs without padding are left alone.
    #[test]
    fn the_teachers_vocabulary_tables_are_cut_to_the_shared_rows() {
        let t = |rows: i64| Tensor::arange(rows * 2, (Kind::Float, Device::Cpu)).reshape([rows, 2]);
        let params = || {
            vec![
                ("model.embed_tokens.weight".to_string(), t(6)),
                ("lm_head.weight".to_string(), t(6)),
                ("model.layers.0.mlp.up_proj.weight".to_string(), t(6)),
                ("wte.weight".to_string(), t(5)),
            ]
        };
        let cut = shared_vocab_tables(params(), Some((6, 4)));
        let rows: Vec<i64> = cut.iter().map(|(_, t)| t.size()[0]).collect();
        assert_eq!(rows, [4, 4, 6, 5]);
        assert!(cut[0].1.equal(&t(6).narrow(0, 0, 4)));
        let same: Vec<i64> = shared_vocab_tables(params(), None).iter().map(|(_, t)| t.size()[0]).collect();
        assert_eq!(same, [6, 6, 6, 5]);
    }

    #[test]
    fn a_tokenizer_much_smaller_than_the_teachers_table_is_warned_about() {
        let table =
            |name: &str, rows: i64| vec![(name.to_string(), Tensor::zeros([rows, 4], (Kind::Float, Device::Cpu)))];
        let path = std::path::Path::new("tok.json");
        let bert = table("0.embeddings.word_embeddings.weight", 30522);
        // a BPE tokenizer of 8,000 tokens against BERT's 30,522 rows
        assert_eq!(
            tokenizer_warning(8000, &bert, path).unwrap(),
            "warning: data.tokenizer tok.json has 8000 tokens but the teacher's token embedding \
             0.embeddings.word_embeddings.weight has 30522 rows: it may be another model's tokenizer (its ids would mean \
             other words to the teacher); point data.tokenizer at the teacher's own tokenizer.json"
        );
        // its own tokenizer, and tables padded past theirs (Pythia 50,277 in 50,304; Qwen2
        // 151,665 in 151,936)
        assert_eq!(tokenizer_warning(30522, &bert, path), None);
        assert_eq!(tokenizer_warning(50277, &table("gpt_neox.embed_in.weight", 50304), path), None);
        assert_eq!(tokenizer_warning(151665, &table("model.embed_tokens.weight", 151936), path), None);
        // the 10% edge, and no table found by name
        assert_eq!(tokenizer_warning(900, &table("wte.weight", 1000), path), None);
        assert!(tokenizer_warning(899, &table("wte.weight", 1000), path).is_some());
        assert_eq!(tokenizer_warning(10, &table("fc1.weight", 1000), path), None);
    }
}
