//! The transformer student's input embedding (layer `embed`): the sum of a token embedding, a
//! learned position embedding (when `max_positions > 0`) and row 0 of a token-type embedding
//! (when `token_types > 0`; every token is type 0, as a single-sentence BERT input).
//!
//! Initialised N(0, 0.02), BERT's and GPT-2's `initializer_range`, not `nn.Embedding`'s N(0, 1):
//! with unit-variance rows the embedding would swamp a pre-norm residual stream and a tied LM
//! head's logits would start at the scale of sqrt(d_model).
//!
//! Trace-safe: the position ids are `cumsum(ones_like(ids), 1) - 1`, so a traced student takes
//! any sequence length (no size read in Rust becomes a constant of the trace).
use tch::nn::{self, Init};
use tch::{Kind, Tensor};

/// Standard deviation of the embeddings' initial values (BERT's `initializer_range`).
pub const EMBEDDING_INIT_STD: f64 = 0.02;

/// The `embed` layer's tables: `tokens` [vocab, d], `positions` [max_positions, d],
/// `token_types` [token_types, d].
#[derive(Debug)]
pub struct TokenEmbedding {
    pub tokens: Tensor,
    pub positions: Option<Tensor>,
    pub token_types: Option<Tensor>,
}

/// The embedding's table sizes (`student.transformer` keys).
pub struct EmbeddingSizes {
    pub vocab: i64,
    pub dim: i64,
    /// `max_positions` (0: no position embedding).
    pub positions: i64,
    /// `token_types` (0: no token-type embedding).
    pub token_types: i64,
}

impl TokenEmbedding {
    /// Creates `tokens.weight`, and `positions.weight` / `token_types.weight` when their sizes
    /// are not 0, under `p` (the `embed` layer's path).
    pub fn new(p: &nn::Path, sizes: &EmbeddingSizes) -> TokenEmbedding {
        let init = Init::Randn { mean: 0.0, stdev: EMBEDDING_INIT_STD };
        let table = |name: &str, rows: i64| (rows > 0).then(|| (p / name).var("weight", &[rows, sizes.dim], init));
        let tokens = (p / "tokens").var("weight", &[sizes.vocab, sizes.dim], init);
        let positions = table("positions", sizes.positions);
        let token_types = table("token_types", sizes.token_types);
        TokenEmbedding { tokens, positions, token_types }
    }

    /// Token ids `ids` int64 [B, S] (each < vocab; S <= max_positions) to [B, S, d]:
    /// `tokens[ids] + positions[0..S] + token_types[0]`.
    pub fn forward(&self, ids: &Tensor) -> Tensor {
        let h = Tensor::embedding(&self.tokens, ids, -1, false, false);
        let h = match &self.positions {
            Some(positions) => {
                let position_ids = ids.ones_like().cumsum(1, Kind::Int64) - 1;
                h + Tensor::embedding(positions, &position_ids, -1, false, false)
            }
            None => h,
        };
        match &self.token_types {
            Some(types) => h + types.get(0),
            None => h,
        }
    }
}
