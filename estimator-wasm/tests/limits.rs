//! Every count and size of the cfg.toml is bounded before work proportional to it starts
//! (`estimator_wasm::schema::limits`), and every refusal names its key: the limits, integers past
//! TOML's 64 bits, layers whose bytes overflow, the evaluation batch.
use estimator_wasm::schema::arch;
use estimator_wasm::schema::limits::MAX_BATCH;
use estimator_wasm::schema::limits::{MAX_BLOCKS, MAX_EPOCHS, MAX_LAYERS, MAX_LAYER_LIST, MAX_SIZE};
use estimator_wasm::{estimate, Config, EstimateError, Inputs, MemoryModel, SpecError};

const DATA: &str = "[data]\ninput_shape = [16]\nclasses = 4\n";
const MLP: &str = "[student]\nfamily = \"mlp\"\nhidden = [8]\n[teacher]\nparams = 10\n";

fn transformer(table: &str, layers: u64) -> String {
    format!("[{table}]\nvocab = 4\nlayers = {layers}\nd_model = 8\nheads = 2\n")
}

fn lm(student_layers: u64) -> String {
    format!(
        "{DATA}[teacher]\nparams = 10\n[student]\nfamily = \"transformer\"\ndropout = 0.1\n{}",
        transformer("student.transformer", student_layers)
    )
}

fn invalid(text: &str) -> (String, String) {
    match Config::from_toml_str(text) {
        Err(SpecError::Invalid { key, message }) => (key, message),
        other => panic!("expected a range error for\n{text}\ngot {other:?}"),
    }
}

fn range(v: u64, lo: u64, hi: u64) -> String {
    format!("is {v}; must be between {lo} and {hi}")
}

fn list(values: &str, n: usize) -> String {
    format!("[{}]", vec![values; n].join(", "))
}

#[test]
fn a_count_past_its_limit_is_refused_with_its_key_and_limit() {
    // the reported inputs: a billion layers (a 2 GB allocation before), in the student and the teacher
    assert_eq!(invalid(&lm(1_000_000_000)), ("student.transformer.layers".into(), range(1_000_000_000, 1, 4096)));
    let teacher = format!(
        "{DATA}{}[teacher.arch]\nfamily = \"transformer\"\n{}",
        MLP.replace("[teacher]\nparams = 10\n", ""),
        transformer("teacher.arch.transformer", MAX_LAYERS + 1)
    );
    assert_eq!(invalid(&teacher), ("teacher.arch.transformer.layers".into(), range(MAX_LAYERS + 1, 1, MAX_LAYERS)));
    // 200,000 hidden blocks (11 s before), and one more than the limit, of hidden and channels
    let hidden = |n: usize| format!("{DATA}[student]\nfamily = \"mlp\"\nhidden = {}\n", list("8", n));
    let entries = |n: usize| format!("has {n} entries; at most 1024");
    assert_eq!(invalid(&hidden(200_000)), ("student.hidden".into(), entries(200_000)));
    assert_eq!(invalid(&hidden(MAX_BLOCKS + 1)), ("student.hidden".into(), entries(1025)));
    let cnn = format!(
        "[data]\ninput_shape = [1, 8, 8]\nclasses = 4\n[student]\nfamily = \"cnn\"\npool = \"none\"\nchannels = {}\n",
        list("2", MAX_BLOCKS + 1)
    );
    assert_eq!(invalid(&cnn), ("student.channels".into(), entries(1025)));
    // every size one past MAX_SIZE, and the batch and epoch counts
    let big = MAX_SIZE + 1;
    let sized = [
        (format!("[data]\ninput_shape = [{big}]\nclasses = 4\n{MLP}"), "data.input_shape", 1),
        (format!("[data]\ninput_shape = [16]\nclasses = {big}\n{MLP}"), "data.classes", 2),
        (format!("{DATA}{}", MLP.replace("[8]", &format!("[8, {big}]"))), "student.hidden", 1),
        (format!("{DATA}{}", MLP.replace("hidden", &format!("kernel = {big}\nhidden"))), "student.kernel", 1),
        (lm(2).replace("vocab = 4", &format!("vocab = {big}")), "student.transformer.vocab", 1),
        (lm(2).replace("d_model = 8", &format!("d_model = {big}")), "student.transformer.d_model", 1),
        (format!("{}mlp_width = {big}\n", lm(2)), "student.transformer.mlp_width", 1),
        // 0 is no learned positions, so the bound the message names starts there
        (format!("{}max_positions = {big}\n", lm(2)), "student.transformer.max_positions", 0),
    ];
    for (text, key, lo) in sized {
        assert_eq!(invalid(&text), (key.to_string(), range(big, lo, MAX_SIZE)), "{key}");
    }
    let train = |extra: &str| invalid(&format!("{DATA}{MLP}[train]\n{extra}\n"));
    let batch = MAX_BATCH + 1;
    assert_eq!(train(&format!("batch_size = {batch}")), ("train.batch_size".into(), range(batch, 1, MAX_BATCH)));
    let eval = ("train.eval_batch_size".to_string(), range(batch, 1, MAX_BATCH));
    assert_eq!(train(&format!("eval_batch_size = {batch}")), eval);
    assert_eq!(train("epochs = 1000001"), ("train.epochs".into(), range(MAX_EPOCHS + 1, 1, 1_000_000)));
}

