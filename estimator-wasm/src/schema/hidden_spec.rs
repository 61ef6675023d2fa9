//! `[[kd.hidden]]`: hidden-state distillation, one table per pair of layers (TinyBERT, Jiao et
//! al. 2020, arXiv:1909.10351, section 3.1: `L_hidn = MSE(H^S W_h, H^T)`; DistillKit's
//! `hs_mse`). Each pair adds `weight * D(proj(h_s), h_t)` to the loss, `h_s` the student's
//! hidden state of `student_layer` and `h_t` the teacher's of `teacher_layer`, `proj` a learned
//! linear map (no bias) from the student's width to the teacher's, trained with the student and
//! never exported with it, when the widths differ (none when they are equal).
//!
//! Which hidden states a network has ([`student_hidden_states`]): a transformer's are numbered
//! as Hugging Face's `output_hidden_states` numbers them, 0 the embeddings' output (after the
//! embedding norm and dropout) and `i` the output of block `i` (`blk{i}_mlp`, its feed-forward
//! sub-layer with the residual); an mlp's or cnn's are the outputs of its layers in `distill plan`'s order
//! (0-based), each flattened to one vector per sample. A teacher's are what it returns under
//! `teacher.hidden_output` (a list of [B, S, d] tensors, Hugging Face's order: 0 the embeddings'
//! output), or for a Hugging Face folder its own (`num_hidden_layers + 1` of them, the last after
//! the final norm, as `transformers` returns them).
use serde::{Deserialize, Serialize};

use crate::schema::defaults::*;
use crate::schema::errors::SpecError;
use crate::schema::layer_ops::{Layer, Op};
use crate::schema::names::names;
use crate::schema::tables::tables;

tables!(HiddenPair);

/// The distance of a hidden pair (`[[kd.hidden]] loss`), over the real tokens of a batch (the
/// attention mask's 1s; every row for data without one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HiddenLoss {
    /// Mean squared error over the real tokens' elements, `sum_t m_t |p_t - h_t|^2 / (d sum_t
    /// m_t)` (`F.mse_loss` over the kept rows; TinyBERT's hidden-state loss).
    #[default]
    Mse,
    /// `sum_t m_t (1 - cos(p_t, h_t)) / sum_t m_t`, the cosine distance of each real token's
    /// vectors averaged over the real tokens, `cos(p, h) = p h / (max(|p|, eps) max(|h|, eps))`
    /// with eps 1e-8 (`F.cosine_similarity`'s).
    Cosine,
}
names!(HiddenLoss { Mse = "mse", Cosine = "cosine" });

/// One `[[kd.hidden]]` pair: the student's hidden state `student_layer` learns the teacher's
/// `teacher_layer`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, remote = "Self")]
pub struct HiddenPair {
    /// The student's hidden state, 0-based (a transformer's 0 is the embeddings' output, `i`
    /// block `i`'s, `blk{i}_mlp`; an mlp's or cnn's the output of its layer `i` in `distill
    /// plan`'s table).
    pub student_layer: u64,
    /// The teacher's hidden state, 0-based (Hugging Face's order: 0 the embeddings' output).
    pub teacher_layer: u64,
    /// The distance between the projected student state and the teacher's.
    #[serde(default)]
    pub loss: HiddenLoss,
    /// The pair's weight in the total loss (`loss = objective + sum weight * distance`), >= 0.
    #[serde(default = "one")]
    pub weight: f64,
}

impl Default for HiddenPair {
    /// Layers 0 and 0, MSE, weight 1 (the defaults of the keys that have one).
    fn default() -> Self {
        HiddenPair { student_layer: 0, teacher_layer: 0, loss: HiddenLoss::Mse, weight: 1.0 }
    }
}

/// One hidden state of a student: the index of the layer (in `arch::layers`) whose output it
/// is, and its width (the last dimension; an mlp's or cnn's output flattened).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HiddenState {
    pub layer: usize,
    pub width: u64,
    /// Per token ([S, width] per sample, masked by the attention mask) or one row per sample.
    pub tokens: bool,
}

/// The hidden states of a student of `layers` (`arch::layers`), in the numbering `[[kd.hidden]]
/// student_layer` uses (see the module's doc).
pub fn student_hidden_states(layers: &[Layer]) -> Vec<HiddenState> {
    let first_attention = layers.iter().position(|l| matches!(l.op, Op::SelfAttention(_)));
    match first_attention {
        Some(first) => {
            let width = |l: &Layer| l.output.last().copied().unwrap_or(1);
            let embed = first.saturating_sub(1);
            let blocks = layers.iter().enumerate().filter(|(_, l)| matches!(l.op, Op::FeedForward(_)));
            std::iter::once(embed)
                .chain(blocks.map(|(i, _)| i))
                .map(|i| HiddenState { layer: i, width: width(&layers[i]), tokens: true })
                .collect()
        }
        None => layers
            .iter()
            .enumerate()
            .map(|(i, l)| HiddenState { layer: i, width: l.output.iter().product(), tokens: false })
            .collect(),
    }
}

