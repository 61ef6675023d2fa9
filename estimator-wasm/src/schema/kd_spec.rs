//! `[kd]`: what the distillation term compares (`objective`), and for logits the divergence
//! between the teacher's and the student's softened distributions (`divergence`, `beta`).
use serde::{Deserialize, Serialize};

use crate::schema::defaults::*;
pub use crate::schema::hidden_spec::HiddenPair;
use crate::schema::names::names;
use crate::schema::tables::tables;

tables!(KdSpec);

/// What the distillation term compares (`[kd] objective`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KdObjective {
    /// Class logits: `T^2 * D(softmax(t/T), softmax(s/T))`, `D` the [`KdDivergence`]
    /// (forward KL by default: Hinton et al. 2015).
    #[default]
    Logits,
    /// Output vectors: mean squared error over every element, `mean((s - t)^2)` over [B, E]
    /// (sentence-transformers' distillation recipe, Reimers & Gurevych 2020, arXiv:2004.09813).
    EmbeddingMse,
    /// Output vectors: `mean(1 - cos(s, t))` over the B rows.
    EmbeddingCosine,
}
names!(KdObjective { Logits = "logits", EmbeddingMse = "embedding_mse", EmbeddingCosine = "embedding_cosine" });

/// The divergence of the soft term on logits (`[kd] divergence`), between the teacher's
/// distribution `p = softmax(t/T)` and the student's `q = softmax(s/T)` over the classes (or a
/// language model's vocabulary, per predicting token). Each is summed over the classes and
/// averaged over the rows, then multiplied by `T^2`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KdDivergence {
    /// `KL(p || q) = sum p (log p - log q)`: mass-covering (Hinton et al. 2015).
    #[default]
    ForwardKl,
    /// `KL(q || p) = sum q (log q - log p)`: mode-seeking, as MiniLLM (Gu et al. 2024,
    /// arXiv:2306.08543) distils generative models.
    ReverseKl,
    /// The generalised Jensen-Shannon divergence of GKD (Agarwal et al. 2024, "On-Policy
    /// Distillation of Language Models", arXiv:2306.13649): with `M = beta p + (1 - beta) q`,
    /// `JSD_beta = beta KL(p || M) + (1 - beta) KL(q || M)`. `JSD_beta` is 0 at `beta = 0` and
    /// `beta = 1` whatever `p` and `q`; those two values are read as its limits scaled by the
    /// weight that vanishes, `JSD_beta / beta -> KL(p || q)` and `JSD_beta / (1 - beta) ->
    /// KL(q || p)`: forward KL at 0 and reverse KL at 1 (as Hugging Face TRL's GKD trainer).
    Jsd,
    /// Total variation distance `0.5 * sum |p - q|`, in [0, 1].
    Tvd,
}
names!(KdDivergence { ForwardKl = "forward_kl", ReverseKl = "reverse_kl", Jsd = "jsd", Tvd = "tvd" });

/// `beta` when `[kd] beta` is not written: the symmetric Jensen-Shannon divergence (and TRL's
/// default).
pub const DEFAULT_BETA: f64 = 0.5;

