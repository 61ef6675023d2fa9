//! How a BERT-style folder's token states become one sentence embedding: as its
//! sentence-transformers `modules.json` says (the transformer, then `Pooling` with the modes of
//! its `config.json`, then any `Dense` projections, then `Normalize` when listed: the layout of
//! all-MiniLM-L6-v2, and of distill's own students with a projection `head`), or, for a
//! folder without `modules.json`, the mean of the unpadded tokens' states, unnormalised: what
//! sentence-transformers itself builds for a plain transformers model ("Creating a new one with
//! mean pooling", `SentenceTransformer._load_auto_model`). The pooling formulas are
//! sentence-transformers' `models/Pooling.py`; a `Dense` is `act(x W^T + b)` (`models/Dense.py`)
//! with its weights in `{path}/model.safetensors` as `linear.weight` [out, in] and `linear.bias`.
use std::path::{Path, PathBuf};

use serde_json::Value;
use tch::Tensor;

use crate::host::error::{DistillError, Result};

/// sentence-transformers' module list.
pub const MODULES: &str = "modules.json";

/// One pooling mode (`pooling_mode_*` in `1_Pooling/config.json`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `cls_token`: the first token's state.
    Cls,
    /// `max_tokens`: the largest value over the unpadded tokens.
    Max,
    /// `mean_tokens`: the mean over the unpadded tokens.
    Mean,
    /// `mean_sqrt_len_tokens`: their sum over the square root of their count.
    MeanSqrtLen,
}

/// The modes in the order sentence-transformers concatenates them, with their config keys.
const MODES: [(Mode, &str); 4] = [
    (Mode::Cls, "pooling_mode_cls_token"),
    (Mode::Max, "pooling_mode_max_tokens"),
    (Mode::Mean, "pooling_mode_mean_tokens"),
    (Mode::MeanSqrtLen, "pooling_mode_mean_sqrt_len_tokens"),
];

/// The modes distill does not compute, refused by name.
const REFUSED: [&str; 2] = ["pooling_mode_weightedmean_tokens", "pooling_mode_lasttoken"];

/// A sentence-transformers `Dense` module, as its `config.json` gives it.
#[derive(Debug, Clone, PartialEq)]
pub struct Dense {
    /// Its folder in the model folder (`2_Dense`), holding `model.safetensors`.
    pub path: String,
    pub in_features: i64,
    pub out_features: i64,
    pub bias: bool,
    /// `activation_function` Tanh (the module's default) rather than Identity.
    pub tanh: bool,
}

/// A folder's sentence embedding: pooling modes, concatenated, then `Dense` projections, then
/// L2 normalisation or not.
#[derive(Debug, Clone, PartialEq)]
pub struct SentencePooling {
    pub modes: Vec<Mode>,
    pub dense: Vec<Dense>,
    pub normalize: bool,
    /// Whether it came from `modules.json` (else the mean-pooling default).
    pub from_modules: bool,
}

impl Default for SentencePooling {
    /// No `modules.json`: mean pooling, unnormalised.
    fn default() -> Self {
        SentencePooling { modes: vec![Mode::Mean], dense: Vec::new(), normalize: false, from_modules: false }
    }
}