/// The largest accepted configs expand into at most MAX_LAYER_LIST layers, and are priced.
#[test]
fn the_largest_accepted_configs_are_bounded_by_construction() {
    let c = Config::from_toml_str(&lm(MAX_LAYERS)).unwrap();
    let layers = arch::layers(&c.student, &c.data).unwrap();
    // embed, embed_drop, two blocks per layer, final_norm, head
    assert_eq!(layers.len(), 2 * 4096 + 4);
    assert!(layers.len() <= MAX_LAYER_LIST);
    assert_eq!(
        estimate(&c, &Inputs { batch: Some(2), ..Inputs::default() }).unwrap().layers.len(),
        8196 + 1,
        "and the loss"
    );

    // conv blocks (conv, bn, act) and hidden blocks (linear, norm, act, dropout) at their limit
    let text = format!(
        "[data]\ninput_shape = [1, 4, 4]\nclasses = 4\n[student]\nfamily = \"cnn\"\npool = \"none\"\nnorm = \"batch\"\n\
         dropout = 0.1\nchannels = {}\nhidden = {}\n[teacher]\nparams = 10\n",
        list("2", MAX_BLOCKS),
        list("3", MAX_BLOCKS)
    );
    let c = Config::from_toml_str(&text).unwrap();
    let layers = arch::layers(&c.student, &c.data).unwrap();
    assert_eq!(layers.len(), 3 * 1024 + 1 + 4 * 1024 + 1);
    assert!(layers.len() <= MAX_LAYER_LIST);
    assert!(estimate(&c, &Inputs::default()).is_ok());
    // the explorer's sweep of a pasted cfg at the limit: tests/explorer.rs
}

#[test]
fn an_integer_past_64_bits_names_its_key_and_the_maximum() {
    let reason = |key: &str| format!("invalid number for key `{key}` (TOML integers are at most 9223372036854775807)");
    let e = Config::from_toml_str(&format!("{DATA}{MLP}[train]\nepochs = 99999999999999999999\n")).unwrap_err();
    assert_eq!(e, SpecError::Parse { place: Some((10, 10)), reason: reason("train.epochs") });
    // inside a multi-line array, and a malformed number
    let e =
        Config::from_toml_str(&format!("{DATA}[student]\nfamily = \"mlp\"\nhidden = [8,\n  -99999999999999999999]\n"));
    assert_eq!(e.unwrap_err(), SpecError::Parse { place: Some((7, 3)), reason: reason("student.hidden") });
    let e = Config::from_toml_str(&format!("{DATA}{MLP}[train]\nepochs = 1__0\n")).unwrap_err();
    assert_eq!(e.reason(), reason("train.epochs"));
}

#[test]
fn a_layer_too_large_to_price_names_the_layer_and_its_key() {
    // conv1's output is 16384 x 2^24 x 2^24 x 4 bytes = 2^64 per sample; the flattened input
    // after one pooling (2^60 elements) still fits in 64 bits
    let huge = "[data]\ninput_shape = [1, 16777216, 16777216]\nclasses = 4\n";
    let conv = "family = \"cnn\"\nchannels = [16384]\n";
    let text = format!("{huge}[student]\n{conv}[teacher]\nparams = 10\n");
    let c = Config::from_toml_str(&text).unwrap();
    let message = "layer conv1 needs more than 16 EiB (2^64 bytes); make it smaller".to_string();
    assert_eq!(
        estimate(&c, &Inputs::default()).unwrap_err(),
        EstimateError::Invalid { key: "student.channels".into(), message: message.clone() }
    );
    // the same layer in the teacher's architecture (the student being small)
    let text = format!("{huge}[student]\nfamily = \"cnn\"\nchannels = [1]\n[teacher.arch]\n{conv}");
    let c = Config::from_toml_str(&text).unwrap();
    let e = MemoryModel::new(&c, &Inputs::default()).unwrap_err();
    assert_eq!(e, EstimateError::Invalid { key: "teacher.arch.channels".into(), message });
}

#[test]
fn an_evaluation_batch_too_large_names_eval_batch_size() {
    // 2^24 inputs of 4 bytes at 2^40 samples: 2^66 bytes in the evaluation pass
    let text = format!(
        "[data]\ninput_shape = [16777216]\nclasses = 4\n{MLP}[train]\nbatch_size = 1\neval_batch_size = {MAX_BATCH}\n"
    );
    let e = estimate(&Config::from_toml_str(&text).unwrap(), &Inputs::default()).unwrap_err();
    let message = "1099511627776 samples need more than 16 EiB (2^64 bytes) in the evaluation pass; lower it";
    assert_eq!(e, EstimateError::Invalid { key: "train.eval_batch_size".into(), message: message.into() });
}