/// Checks `pairs` against the student's hidden states `states`: a pair's `student_layer` must
/// exist, its weight be finite and >= 0.
///
/// # Errors
/// [`SpecError::Invalid`] on `kd.hidden[k].student_layer` (with how many the student has) or
/// `kd.hidden[k].weight`.
pub fn check_pairs(pairs: &[HiddenPair], states: &[HiddenState], transformer: bool) -> Result<(), SpecError> {
    for (k, pair) in pairs.iter().enumerate() {
        if !(pair.weight.is_finite() && pair.weight >= 0.0) {
            return Err(SpecError::Invalid {
                key: format!("kd.hidden[{k}].weight"),
                message: "must be a finite number >= 0: the pair's weight in the total loss (0 turns it off)".into(),
            });
        }
        let n = states.len() as u64;
        if pair.student_layer >= n {
            let what = match transformer {
                true => "0 the embeddings' output, i the output of block i",
                false => "one per layer of distill plan's table, 0-based",
            };
            return Err(SpecError::Invalid {
                key: format!("kd.hidden[{k}].student_layer"),
                message: format!(
                    "is {}, and the student has {n} hidden states ({what}): use 0 to {}",
                    pair.student_layer,
                    n.saturating_sub(1)
                ),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::Config;

    /// A 2-block transformer language model (3 hidden states).
    const LM: &str =
        "[data]\ninput_shape = [16]\nclasses = 32\ntokenizer = \"t.json\"\n[student]\nfamily = \"transformer\"\n\
        [student.transformer]\nvocab = 32\nlayers = 2\nd_model = 8\nheads = 2\nhead = \"lm\"\n[kd]\nalpha = 0.5\n";

    fn read(extra: &str) -> Result<Config, String> {
        Config::from_toml_str(&format!("{LM}{extra}")).map_err(|e| e.to_string())
    }

    #[test]
    fn pairs_read_with_their_defaults_and_write_back() {
        let c = read("[[kd.hidden]]\nstudent_layer = 2\nteacher_layer = 1\n[[kd.hidden]]\nstudent_layer = 0\nteacher_layer = 0\nloss = \"cosine\"\nweight = 0.25\n").unwrap();
        let want = vec![
            HiddenPair { student_layer: 2, teacher_layer: 1, loss: HiddenLoss::Mse, weight: 1.0 },
            HiddenPair { student_layer: 0, teacher_layer: 0, loss: HiddenLoss::Cosine, weight: 0.25 },
        ];
        assert_eq!(c.kd.hidden, want);
        assert_eq!(Config::from_toml_str(&c.to_toml_string()).unwrap(), c);
        assert!(!read("").unwrap().to_toml_string().contains("hidden"));
        let unknown = read("[[kd.hidden]]\nstudent_layer = 0\nteacher_layer = 0\nlayer = 1\n").unwrap_err();
        assert!(unknown.contains("unknown field `layer`"), "{unknown}");
    }

    #[test]
    fn a_missing_student_layer_and_a_negative_weight_are_refused_and_alpha_0_checkpointing_and_chunks_go() {
        let pair = |s: u64, w: &str| format!("[[kd.hidden]]\nstudent_layer = {s}\nteacher_layer = 0\nweight = {w}\n");
        assert_eq!(
            read(&pair(3, "1.0")).unwrap_err(),
            "kd.hidden[0].student_layer: is 3, and the student has 3 hidden states (0 the embeddings' output, i the output of block i): use 0 to 2"
        );
        for w in ["-0.5", "nan", "inf"] {
            assert_eq!(
                read(&pair(1, w)).unwrap_err(),
                "kd.hidden[0].weight: must be a finite number >= 0: the pair's weight in the total loss (0 turns it off)",
                "{w}"
            );
        }
        assert!(read(&pair(2, "0.0")).is_ok());
        // alpha = 0 (CE and the pairs), checkpointing and a chunked loss all train the pairs
        let alpha0 = format!("{}{}", LM.replace("alpha = 0.5", "alpha = 0.0"), pair(1, "1.0"));
        assert_eq!(Config::from_toml_str(&alpha0).unwrap().kd.alpha, 0.0);
        let ckpt = format!(
            "{}{}",
            LM.replace("family = \"transformer\"\n", "family = \"transformer\"\ncheckpointing = \"sqrt\"\n"),
            pair(1, "1.0")
        );
        assert!(Config::from_toml_str(&ckpt).is_ok());
        let chunk = format!("{}loss_chunk = 4\n{}", LM, pair(1, "1.0"));
        assert_eq!(Config::from_toml_str(&chunk).unwrap().kd.loss_chunk, 4);
        // an embedding objective at alpha = 0 trains the pairs alone; without pairs, nothing
        let embedding = "[data]\ninput_shape = [4]\nclasses = 3\n[student]\nfamily = \"mlp\"\nhidden = [6]\n[kd]\nobjective = \"embedding_mse\"\nalpha = 0.0\n";
        assert!(Config::from_toml_str(&format!("{embedding}{}", pair(0, "1.0"))).is_ok());
        assert!(Config::from_toml_str(embedding).unwrap_err().to_string().ends_with("or add [[kd.hidden]] pairs"));
        // an mlp counts its layers
        let mlp = "[data]\ninput_shape = [4]\nclasses = 3\n[student]\nfamily = \"mlp\"\nhidden = [6]\n";
        let n = crate::schema::arch::layers(
            &Config::from_toml_str(mlp).unwrap().student,
            &Config::from_toml_str(mlp).unwrap().data,
        )
        .unwrap()
        .len();
        let err = Config::from_toml_str(&format!("{mlp}{}", pair(n as u64, "1.0"))).unwrap_err().to_string();
        assert_eq!(err, format!("kd.hidden[0].student_layer: is {n}, and the student has {n} hidden states (one per layer of distill plan's table, 0-based): use 0 to {}", n - 1));
    }
}