impl SentencePooling {
    /// The pooling of the folder `dir`: its `modules.json`'s, or the default without one.
    ///
    /// # Errors
    /// [`DistillError::Teacher`] naming the file: `modules.json` or a pooling `config.json`
    /// that cannot be read or is not as sentence-transformers writes it, a module distill does
    /// not run (anything but Transformer, Pooling, Dense and Normalize, in that order), a pooling
    /// mode it does not compute, no mode at all, or a `Dense` whose activation is not Identity or
    /// Tanh or whose input is not the width before it.
    pub fn read(dir: &Path) -> Result<SentencePooling> {
        let path = dir.join(MODULES);
        if !path.is_file() {
            return Ok(SentencePooling::default());
        }
        let err = |p: &Path, m: String| DistillError::teacher(p, m);
        let modules = read_json(&path)?;
        let modules = modules.as_array().ok_or_else(|| err(&path, "not a JSON list of modules".into()))?;
        let mut pooling: Option<PathBuf> = None;
        let mut dense: Vec<String> = Vec::new();
        let mut normalize = false;
        for (i, m) in modules.iter().enumerate() {
            let kind = m.get("type").and_then(Value::as_str).unwrap_or("?");
            let short = kind.rsplit('.').next().unwrap_or(kind);
            let in_order = match short {
                "Transformer" => i == 0,
                "Pooling" => i == 1,
                "Dense" | "Normalize" => pooling.is_some() && !normalize,
                _ => false,
            };
            if !in_order {
                return Err(err(
                    &path,
                    format!(
                        "module {i} is {kind}: distill runs a Transformer, then Pooling, then Dense and Normalize (when listed); give a TorchScript teacher for other pipelines"
                    ),
                ));
            }
            match short {
                "Pooling" => {
                    let sub = m.get("path").and_then(Value::as_str).unwrap_or("1_Pooling");
                    pooling = Some(dir.join(sub).join("config.json"));
                }
                "Dense" => dense.push(m.get("path").and_then(Value::as_str).unwrap_or("").to_string()),
                "Normalize" => normalize = true,
                _ => {}
            }
        }
        let config =
            pooling.ok_or_else(|| err(&path, "lists no Pooling module: a sentence embedding needs one".into()))?;
        let c = read_json(&config)?;
        let on = |key: &str| c.get(key).and_then(Value::as_bool).unwrap_or(false);
        if let Some(key) = REFUSED.iter().find(|k| on(k)) {
            return Err(err(
                &config,
                format!("{key} = true is not supported: distill pools by cls_token, max_tokens, mean_tokens and mean_sqrt_len_tokens"),
            ));
        }
        let modes: Vec<Mode> = MODES.iter().filter(|(_, key)| on(key)).map(|(m, _)| *m).collect();
        if modes.is_empty() {
            return Err(err(&config, "sets no pooling_mode_*: set pooling_mode_mean_tokens or another to true".into()));
        }
        let mut width = c.get("word_embedding_dimension").and_then(Value::as_i64).map(|d| d * modes.len() as i64);
        let dense = dense
            .into_iter()
            .map(|path| {
                let d = read_dense(dir, path, width)?;
                width = Some(d.out_features);
                Ok(d)
            })
            .collect::<Result<Vec<Dense>>>()?;
        Ok(SentencePooling { modes, dense, normalize, from_modules: true })
    }

    /// Width of the embedding for token states `d` wide.
    pub fn width(&self, d: i64) -> i64 {
        self.dense.last().map_or(d * self.modes.len() as i64, |l| l.out_features)
    }

    /// The pooled vectors [B, modes x d] of `states` [B, S, d] under the mask `mask` [B, S]
    /// (1 = token; `None`: every token), in the states' kind: each mode in order, concatenated.
    pub fn pool(&self, states: &Tensor, mask: Option<&Tensor>) -> Tensor {
        let kind = states.kind();
        let m = match mask {
            Some(m) => m.to_kind(kind).unsqueeze(-1),
            None => states.ones_like().narrow(-1, 0, 1),
        };
        let count = || m.sum_dim_intlist(1, false, kind).clamp_min(1e-9);
        let parts: Vec<Tensor> = self
            .modes
            .iter()
            .map(|mode| match mode {
                Mode::Cls => states.select(1, 0),
                Mode::Max => states.masked_fill(&m.eq(0), -1e9).amax([1i64], false),
                Mode::Mean => (states * &m).sum_dim_intlist(1, false, kind) / count(),
                Mode::MeanSqrtLen => (states * &m).sum_dim_intlist(1, false, kind) / count().sqrt(),
            })
            .collect();
        Tensor::cat(&parts, 1)
    }

    /// `x / max(|x|_2, 1e-12)` over each row when normalising (`torch.nn.functional.normalize`),
    /// else `x`.
    pub fn finish(&self, x: Tensor) -> Tensor {
        match self.normalize {
            true => {
                let norm = x.norm_scalaropt_dim(2.0, [1i64], true).clamp_min(1e-12);
                x / norm
            }
            false => x,
        }
    }

