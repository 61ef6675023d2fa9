//! Reading cfg.toml text with basic-toml: a guard against absurd nesting, and errors placed
//! where the mistake is written (line and column, 1-based, in bytes like basic-toml's).
use serde::de::DeserializeOwned;

use crate::schema::errors::SpecError;
use crate::schema::reader::Failure;
use crate::schema::spec::{Config, TrainSpec};

/// Arrays and inline tables nested deeper than this are refused before parsing: basic-toml
/// recurses once per level, and a few thousand levels overflow the stack (natively and in
/// the browser). The cfg schema needs 2.
pub const MAX_NESTING: usize = 32;

/// `text` (a leading UTF-8 byte-order mark ignored) as a `T`.
///
/// # Errors
/// [`SpecError::Parse`] for nesting deeper than [`MAX_NESTING`], TOML syntax, unknown keys,
/// wrong types and bad enum names, with the place and, where known, the key path.
pub fn parse<T: DeserializeOwned>(text: &str) -> Result<T, SpecError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    check_nesting(text)?;
    // through one deserializer of this crate, with basic-toml's errors (`crate::schema::reader`)
    crate::schema::reader::read(text).map_err(|failure| match failure {
        Failure::Toml(e) => parse_error(text, &e),
        Failure::Unplaced(reason) => SpecError::Parse { place: None, reason },
    })
}

/// Refuses brackets and braces (outside strings and comments) nested deeper than
/// [`MAX_NESTING`], at the first one past it.
fn check_nesting(text: &str) -> Result<(), SpecError> {
    let bytes = text.as_bytes();
    let (mut i, mut line, mut line_start, mut depth) = (0, 1, 0, 0);
    let mut string: Option<&[u8]> = None; // the closing delimiter of the string being read
    while i < bytes.len() {
        let rest = &bytes[i..];
        match (string, rest[0]) {
            (_, b'\n') => {
                (line, line_start) = (line + 1, i + 1);
                string = string.filter(|d| d.len() == 3); // a one-line string ends (TOML rejects it)
            }
            (Some(d), b'\\') if d[0] == b'"' => i += 1,
            (Some(d), _) if rest.starts_with(d) => {
                string = None;
                i += d.len() - 1;
            }
            (Some(_), _) => {}
            (None, b'#') => i += rest.iter().position(|&c| c == b'\n').unwrap_or(rest.len()) - 1,
            (None, q @ (b'"' | b'\'')) => {
                let d: &[u8] = if q == b'"' { b"\"\"\"" } else { b"'''" };
                let d = if rest.starts_with(d) { d } else { &d[..1] };
                string = Some(d);
                i += d.len() - 1;
            }
            (None, b'[' | b'{') => {
                depth += 1;
                if depth > MAX_NESTING {
                    let reason = format!("arrays or inline tables nested more than {MAX_NESTING} deep");
                    return Err(SpecError::Parse { place: Some((line, i - line_start + 1)), reason });
                }
            }
            (None, b']' | b'}') => depth = depth.saturating_sub(1),
            (None, _) => {}
        }
        i += 1;
    }
    Ok(())
}

