//! Tests of `reader.rs`: its answers against basic-toml running the schema's visitors itself.
use super::*;
use crate::schema::spec::Config;

/// basic-toml running the schema's visitors itself, and [`read`]: the value or the error
/// (its message and place).
fn both(text: &str) -> (String, String) {
    let show = |answer: Result<Config, basic_toml::Error>| match answer {
        Ok(c) => format!("{c:?}"),
        Err(e) => format!("{e} {:?}", e.line_col()),
    };
    let read = read::<Config>(text).map_err(|f| match f {
        Failure::Toml(e) => e,
        Failure::Unplaced(m) => panic!("{text}: unplaced {m}"),
    });
    (show(basic_toml::from_str::<Config>(text)), show(read))
}

fn same(text: &str) {
    let (direct, read) = both(text);
    assert_eq!(read, direct, "{text}");
}

const BASE: &str = "[data]\ninput_shape = [4]\nclasses = 3\n[student]\nfamily = \"mlp\"\nhidden = [8]\n";

#[test]
fn every_answer_is_basic_tomls_own() {
    let after_base = [
        "",
        "foo = 1\n",
        "[train]\nepochs = \"x\"\n",
        "[train]\nepochs = -1\n",
        "[train]\nepochs = 1.5\n",
        "[train]\nbetas = [0.9]\n",
        "[train]\nbetas = []\n",
        "[train]\nbetas = [0.9, 0.99, 0.999]\n",
        "[train]\nbetas = [0.9, 0.99, { a = 1, a = 2 }]\n",
        "[train]\nbetas = [0.9, \"x\"]\n",
        "[train]\nbetas = 0.9\n",
        "[train]\nbetas = { a = 1 }\n",
        "[train]\nbatch_size = \"big\"\n",
        "[train]\nbatch_size = \"AUTO\"\n",
        "[train]\nbatch_size = -3\n",
        "[train]\nbatch_size = [3]\n",
        "[kd]\nalpha = 0.5\nalpha = 0.6\n",
        "[kd]\nalpha = 0.5\n[kd]\ntemperature = 2.0\n",
        "[kd]\nobjective = 3\n",
        "[kd]\nobjective = \"foo\"\n",
        "[kd]\nobjective = \"Embedding-MSE\"\n",
        "[train]\n[train.epochs]\nx = 1\n",
        "[[train]]\nepochs = 1\n[[train]]\nepochs = 2\n",
        "[teacher]\noutput = 2\n",
        "[teacher]\noutput = \"logits\"\n",
        "[teacher]\noutput = -1\n",
        "[teacher]\noutput = 1.5\n",
        "[teacher]\noutput = true\n",
        "[teacher]\noutput = [0]\n",
        "[teacher]\noutput = { a = 1 }\n",
        "[teacher.output]\na = 1\n",
        "[teacher]\narch = { family = \"mlp\", hidde = [3] }\n",
        "[teacher]\narch = { family = \"mlp\", family = \"cnn\" }\n",
        "[teacher]\narch = { family = \"mlp\", hidden = [3, { a = 1, a = 2 }] }\n",
        "[teacher]\narch = { hidden = [3] }\n",
        "[teacher]\narch = []\n",
        "[teacher.arch]\nfamily = \"cnn\"\nchannels = [\"a\"]\n",
        "[teacher.arch]\nfamily = \"cnn\"\nchannels = [4]\n[teacher.arch.transformer]\nlayers = 2\n",
        "[student.transformer]\nlayerz = 3\n",
        "[student.transformer]\nlayers = 3\nlayers = 4\n",
        "[[student.transformer]]\nlayers = 3\n",
        "checkpointing = 0\n",
        "checkpointing = \"x\"\n",
        "checkpointing = [1]\n",
        "checkpointing = \"SQRT\"\n",
        "[prune]\nsparsity = 0.5\nend_epoch = \"x\"\n",
        "[prune]\nscope = \"x\"\n",
        "[prune]\nsparsity = 0.5\nscope = \"layer\"\n",
        "[estimate]\ngpu = 3\n",
        "[estimate]\ngpu = \"a100 80gb\"\ndata_parallel = 2\n",
        "[data.classes]\nx = 1\n",
        "[data]\nfoo = 1\n",
    ];
    for extra in after_base {
        same(&format!("{BASE}{extra}"));
    }
    let whole = [
        "",
        "foo = 1\n[data]\n",
        "[data\n",
        "x = \n",
        "a = 1\na = 2\n",
        "data = [[4], 3]\n[student]\nfamily = \"mlp\"\n",
        "[[data]]\ninput_shape = [4]\nclasses = 3\n[student]\nfamily = \"mlp\"\n",
        "[data]\ninput_shape = [4]\nclasses = 3\nfoo = 1\nfoo = 2\n[student]\nfamily = \"mlp\"\n",
        "[data]\ninput_shape = [4]\ninput_shape = [5]\nfoo = 1\n[student]\nfamily = \"mlp\"\n",
        "[data]\ninput_shape = [[4]]\nclasses = 3\n[student]\nfamily = \"mlp\"\n",
        "[data]\ninput_shape = []\nclasses = 3\ntrain = \"caf\\u00e9.npz\"\n[student]\nfamily = \"mlp\"\n",
        "student.family = \"mlp\"\nstudent.famly = 1\n[data]\ninput_shape = [4]\nclasses = 3\n",
        "student.family = \"mlp\"\nstudent.family = \"cnn\"\n[data]\ninput_shape = [4]\nclasses = 3\n",
        "[student]\nhidden = [8]\n[data]\ninput_shape = [4]\nclasses = 3\n",
        "[student]\nfamily = \"mlp\"\n[data]\ninput_shape = [4]\nclasses = 3\n[student.transformer]\nlayers = 2\n",
        "[a]\nb = 1\n[[a]]\n",
        "[[a.b]]\n[a]\nb = 1\n",
        "[data]\ninput_shape = [4]\nclasses = 3\n[student]\nfamily = \"transformer\"\ntransformer = [2]\n",
    ];
    for text in whole {
        same(text);
    }
}

/// Mutations of the example cfg.toml files: each line left out, written twice, swapped with
/// the next, and each value replaced by values of other types.
#[test]
fn mutated_examples_get_basic_tomls_own_answers() {
    let examples = [
        BASE,
        include_str!("../../../examples/fashion-mnist/student.toml"),
        include_str!("../../../examples/minilm/student.toml"),
        include_str!("../../../examples/minilm/student-pruned.toml"),
        include_str!("../../../examples/smollm2/student.toml"),
        include_str!("../../../examples/smollm2/student-fast.toml"),
    ];
    let others = ["\"x\"", "-1", "2", "1.5", "true", "[1]", "[\"a\", 2]", "{ a = 1 }", "[]"];
    let mut cases = 0;
    for text in examples {
        let lines: Vec<&str> = text.lines().collect();
        let join = |lines: &[&str]| lines.iter().map(|l| format!("{l}\n")).collect::<String>();
        same(text);
        for i in 0..lines.len() {
            let mut v = lines.clone();
            v.remove(i);
            same(&join(&v));
            let mut v = lines.clone();
            v.insert(i, lines[i]);
            same(&join(&v));
            if i + 1 < lines.len() {
                let mut v = lines.clone();
                v.swap(i, i + 1);
                same(&join(&v));
            }
            if let Some((key, _)) = lines[i].split_once(" = ") {
                for other in others {
                    let mut v = lines.clone();
                    let line = format!("{key} = {other}");
                    v[i] = &line;
                    same(&join(&v));
                    cases += 1;
                }
            }
        }
    }
    assert!(cases > 100, "{cases}");
}