    /// The embedding of a folder without `Dense` modules: [`SentencePooling::pool`] then
    /// [`SentencePooling::finish`].
    pub fn apply(&self, states: &Tensor, mask: Option<&Tensor>) -> Tensor {
        self.finish(self.pool(states, mask))
    }

    /// How the folder pools, for a report: `mean (modules.json), normalised`.
    pub fn describe(&self) -> String {
        let names: Vec<&str> = self
            .modes
            .iter()
            .map(|m| match m {
                Mode::Cls => "cls",
                Mode::Max => "max",
                Mode::Mean => "mean",
                Mode::MeanSqrtLen => "mean_sqrt_len",
            })
            .collect();
        let source = if self.from_modules { MODULES } else { "no modules.json: the mean of the tokens" };
        let dense = match self.dense.len() {
            0 => String::new(),
            n => format!(", {n} Dense to {}", self.width(0)),
        };
        format!("{} ({source}){dense}{}", names.join(" + "), if self.normalize { ", normalised" } else { "" })
    }
}

/// The `Dense` module in `dir/path`, its input `width` wide when that is known.
fn read_dense(dir: &Path, path: String, width: Option<i64>) -> Result<Dense> {
    let file = dir.join(&path).join("config.json");
    let c = read_json(&file)?;
    let err = |m: String| DistillError::teacher(&file, m);
    let int = |key: &str| {
        c.get(key)
            .and_then(Value::as_i64)
            .filter(|&n| n > 0)
            .ok_or_else(|| err(format!("{key} is missing or not a positive integer")))
    };
    let (in_features, out_features) = (int("in_features")?, int("out_features")?);
    let act = c.get("activation_function").and_then(Value::as_str).unwrap_or("torch.nn.modules.activation.Tanh");
    let tanh = match act.rsplit('.').next().unwrap_or(act) {
        "Tanh" => true,
        "Identity" => false,
        _ => {
            return Err(err(format!(
                "activation_function \"{act}\" is not supported: distill runs Dense with Identity or Tanh"
            )))
        }
    };
    if let Some(w) = width.filter(|&w| w != in_features) {
        return Err(err(format!("in_features = {in_features}, but the module before it gives {w}")));
    }
    let bias = c.get("bias").and_then(Value::as_bool).unwrap_or(true);
    Ok(Dense { path, in_features, out_features, bias, tanh })
}

