//! The factorised language-model head (`student.transformer.head_rank`): priced as its two
//! factors, refused where it cannot apply.
use estimator_wasm::{estimate, Config, Inputs, Plan};

fn config(text: &str) -> Config {
    Config::from_toml_str(text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

/// `head_rank = 8` turns a [1000, 32] language-model head into `down` [8, 32] and `up`
/// [1000, 8]: parameters 8 x 32 + 1000 x 8, and the head saves z [S, 8] besides its input (the
/// fidelity configuration `tf_lm_head_rank_bf16` checks the bytes against PyTorch). A rank that
/// is not below d_model and vocab, a tied or non-LM head, and tensor parallelism are refused,
/// naming the key. S = 64, batch 2, fp32 on CPU.
#[test]
fn a_factorised_head_is_priced_as_its_factors_and_refused_where_it_cannot_be() {
    let lm =
        "[data]\ntokenizer = \"t.json\"\ninput_shape = [64]\nclasses = 1000\n[student]\nfamily = \"transformer\"\n\
              [student.transformer]\nvocab = 1000\nlayers = 1\nd_model = 32\nheads = 4\nrope_theta = 10000.0\n\
              head = \"lm\"\nbias = false\n[kd]\nobjective = \"logits\"\n[teacher]\nparams = 1000\n\
              cache_logits = false\n[train]\nbatch_size = 2\neval_batch_size = 2\n[estimate]\ntarget = \"cpu\"\n";
    let ranked = |r: &str| lm.replace("head = \"lm\"", &format!("head = \"lm\"\nhead_rank = {r}"));
    let whole = estimate(&config(lm), &Inputs::default()).unwrap();
    let low = estimate(&config(&ranked("8")), &Inputs::default()).unwrap();
    let head = |p: &Plan| p.layers.iter().find(|l| l.id == "head").unwrap().clone();
    assert_eq!((head(&whole).params, head(&low).params), (1000 * 32, 8 * 32 + 1000 * 8));
    assert_eq!(low.params.student, whole.params.student - 1000 * 32 + 8 * 32 + 1000 * 8);
    assert_eq!(head(&low).saved_bytes - head(&whole).saved_bytes, 2 * 64 * 8 * 4);
    let refused = |text: &str| match Config::from_toml_str(text) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("accepted:\n{text}"),
    };
    for (text, key, says) in [
        (ranked("32"), "student.transformer.head_rank", "must be 1 to 31"),
        (ranked("0"), "student.transformer.head_rank", "must be 1 to 31"),
        (
            ranked("8").replace("bias = false", "bias = false\ntie_embeddings = true"),
            "student.transformer.head_rank",
            "set tie_embeddings = false",
        ),
        (ranked("8") + "tensor_parallel = 2\n", "estimate.tensor_parallel", "a factorised head is not split"),
    ] {
        let message = refused(&text);
        assert!(message.contains(key) && message.contains(says), "{message}");
    }
}