/// A [`SpecError::Parse`] from basic-toml's error on `text`. basic-toml ends its message
/// with " at line L column C" (0-based in `line_col`); the place goes into its own field so
/// that [`SpecError::reason`] needs no text surgery.
///
/// basic-toml places syntax errors and bad values exactly, but a schema error found at a
/// table (an unknown or missing key, a bad enum name) at some table's header, often the last
/// one: such a place is moved to the key the message names. A missing top-level table has
/// no place.
fn parse_error(text: &str, e: &basic_toml::Error) -> SpecError {
    let message = e.to_string();
    let Some((line, column)) = e.line_col() else {
        return SpecError::Parse { place: None, reason: message };
    };
    let mut reason = message.rsplit_once(" at line ").map_or(message.as_str(), |(reason, _)| reason).to_string();
    if reason == "invalid number" {
        reason = invalid_number(text, line + 1);
    }
    let table = reason.rsplit_once(" for key `").and_then(|(_, path)| path.strip_suffix('`'));
    let named = |prefix: &str| reason.strip_prefix(prefix).and_then(|rest| rest.split_once('`')).map(|(k, _)| k);
    let schema = ["unknown variant `", "invalid type: ", "invalid value: "].iter().any(|p| reason.starts_with(p));
    let path = match (named("unknown field `"), named("missing field `"), table) {
        (Some(key), _, Some(table)) => Some(format!("{table}.{key}")),
        (Some(key), _, None) => Some(key.to_string()),
        (None, Some(_), None) => return SpecError::Parse { place: None, reason },
        (None, Some(_), Some(path)) => Some(path.to_string()),
        (None, None, Some(path)) if schema => Some(path.to_string()),
        _ => None,
    };
    let found = path.and_then(|path| locate(text, &path)).filter(|&(l, _)| l != line + 1);
    SpecError::Parse { place: Some(found.unwrap_or((line + 1, column + 1))), reason }
}

/// basic-toml's bare "invalid number" on 1-based `line`, with the key it is written under and
/// the range of TOML's integers (a number past it is the usual cause).
fn invalid_number(text: &str, line: usize) -> String {
    let key = keys(text).into_iter().take_while(|k| k.0 <= line).last().map_or(String::new(), |k| k.2);
    format!("invalid number for key `{key}` (TOML integers are at most 9223372036854775807)")
}

/// The 1-based line where `key` (a dotted path, as validation errors name it) is written in
/// `text`; else the line of the nearest table above it that is (`[student.transformer]` for a
/// defaulted `student.transformer.heads`); `None` when neither is written.
pub fn line_of(text: &str, key: &str) -> Option<usize> {
    let found = keys(text);
    let mut path = key;
    loop {
        if let Some(k) = found.iter().find(|k| k.2 == path) {
            return Some(k.0);
        }
        path = path.rsplit_once('.')?.0;
    }
}

/// The 1-based line and column where the dotted key `path` is written: `key = ...` (plain,
/// quoted or dotted) under its table's `[header]` or at the top level, or the header `[path]`.
/// None for keys of inline tables. Lines inside multi-line strings are skipped.
fn locate(text: &str, path: &str) -> Option<(usize, usize)> {
    keys(text).into_iter().find(|k| k.2 == path).map(|k| (k.0, k.1))
}

/// Each `[header]` and `key = ...` line of `text` in order, skipping multi-line strings: its
/// 1-based line and column and its dotted path.
fn keys(text: &str) -> Vec<(usize, usize, String)> {
    let mut found = Vec::new();
    let mut table = String::new();
    let mut string: Option<&str> = None; // the delimiter of an open multi-line string
    for (n, line) in text.lines().enumerate() {
        let t = line.trim_start();
        let column = line.len() - t.len() + 1;
        if let Some(d) = string {
            if line.matches(d).count() % 2 == 1 {
                string = None;
            }
        } else if let Some(header) = t.strip_prefix('[') {
            table = dotted(header.trim_start_matches('[').split(']').next().unwrap_or_default());
            found.push((n + 1, column, table.clone()));
        } else if let Some((key, value)) = t.split_once('=') {
            let key = dotted(key);
            found.push((n + 1, column, if table.is_empty() { key } else { format!("{table}.{key}") }));
            string = ["\"\"\"", "'''"].into_iter().find(|d| value.matches(d).count() % 2 == 1);
        }
    }
    found
}

/// A dotted key as its parts joined by '.', each trimmed and unquoted: `"a" . b` -> `a.b`.
fn dotted(key: &str) -> String {
    let parts: Vec<&str> = key.split('.').map(|p| p.trim().trim_matches(['"', '\''])).collect();
    parts.join(".")
}

impl Default for TrainSpec {
    fn default() -> Self {
        // (panics by Display: `expect` would pull the errors' Debug code into the wasm)
        parse("").unwrap_or_else(|e| panic!("every TrainSpec field has a default: {e}"))
    }
}