/// `[kd]`: the distillation loss. With `objective = "logits"`, soft-target distillation
/// (Hinton et al. 2015, arXiv:1503.02531):
///
/// `L = alpha * T^2 * D(softmax(t/T), softmax(s/T)) + (1 - alpha) * CE(s, y)`, with `D`
/// ([`KdDivergence`], forward KL by default) summed over classes and averaged over samples
/// (PyTorch's `batchmean`). `alpha = 0` trains on labels alone (no teacher), `alpha = 1` on
/// soft targets alone. With an embedding objective `D` is replaced by that distance;
/// unlabelled data (text) has no CE term: `L = alpha * kd`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, remote = "Self")]
pub struct KdSpec {
    #[serde(default)]
    pub objective: KdObjective,
    /// Softmax temperature T > 0 applied to both teacher and student logits in the soft term.
    #[serde(default = "four")]
    pub temperature: f64,
    /// Weight of the soft-target term, in [0, 1].
    #[serde(default = "point_nine")]
    pub alpha: f64,
    /// A language model's token-level loss in chunks of this many sequence positions (0: all
    /// at once). Each chunk's logits [B, chunk, vocab], their fp32 softmaxes and gradients are
    /// made, back-propagated into the final hidden states and freed before the next, so the
    /// [B, S, vocab] fp32 buffers never exist whole (the teacher's logits still do). The same
    /// loss and gradients as unchunked, up to float rounding.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub loss_chunk: u64,
    /// A language model's head fused with its loss, `loss_chunk` positions at a time (needs
    /// `loss_chunk`): each chunk's final hidden states go through the head and the loss
    /// together, and the gradients of the hidden states, the head's weight (the token embedding
    /// when tied) and its bias are computed in closed form per chunk, so no graph is kept
    /// across chunks and the student's logits [B, S, vocab] never exist: one chunk's fp32
    /// logits and probabilities at a time, and nothing of them at the backward. The same loss
    /// and gradients as unfused, up to float rounding; the head's products run in fp32.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fused_head: bool,
    /// The divergence of the soft term (`objective = "logits"` only; refused with an
    /// embedding objective). `None`: forward KL. Read it with [`KdSpec::soft_divergence`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub divergence: Option<KdDivergence>,
    /// `divergence = "jsd"`: the teacher's weight in the mixture `M = beta p + (1 - beta) q`,
    /// in [0, 1]. `None`: [`DEFAULT_BETA`]. Read it with [`KdSpec::jsd_beta`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub beta: Option<f64>,

    // hidden-state distillation (hidden_spec.rs)
    /// Hidden-state pairs, one `[[kd.hidden]]` table each (`crate::schema::hidden_spec`), each
    /// adding its weighted distance to the loss (beside `alpha`'s mix, unweighted by it; at
    /// `alpha = 0` the loss is the CE plus the pairs); the teacher then runs on every batch.
    /// They train under `student.checkpointing` and `kd.loss_chunk` alike.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hidden: Vec<HiddenPair>,
}

impl Default for KdSpec {
    fn default() -> Self {
        KdSpec {
            objective: KdObjective::Logits,
            temperature: 4.0,
            alpha: 0.9,
            loss_chunk: 0,
            fused_head: false,
            divergence: None,
            beta: None,
            hidden: Vec::new(),
        }
    }
}

impl KdSpec {
    /// The divergence the soft term on logits uses (forward KL unless written).
    pub fn soft_divergence(&self) -> KdDivergence {
        self.divergence.unwrap_or_default()
    }

