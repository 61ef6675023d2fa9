//! What writing a student under a Hugging Face architecture's names takes, whichever the
//! architecture ([`super::llama_student`], [`super::bert_student`]): its transformer table, the
//! one-line refusal of a student with no equivalent, a student tensor by name in fp32, and a
//! fused projection split by rows into the architecture's separate ones.
use estimator_wasm::schema::{Config, MlpKind, NormKind, TransformerSpec};
use tch::{Kind, Tensor};

/// The `[student.transformer]` table of `spec`.
///
/// # Errors
/// `"the student has no [student.transformer] table"`.
pub fn transformer(spec: &Config) -> Result<&TransformerSpec, String> {
    spec.student.transformer.as_ref().ok_or_else(|| "the student has no [student.transformer] table".into())
}

/// The refusal of a student whose `what` Hugging Face's `architecture` cannot hold, for
/// `report.json`: `"{what}: Hugging Face's {architecture} has no equivalent"`.
pub fn no_equivalent(what: &str, architecture: &str) -> String {
    format!("{what}: Hugging Face's {architecture} has no equivalent")
}

/// The checks a BERT and a GPT-2 both make of a student's blocks: LayerNorm, a standard
/// feed-forward with biases, one key/value head per head and learned (not rotary) positions.
/// `family` is the short name the RMSNorm refusal gives (`"BERT"`, `"GPT-2"`).
///
/// # Errors
/// [`no_equivalent`]'s line naming the first key that differs.
pub fn classic_blocks(t: &TransformerSpec, family: &str, architecture: &str) -> Result<(), String> {
    let no = |what: &str| Err(no_equivalent(what, architecture));
    if t.norm != NormKind::Layer {
        return no(&format!("RMSNorm (student.transformer.norm = \"rms\"; {family} uses LayerNorm)"));
    }
    if t.mlp != MlpKind::Standard {
        return no("a SwiGLU feed-forward (student.transformer.mlp = \"swiglu\")");
    }
    if !t.bias {
        return no("projections without biases (student.transformer.bias = false)");
    }
    if t.kv_heads() != t.heads {
        return no("grouped-query attention (student.transformer.kv_heads)");
    }
    if t.rope_theta.is_some() {
        return no("rotary positions (student.transformer.rope_theta)");
    }
    Ok(())
}

/// The student tensor `name` among `named` (its `student.safetensors`, by student name) in fp32.
///
/// # Errors
/// `"the student has no tensor \"name\""`.
pub fn fp32(named: &[(String, Tensor)], name: &str) -> Result<Tensor, String> {
    named
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, t)| t.to_kind(Kind::Float))
        .ok_or_else(|| format!("the student has no tensor {name:?}"))
}

/// `x` split along dimension 0 into parts of `rows`, each contiguous (a fused `qkv` [d + 2 kv, d]
/// into q, k and v); `name` is `x`'s, for the error.
///
/// # Errors
/// `"{name} has shape [..], not N rows ([rows])"` when `x`'s rows do not sum to `rows`.
pub fn split_rows(x: &Tensor, rows: &[i64], name: &str) -> Result<Vec<Tensor>, String> {
    if x.size().first() != Some(&rows.iter().sum::<i64>()) {
        return Err(format!("{name} has shape {:?}, not {} rows ({rows:?})", x.size(), rows.iter().sum::<i64>()));
    }
    Ok(x.split_with_sizes(rows, 0).into_iter().map(|p| p.contiguous()).collect())
}

/// The unit tests, and what the architectures' tests share: a fixture's student edited, and
/// tensors of known values.
#[cfg(test)]
pub mod tests {
    use super::*;

    /// The cfg.toml `tests/fixtures/{fixture}` with each `(from, to)` of `edits` replaced once
    /// (each `from` must be in it).
    pub fn spec(fixture: &str, edits: &[(&str, &str)]) -> Config {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures").join(fixture);
        let mut text = std::fs::read_to_string(path).unwrap();
        for (from, to) in edits {
            assert!(text.contains(from), "{from}");
            text = text.replacen(from, to, 1);
        }
        Config::from_toml_str(&text).unwrap()
    }

    /// 0, 1, 2, ... in fp32 on the CPU, of shape `shape`.
    pub fn ramp(shape: &[i64]) -> Tensor {
        let n: i64 = shape.iter().product();
        Tensor::arange(n, (Kind::Float, tch::Device::Cpu)).reshape(shape)
    }

    #[test]
    fn a_fused_projection_splits_into_its_rows_or_says_why_not() {
        let x = ramp(&[6, 2]);
        let parts = split_rows(&x, &[2, 4], "qkv").unwrap();
        // the second part starts at row 2: element 2 * 2
        assert_eq!((parts[0].size(), parts[1].size(), parts[1].double_value(&[0, 0])), (vec![2, 2], vec![4, 2], 4.0));
        assert_eq!(split_rows(&x, &[2, 2], "qkv").unwrap_err(), "qkv has shape [6, 2], not 4 rows ([2, 2])");
        let named = vec![("w".to_string(), x.to_kind(Kind::BFloat16))];
        assert_eq!(fp32(&named, "w").unwrap().kind(), Kind::Float);
        assert_eq!(fp32(&named, "b").unwrap_err(), "the student has no tensor \"b\"");
    }
}