impl Config {
    /// Parses and validates a cfg.toml.
    ///
    /// # Errors
    /// [`SpecError::Parse`] (with line and column, and the key path where it is known) for
    /// TOML syntax, unknown keys and wrong types; [`SpecError::Invalid`] (with the key path)
    /// for values out of range.
    /// A GPU or preset name written loosely (`crate::schema::names`) is stored as its exact name.
    pub fn from_toml_str(text: &str) -> Result<Config, SpecError> {
        let mut config: Config = crate::schema::toml_text::parse(text)?;
        if let Some(g) = config.estimate.gpu.as_mut() {
            if let Ok(found) = crate::schema::catalogue::gpu(g) {
                *g = found.name.to_string();
            }
        }
        if let Some(p) = config.teacher.preset.as_mut() {
            if let Some(found) = crate::schema::teacher_presets::preset(p) {
                *p = found.name.to_string();
            }
        }
        config.validate()?;
        Ok(config)
    }

    /// Serialises back to TOML that [`Config::from_toml_str`] accepts.
    pub fn to_toml_string(&self) -> String {
        basic_toml::to_string(self).unwrap_or_else(|e| panic!("a Config always serialises: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::spec::Config;

    fn place(text: &str) -> (Option<(usize, usize)>, String) {
        match Config::from_toml_str(text) {
            Err(SpecError::Parse { place, reason }) => (place, reason),
            other => panic!("{text}: {other:?}"),
        }
    }

    const DATA: &str = "[data]\ninput_shape = [4]\nclasses = 3\n";
    const STUDENT: &str = "[student]\nfamily = \"mlp\"\n";

    #[test]
    fn key_errors_are_placed_on_the_keys_line_not_a_tables() {
        // an unknown top-level key (basic-toml names the last header) and an unknown table
        assert_eq!(place(&format!("foo = 3\n{DATA}{STUDENT}")).0, Some((1, 1)));
        assert_eq!(place(&format!("{DATA}[studnet]\nfamily = \"mlp\"\n")).0, Some((4, 1)));
        // an unknown key in a table that is not the last one, and in an indented sub-table
        assert_eq!(place(&format!("{DATA}foo = 1\n{STUDENT}")).0, Some((4, 1)));
        let (at, reason) = place(&format!("{DATA}{STUDENT}[student.transformer]\n  layerz = 3\n"));
        assert_eq!(at, Some((7, 3)));
        assert!(reason.starts_with("unknown field `layerz`") && reason.ends_with("for key `student.transformer`"));
        // a bad enum name, at its value like a wrong type
        let (at, reason) = place(&format!("{DATA}[student]\nfamily = \"mlpx\"\n"));
        assert_eq!(at, Some((5, 10)));
        assert_eq!(
            reason,
            "unknown variant `mlpx`, expected one of `mlp`, `cnn`, `transformer` for key `student.family`"
        );
        // quoted keys and headers, dotted keys
        assert_eq!(place(&format!("{DATA}{STUDENT}[\"train\"]\n\"epoch\" = 10\n")).0, Some((7, 1)));
        assert_eq!(place(&format!("student.family = \"mlp\"\nstudent.famly = 1\n{DATA}")).0, Some((2, 1)));
        // a multi-line string holding a line that looks like a header
        let text = format!(
            "[kd]\nalpha = 0.5\n{STUDENT}[data]\ninput_shape = [4]\nclasses = 3\ntrain = '''\n[kd]\n'''\nfoo = 1\n"
        );
        assert_eq!(place(&text).0, Some((11, 1)), "{}", place(&text).1);
        // basic-toml's own place where it is already the key's (an inline table)
        let inline = format!("{DATA}{STUDENT}[teacher]\narch = {{ family = \"mlp\", hidde = [3] }}\n");
        assert_eq!(place(&inline).0, Some((7, 8)));
    }

    #[test]
    fn a_tables_own_errors_stay_at_its_header_and_missing_tables_have_no_place() {
        let (at, reason) = place(&format!("{DATA}[student]\nhidden = [8]\n[kd]\nalpha = 0.5\n"));
        assert_eq!((at, reason.as_str()), (Some((4, 1)), "missing field `family` for key `student`"));
        assert_eq!(place(&format!("{DATA}{STUDENT}[student]\nfamily = \"mlp\"\n")).0, Some((6, 1)));
        assert_eq!(place(&format!("{DATA}[train]\nepochs = 3\n")), (None, "missing field `student`".to_string()));
    }

    #[test]
    fn a_byte_order_mark_is_ignored() {
        assert!(Config::from_toml_str(&format!("\u{feff}{DATA}{STUDENT}")).is_ok());
        assert_eq!(place("\u{feff}[data\n").0, Some((1, 6)));
        assert_eq!(place(&format!("\u{feff}foo = 1\n{DATA}{STUDENT}[train]\nseed = 1\n")).0, Some((1, 1)));
    }

    #[test]
    fn absurd_nesting_is_refused_before_it_overflows_the_stack() {
        let deep = |n: usize| format!("{DATA}{STUDENT}[train]\nz = {}{}\n", "[".repeat(n), "]".repeat(n));
        let (at, reason) = place(&deep(10_000));
        assert_eq!(at, Some((7, 5 + MAX_NESTING)));
        assert_eq!(reason, format!("arrays or inline tables nested more than {MAX_NESTING} deep"));
        // within the limit it is an ordinary schema error, and brackets in strings and
        // comments do not count
        assert!(place(&deep(MAX_NESTING)).1.contains("unknown field `z`"));
        let quoted =
            format!("{DATA}{STUDENT}[train]\n# {0}\nz = \"{0}\"\ny = '{0}'\nx = \"\"\"\n{0}\"\"\"\n", "[".repeat(99));
        assert!(place(&quoted).1.contains("unknown field `z`"), "{}", place(&quoted).1);
    }

    /// The schema read from cfg.toml text: defaults, refusals, round trips.
    mod schema {
        use crate::schema::errors::SpecError;
        use crate::schema::spec::*;
        use crate::schema::student_spec::*;
        use serde::Serialize;

        const MINIMAL: &str = "[data]\ninput_shape = [784]\nclasses = 10\n[student]\nfamily = \"mlp\"\n";

        #[test]
        fn defaults_fill_every_optional_key() {
            let c = Config::from_toml_str(MINIMAL).unwrap();
            assert_eq!(c.kd, KdSpec::default());
            assert_eq!(
                (c.kd.objective, c.kd.temperature, c.kd.alpha, c.kd.loss_chunk),
                (KdObjective::Logits, 4.0, 0.9, 0)
            );
            assert_eq!((c.kd.soft_divergence(), c.kd.jsd_beta()), (KdDivergence::ForwardKl, 0.5));
            assert_eq!(c.train.batch_size, BatchSize::Fixed(128));
            assert_eq!(c.train.optimizer, OptimizerKind::Adamw);
            assert_eq!(c.train.lr, 1e-3);
            assert_eq!(c.student.checkpointing, Checkpointing::None);
            assert_eq!(c.prune, None);
        }

        #[test]
        fn unknown_key_names_line_and_column() {
            let e = Config::from_toml_str(&format!("{MINIMAL}hiden = [10]\n")).unwrap_err();
            let msg = e.to_string();
            assert!(msg.starts_with("TOML parse error at line 6, column 1: unknown field `hiden`"), "{msg}");
            assert!(msg.ends_with("for key `student`"), "{msg}");
            assert!(!msg.contains('\n'), "one line: {msg}");
        }

        #[test]
        fn wrong_types_and_bad_syntax_name_the_place() {
            let e = Config::from_toml_str(&format!("{MINIMAL}[train]\nepochs = \"x\"\n")).unwrap_err();
            assert_eq!(
                e,
                SpecError::Parse {
                    place: Some((7, 10)),
                    reason: "invalid type: string \"x\", expected u64 for key `train.epochs`".into()
                }
            );
            assert_eq!(
            e.to_string(),
            "TOML parse error at line 7, column 10: invalid type: string \"x\", expected u64 for key `train.epochs`"
        );
            let e = Config::from_toml_str(&format!("{MINIMAL}[kd]\nalpha = \n")).unwrap_err();
            assert!(e.to_string().starts_with("TOML parse error at line 7, column 9: expected a value"), "{e}");
        }

        #[test]
        fn out_of_range_values_name_their_key() {
            let cases = [
                ("[kd]\nalpha = 1.5\n", "kd.alpha"),
                ("[kd]\ntemperature = 0.0\n", "kd.temperature"),
                ("[train]\nlr = -1.0\n", "train.lr"),
                ("[train]\nbatch_size = 0\n", "train.batch_size"),
                ("[prune]\nsparsity = 1.0\n", "prune.sparsity"),
                ("[prune]\nmethod = \"structured\"\nscope = \"global\"\nsparsity = 0.5\n", "prune.scope"),
                ("hidden = [8]\nnorm = \"layer\"\n[prune]\nmethod = \"structured\"\nsparsity = 0.5\n", "prune.method"),
            ];
            for (extra, key) in cases {
                match Config::from_toml_str(&format!("{MINIMAL}{extra}")) {
                    Err(SpecError::Invalid { key: k, .. }) => assert_eq!(k, key),
                    other => panic!("{extra}: expected an Invalid error on {key}, got {other:?}"),
                }
            }
        }

        #[test]
        fn batch_size_and_checkpointing_accept_words_and_numbers() {
            let c =
                Config::from_toml_str(&format!("{MINIMAL}checkpointing = \"sqrt\"\n[train]\nbatch_size = \"auto\"\n"))
                    .unwrap();
            assert_eq!(c.train.batch_size, BatchSize::Auto);
            assert_eq!(c.student.checkpointing, Checkpointing::Sqrt);
            let c = Config::from_toml_str(&format!("{MINIMAL}checkpointing = 3\n")).unwrap();
            assert_eq!(c.student.checkpointing, Checkpointing::Segments(3));
            assert!(Config::from_toml_str(&format!("{MINIMAL}checkpointing = 0\n")).is_err());
            assert!(Config::from_toml_str(&format!("{MINIMAL}[train]\nbatch_size = \"big\"\n")).is_err());
        }

        #[test]
        fn enum_names_are_the_names_serde_writes() {
            fn check<T: Serialize>(values: &[T], names: &[&str]) {
                assert_eq!(values.len(), names.len());
                for (v, n) in values.iter().zip(names) {
                    assert_eq!(serde_json::to_value(v).unwrap(), *n);
                }
            }
            check(Family::VALUES, Family::NAMES);
            check(Activation::VALUES, Activation::NAMES);
            check(Norm::VALUES, Norm::NAMES);
            check(Pool::VALUES, Pool::NAMES);
            check(MlpKind::VALUES, MlpKind::NAMES);
            check(NormKind::VALUES, NormKind::NAMES);
            check(AttentionKernel::VALUES, AttentionKernel::NAMES);
            check(HeadKind::VALUES, HeadKind::NAMES);
            check(NormPosition::VALUES, NormPosition::NAMES);
            check(Pooling::VALUES, Pooling::NAMES);
            check(KdObjective::VALUES, KdObjective::NAMES);
            check(OptimizerKind::VALUES, OptimizerKind::NAMES);
            check(Precision::VALUES, Precision::NAMES);
            check(PruneMethod::VALUES, PruneMethod::NAMES);
            check(PruneScope::VALUES, PruneScope::NAMES);
            check(Target::VALUES, Target::NAMES);
            check(MaskDtype::VALUES, MaskDtype::NAMES);
        }

        #[test]
        fn serialised_config_parses_back_equal() {
            for text in [
                include_str!("../../../examples/fashion-mnist/student.toml"),
                include_str!("../../../examples/minilm/student.toml"),
            ] {
                let c = Config::from_toml_str(text).unwrap();
                assert_eq!(Config::from_toml_str(&c.to_toml_string()).unwrap(), c);
            }
        }
    }
}