    /// JSD's `beta` (0.5 unless written).
    pub fn jsd_beta(&self) -> f64 {
        self.beta.unwrap_or(DEFAULT_BETA)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::Config;

    const MLP: &str = "[data]\ninput_shape = [4]\nclasses = 3\n[student]\nfamily = \"mlp\"\n[kd]\n";

    fn kd(lines: &str) -> Result<KdSpec, String> {
        Config::from_toml_str(&format!("{MLP}{lines}")).map(|c| c.kd).map_err(|e| e.to_string())
    }

    #[test]
    fn each_divergence_reads_by_name_and_unwritten_keys_stay_unwritten() {
        for (name, want) in [
            ("forward_kl", KdDivergence::ForwardKl),
            ("reverse_kl", KdDivergence::ReverseKl),
            ("jsd", KdDivergence::Jsd),
            ("tvd", KdDivergence::Tvd),
            ("Reverse-KL", KdDivergence::ReverseKl),
        ] {
            let spec = kd(&format!("divergence = \"{name}\"\n")).unwrap();
            assert_eq!((spec.divergence, spec.soft_divergence()), (Some(want), want), "{name}");
        }
        let spec = kd("divergence = \"jsd\"\nbeta = 0.25\n").unwrap();
        assert_eq!(spec.jsd_beta(), 0.25);
        // a config without the keys writes none of them back (today's runs' config.toml unchanged)
        let plain = Config::from_toml_str(MLP).unwrap();
        let text = plain.to_toml_string();
        assert!(!text.contains("divergence") && !text.contains("\nbeta ="), "{text}");
        let jsd = Config::from_toml_str(&format!("{MLP}divergence = \"jsd\"\nbeta = 0.25\n")).unwrap();
        let text = jsd.to_toml_string();
        assert!(text.contains("divergence = \"jsd\"") && text.contains("beta = 0.25"), "{text}");
        assert_eq!(Config::from_toml_str(&text).unwrap(), jsd);
        assert_eq!(
            kd("divergence = \"kl\"\n").unwrap_err(),
            "TOML parse error at line 7, column 14: unknown variant `kl`, expected one of `forward_kl`, `reverse_kl`, `jsd`, `tvd` for key `kd.divergence`"
        );
    }

    #[test]
    fn beta_outside_zero_to_one_is_refused_naming_kd_beta() {
        let want = "kd.beta: must be in [0, 1]: the teacher's weight in divergence = \"jsd\"'s mixture M = beta p_teacher + (1 - beta) p_student (0: forward KL, 0.5: symmetric JSD, 1: reverse KL)";
        for bad in ["-0.1", "1.5", "nan", "inf"] {
            assert_eq!(kd(&format!("divergence = \"jsd\"\nbeta = {bad}\n")).unwrap_err(), want, "{bad}");
        }
        for good in ["0.0", "1.0", "0.5"] {
            assert!(kd(&format!("divergence = \"jsd\"\nbeta = {good}\n")).is_ok(), "{good}");
        }
    }

    #[test]
    fn a_fused_head_needs_a_language_model_and_a_chunk() {
        let none = "kd.fused_head: fuses a language model's head with its loss, and this student has none (student.family = \"transformer\" with head = \"lm\"): remove kd.fused_head";
        assert_eq!(kd("fused_head = true\nloss_chunk = 32\n").unwrap_err(), none, "an MLP");
        let lm =
            "[data]\ntokenizer = \"t.json\"\ninput_shape = [64]\nclasses = 40\n[student]\nfamily = \"transformer\"\n\
                  [student.transformer]\nvocab = 40\nlayers = 1\nd_model = 8\nheads = 2\nhead = \"lm\"\n[kd]\n";
        let parse = |lines: &str| Config::from_toml_str(&format!("{lm}{lines}")).map_err(|e| e.to_string());
        let encoder = lm
            .replace("head = \"lm\"", "head = \"embedding\"")
            .replace("[kd]\n", "[kd]\nobjective = \"embedding_mse\"\n");
        let err = Config::from_toml_str(&format!("{encoder}fused_head = true\nloss_chunk = 32\n")).unwrap_err();
        assert_eq!(err.to_string(), none, "a sentence encoder");
        assert_eq!(
            parse("fused_head = true\n").unwrap_err(),
            "kd.fused_head: needs kd.loss_chunk > 0: the positions whose logits exist at once (e.g. 32)"
        );
        let spec = parse("fused_head = true\nloss_chunk = 16\n").unwrap();
        assert!(spec.kd.fused_head);
        // written back only when set
        assert!(spec.to_toml_string().contains("fused_head = true"));
        assert!(!parse("loss_chunk = 16\n").unwrap().to_toml_string().contains("fused_head"));
    }

    #[test]
    fn a_divergence_or_beta_with_an_embedding_objective_is_refused() {
        for objective in ["embedding_mse", "embedding_cosine"] {
            let base = format!("objective = \"{objective}\"\nalpha = 1.0\n");
            assert!(kd(&base).is_ok());
            assert_eq!(
                kd(&format!("{base}divergence = \"forward_kl\"\n")).unwrap_err(),
                format!("kd.divergence: compares two distributions over classes, and objective = \"{objective}\" compares vectors: remove kd.divergence, or use objective = \"logits\" with a teacher that outputs logits")
            );
            assert_eq!(
                kd(&format!("{base}beta = 0.5\n")).unwrap_err(),
                format!("kd.beta: weighs divergence = \"jsd\" on logits, and objective = \"{objective}\" has no divergence: remove kd.beta")
            );
        }
    }
}