fn read_json(path: &Path) -> Result<Value> {
    let err = |m: String| DistillError::teacher(path, m);
    let text = std::fs::read_to_string(path).map_err(|e| err(format!("cannot read it ({e})")))?;
    serde_json::from_str(&text).map_err(|e| err(format!("not JSON ({e})")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn folder(modules: &str, pooling: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(MODULES), modules).unwrap();
        std::fs::create_dir(dir.path().join("1_Pooling")).unwrap();
        std::fs::write(dir.path().join("1_Pooling/config.json"), pooling).unwrap();
        dir
    }

    const MINILM: &str = r#"[{"idx": 0, "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}]"#;

    #[test]
    fn modes_pool_the_unpadded_tokens_by_hand() {
        // one sentence of 3 tokens, the last padding: states [[1, 2], [3, -4], [100, 100]]
        let states = Tensor::from_slice(&[1.0f64, 2.0, 3.0, -4.0, 100.0, 100.0]).reshape([1, 3, 2]);
        let mask = Tensor::from_slice(&[1i64, 1, 0]).reshape([1, 3]);
        let pooled = |modes: Vec<Mode>, normalize| {
            let p = SentencePooling { modes, dense: Vec::new(), normalize, from_modules: true };
            Vec::<f64>::try_from(p.apply(&states, Some(&mask)).flatten(0, -1)).unwrap()
        };
        // cls [1, 2]; max [3, 2]; mean [2, -1]; sum / sqrt(2) = [4, -2] / 1.41421356
        let s = 2f64.sqrt();
        assert_eq!(pooled(vec![Mode::Cls, Mode::Max, Mode::Mean], false), [1.0, 2.0, 3.0, 2.0, 2.0, -1.0]);
        let sqrt_len = pooled(vec![Mode::MeanSqrtLen], false);
        assert!((sqrt_len[0] - 4.0 / s).abs() < 1e-12 && (sqrt_len[1] + 2.0 / s).abs() < 1e-12);
        // mean [2, -1] normalised: [2, -1] / sqrt(5)
        let unit = pooled(vec![Mode::Mean], true);
        assert!((unit[0] - 2.0 / 5f64.sqrt()).abs() < 1e-12 && (unit[1] + 1.0 / 5f64.sqrt()).abs() < 1e-12);
    }

    #[test]
    fn the_folders_modules_are_read_and_the_default_is_mean() {
        let dir = folder(MINILM, r#"{"pooling_mode_cls_token": true, "pooling_mode_mean_tokens": false}"#);
        let p = SentencePooling::read(dir.path()).unwrap();
        assert_eq!((p.modes.clone(), p.normalize), (vec![Mode::Cls], true));
        assert_eq!(p.describe(), "cls (modules.json), normalised");
        let plain = tempfile::tempdir().unwrap();
        assert_eq!(SentencePooling::read(plain.path()).unwrap(), SentencePooling::default());
        assert_eq!(SentencePooling::default().describe(), "mean (no modules.json: the mean of the tokens)");
    }

    #[test]
    fn a_dense_projection_is_read_with_its_width() {
        let dense = MINILM.replace(
            "2_Normalize\", \"type\": \"sentence_transformers.models.Normalize",
            "2_Dense\", \"type\": \"sentence_transformers.models.Dense",
        );
        let dir = folder(&dense, r#"{"word_embedding_dimension": 16, "pooling_mode_mean_tokens": true}"#);
        std::fs::create_dir(dir.path().join("2_Dense")).unwrap();
        let config = r#"{"in_features": 16, "out_features": 32, "bias": true, "activation_function": "torch.nn.modules.linear.Identity"}"#;
        std::fs::write(dir.path().join("2_Dense/config.json"), config).unwrap();
        let p = SentencePooling::read(dir.path()).unwrap();
        let want = Dense { path: "2_Dense".into(), in_features: 16, out_features: 32, bias: true, tanh: false };
        assert_eq!((p.dense.clone(), p.width(16), p.normalize), (vec![want], 32, false));
        assert_eq!(p.describe(), "mean (modules.json), 1 Dense to 32");
        std::fs::write(dir.path().join("2_Dense/config.json"), config.replace("16", "24")).unwrap();
        let e = SentencePooling::read(dir.path()).unwrap_err().to_string();
        assert!(e.ends_with("2_Dense/config.json: in_features = 24, but the module before it gives 16"), "{e}");
        std::fs::write(dir.path().join("2_Dense/config.json"), config.replace("linear.Identity", "activation.GELU"))
            .unwrap();
        let e = SentencePooling::read(dir.path()).unwrap_err().to_string();
        assert!(e.contains("activation_function \"torch.nn.modules.activation.GELU\" is not supported"), "{e}");
    }

    #[test]
    fn modules_and_modes_distill_does_not_run_are_named() {
        let lstm = MINILM.replace(
            "2_Normalize\", \"type\": \"sentence_transformers.models.Normalize",
            "2_LSTM\", \"type\": \"sentence_transformers.models.LSTM",
        );
        let dir = folder(&lstm, r#"{"pooling_mode_mean_tokens": true}"#);
        let e = SentencePooling::read(dir.path()).unwrap_err().to_string();
        assert!(e.ends_with("modules.json: module 2 is sentence_transformers.models.LSTM: distill runs a Transformer, then Pooling, then Dense and Normalize (when listed); give a TorchScript teacher for other pipelines"), "{e}");
        let dir = folder(MINILM, r#"{"pooling_mode_lasttoken": true}"#);
        let e = SentencePooling::read(dir.path()).unwrap_err().to_string();
        assert!(e.contains("1_Pooling/config.json: pooling_mode_lasttoken = true is not supported"), "{e}");
        let dir = folder(MINILM, r#"{"pooling_mode_mean_tokens": false}"#);
        let e = SentencePooling::read(dir.path()).unwrap_err().to_string();
        assert!(e.contains("sets no pooling_mode_*"), "{e}");
    }
}
