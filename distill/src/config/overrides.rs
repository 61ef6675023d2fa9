//! Reading a cfg.toml with its `--set key.path=value` overrides: the text, the overrides applied
//! to it, the schema's validation (`estimator_wasm::schema`), and each error placed where the
//! mistake is: at its line in the file, or on the `--set` that brings it in.
use std::path::{Path, PathBuf};

use estimator_wasm::schema::Config;
use estimator_wasm::SpecError;

use crate::host::error::{DistillError, Result};

/// Reads, overrides (`--set`) and validates a cfg.toml.
///
/// # Errors
/// [`DistillError::Config`] naming the file, with the line/column or key at fault.
pub fn read_spec(path: &Path, sets: &[String]) -> Result<Config> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        DistillError::config(path, format!("cannot read the student config ({e}); pass --student <cfg.toml>"))
    })?;
    let own = Config::from_toml_str(&text);
    if sets.is_empty() || (own.is_err() && text.parse::<toml::Table>().is_err()) {
        // no overrides, or a file that no override can mend: its own error, at its own place
        return own.map_err(|e| DistillError::config(path, e.to_string()));
    }
    Config::from_toml_str(&apply_sets(path, &text, sets)?).map_err(|e| match own {
        // the file's own mistake, which the overrides leave in place: its place in the file
        Err(mine) if mine.reason() == e.reason() => DistillError::config(path, mine.to_string()),
        _ => blame(path, &text, sets, e),
    })
}

/// The error of a cfg with overrides, pinned on the first `--set` that brings it in: the line and
/// column of the rewritten text would point into a file that does not hold the mistake.
fn blame(path: &Path, text: &str, sets: &[String], error: SpecError) -> DistillError {
    let fails = |n: usize| apply_sets(path, text, &sets[..n]).map_or(true, |t| Config::from_toml_str(&t).is_err());
    match (0..sets.len()).find(|&n| !fails(n) && fails(n + 1)) {
        Some(n) => DistillError::Usage(format!("--set {}: {} (over {})", sets[n], error.reason(), path.display())),
        None => DistillError::config(path, error.to_string()),
    }
}

/// The cfg keys that name files. In the file a relative path is relative to the cfg's folder;
/// given with `--set` it is relative to the current folder, as any path typed on a command line
/// (`config::with_absolute_files` resolves the same keys).
pub const FILE_KEYS: [&str; 5] = ["data.train", "data.test", "data.tokenizer", "student.init", "teacher.hf"];

/// `sets` with each relative path set on a [`FILE_KEYS`] key made absolute against the current
/// folder (a quoted TOML string), the others as given: what `--resume` re-reads from another
/// folder must name the same files.
pub fn absolute_file_sets(sets: &[String]) -> Vec<String> {
    let absolute = |set: &String| -> Option<String> {
        let (key, raw) = set.split_once('=')?;
        let value = FILE_KEYS.contains(&key.trim()).then(|| set_value(set, key, raw).ok()).flatten()?;
        Some(format!("{key}={value}"))
    };
    sets.iter().map(|set| absolute(set).unwrap_or_else(|| set.clone())).collect()
}

/// The value of the `--set` `set` (`key=raw`): `raw` read as a TOML value, else as a bare
/// string ([`bare_string`]); a relative path on a [`FILE_KEYS`] key made absolute against the
/// current folder.
///
/// # Errors
/// [`DistillError::Usage`] naming the `--set`: a value that spans lines, a mistake
/// [`bare_string`] refuses, a path that cannot be made absolute.
fn set_value(set: &str, key: &str, raw: &str) -> Result<toml::Value> {
    if raw.contains(['\n', '\r']) {
        return Err(DistillError::Usage(format!("--set {key}: the value spans lines; give one TOML value")));
    }
    let value = match format!("v = {raw}").parse::<toml::Table>() {
        Ok(mut t) => t.remove("v").unwrap_or_else(|| toml::Value::String(raw.to_string())),
        Err(e) => bare_string(set, raw, &e)?,
    };
    match value {
        // `1e-400` reads as 0.0 without a word, and then "must be > 0" puzzles
        toml::Value::Float(0.0) if nonzero_mantissa(raw) => Err(DistillError::Usage(format!(
            "--set {set}: {} is below the smallest float (about 5e-324) and reads as 0; give a larger value",
            raw.trim()
        ))),
        toml::Value::String(file) if FILE_KEYS.contains(&key.trim()) => {
            let absolute = std::path::absolute(expand_home(&file)).map_err(|e| {
                DistillError::Usage(format!("--set {set}: cannot resolve {file} against the current folder ({e})"))
            })?;
            Ok(toml::Value::String(absolute.to_string_lossy().into_owned()))
        }
        other => Ok(other),
    }
}

/// Whether the float `raw` (`1e-400`, `0.0`) has a digit other than 0 before its exponent.
fn nonzero_mantissa(raw: &str) -> bool {
    raw.trim().split(['e', 'E']).next().is_some_and(|m| m.contains(['1', '2', '3', '4', '5', '6', '7', '8', '9']))
}

/// A [`FILE_KEYS`] path with a leading `~` (`~` alone or `~/...`) taken as the home folder
/// (`$HOME`), as a shell would: no shell expands it inside a cfg.toml or after the `=` of a
/// `--set`. Other paths, `~user`, and any path when `$HOME` is unset are kept as written (a
/// relative one, `~/x` among them then, resolved as any other).
pub fn expand_home(file: &str) -> PathBuf {
    let home = || std::env::var_os("HOME").filter(|h| !h.is_empty()).map(PathBuf::from);
    match file.strip_prefix('~') {
        Some("") => home().unwrap_or_else(|| PathBuf::from(file)),
        Some(rest) if rest.starts_with('/') => {
            home().map_or_else(|| PathBuf::from(file), |h| h.join(rest.trim_start_matches('/')))
        }
        _ => PathBuf::from(file),
    }
}

/// `error` pinned on the `--set` it comes from: a refusal of the cfg at `path`, made after the
/// schema accepted it (a precision `distill` does not train, a head the teacher cannot teach),
/// opens with the key at fault; when a `--set` put that key's value there (the last one of the key,
/// the one in effect), the file does not hold the mistake, so the message says `--set` as
/// [`read_spec`] does for the schema's own errors. Other errors are returned unchanged.
pub fn pin_on_set(error: DistillError, path: &Path, sets: &[String]) -> DistillError {
    match error {
        DistillError::Config { path: file, message } if file == path => {
            let sets_key =
                |set: &&String| set.split_once('=').is_some_and(|(key, _)| opens_with_key(&message, key.trim()));
            match sets.iter().rev().find(sets_key) {
                Some(set) => DistillError::Usage(format!("--set {set}: {message} (over {})", path.display())),
                None => DistillError::Config { path: file, message },
            }
        }
        DistillError::Restart { source, out, partial } => {
            DistillError::Restart { source: Box::new(pin_on_set(*source, path, sets)), out, partial }
        }
        DistillError::Resumable { source, out, partial, world } => {
            DistillError::Resumable { source: Box::new(pin_on_set(*source, path, sets)), out, partial, world }
        }
        other => other,
    }
}

/// Whether `message` opens with `key` itself (`train.precision: ...`, `student.init = ...`):
/// the key at fault, which every refusal names first; not a longer key that starts with it
/// (`train.precision_x`), a table under it, nor a key named later as advice ("data.test is
/// missing: ... set data.holdout") or in another reader's message ("TOML parse error at ...").
fn opens_with_key(message: &str, key: &str) -> bool {
    let part_of_key = |c: char| c.is_alphanumeric() || c == '_' || c == '.';
    !key.is_empty() && message.strip_prefix(key).is_some_and(|rest| !rest.starts_with(part_of_key))
}

/// Applies `--set key.path=value` overrides to the TOML text. `value` is read as a TOML value
/// (`0.5`, `true`, `[8, 16]`, `"bf16"`); anything else is taken as a string (`bf16`). A relative
/// path set on a [`FILE_KEYS`] key is made absolute against the current folder.
fn apply_sets(path: &Path, text: &str, sets: &[String]) -> Result<String> {
    let mut doc: toml::Table =
        text.parse().map_err(|e: toml::de::Error| DistillError::config(path, e.message().to_string()))?;
    for set in sets {
        let (key, raw) = set.split_once('=').ok_or_else(|| {
            DistillError::Usage(format!("--set {set}: expected KEY=VALUE, e.g. --set train.precision=bf16"))
        })?;
        let value = set_value(set, key, raw)?;
        let mut parts: Vec<&str> = key.trim().split('.').collect();
        let leaf = parts
            .pop()
            .filter(|l| !l.is_empty())
            .ok_or_else(|| DistillError::Usage(format!("--set {set}: empty key")))?;
        let mut table = &mut doc;
        for part in parts {
            let entry = table.entry(part.to_string()).or_insert_with(|| toml::Value::Table(toml::Table::new()));
            table = entry.as_table_mut().ok_or_else(|| {
                DistillError::Usage(format!("--set {set}: {part} is not a table in {}", path.display()))
            })?;
        }
        table.insert(leaf.to_string(), value);
    }
    Ok(toml::to_string(&doc).expect("a TOML table serialises"))
}

/// The `--set` value `raw` that TOML could not read (`error`) as a string (`bf16`), unless it
/// looks like a number, array, table or quoted string: then it is a mistake, not a word. A
/// value starting with `.` is a path (`../data/train.txt`) unless a digit follows (`.5`).
///
/// # Errors
/// [`DistillError::Usage`] naming the `--set`: an integer beyond TOML's range (i64, at most
/// 9223372036854775807), or TOML's own message.
fn bare_string(set: &str, raw: &str, error: &toml::de::Error) -> Result<toml::Value> {
    let v = raw.trim();
    let digits = v.strip_prefix(['+', '-']).unwrap_or(v);
    if !digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit() || c == '_') {
        return Err(DistillError::Usage(format!(
            "--set {set}: {v} is beyond TOML's integer range (at most {}); give a smaller value",
            i64::MAX
        )));
    }
    // `.5` is a number TOML cannot read; `../data/train.txt` and `./x` are paths
    let number_like = |s: &str| s.starts_with(|c: char| c.is_ascii_digit());
    let meant = match v.strip_prefix('.') {
        Some(rest) => number_like(rest),
        None => v.starts_with(|c: char| c.is_ascii_digit() || "+-[{\"'".contains(c)),
    };
    if meant {
        let why = error.message().trim().replace('\n', " ");
        let key = set.split_once('=').map_or(set, |(k, _)| k);
        // a number TOML cannot read wants a number written its way; quotes would make it a
        // string, which a numeric key refuses
        let numeric = number_like(v.trim_start_matches(['+', '-', '.']));
        let fix = match numeric {
            true => "write the number as TOML does: 0.5, 1e-3, 64 (floats up to about 1.8e308)".to_string(),
            false => format!("a string goes in quotes: --set '{key}=\"{v}\"'"),
        };
        return Err(DistillError::Usage(format!("--set {set}: {v} is not a TOML value ({why}); {fix}")));
    }
    Ok(toml::Value::String(raw.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sets_override_create_and_type_values() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(&path, "[data]\ninput_shape = [4]\nclasses = 3\n[student]\nfamily = \"mlp\"\n").unwrap();
        let sets =
            ["train.precision=bf16", "prune.sparsity=0.8", "student.hidden=[8, 4]", "kd.alpha=0.5"].map(String::from);
        let spec = read_spec(&path, &sets).unwrap();
        assert_eq!(spec.train.precision, estimator_wasm::schema::Precision::Bf16);
        assert_eq!(spec.prune.unwrap().sparsity, 0.8);
        assert_eq!(spec.student.hidden, vec![8, 4]);
        assert_eq!(spec.kd.alpha, 0.5);
        let e = read_spec(&path, &["kd.alpha=2".to_string()]).unwrap_err().to_string();
        assert!(e.starts_with("--set kd.alpha=2: kd.alpha"), "{e}");
        // the override at fault is named, not a line of the rewritten file
        let sets = ["kd.alpha=0.5", "train.epoch=2"].map(String::from);
        let e = read_spec(&path, &sets).unwrap_err().to_string();
        assert!(e.starts_with("--set train.epoch=2: unknown field `epoch`"), "{e}");
        assert!(!e.contains("line"), "{e}");
        assert!(read_spec(&path, &["nonsense".to_string()]).is_err());
        let e = read_spec(&path, &["train.epochs=5\ntrain.lr=3".to_string()]).unwrap_err().to_string();
        assert_eq!(e, "--set train.epochs: the value spans lines; give one TOML value");
    }

    #[test]
    fn an_integer_beyond_toml_is_named_with_the_range() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(&path, "[data]\ninput_shape = [4]\nclasses = 3\n[student]\nfamily = \"mlp\"\n").unwrap();
        let e = |set: &str| read_spec(&path, &[set.to_string()]).unwrap_err().to_string();
        for key in ["data.classes", "train.batch_size"] {
            assert_eq!(
                e(&format!("{key}=18446744073709551615")),
                format!(
                    "--set {key}=18446744073709551615: 18446744073709551615 is beyond TOML's integer range (at most \
                     9223372036854775807); give a smaller value"
                )
            );
        }
        // one past i64 is refused, i64::MAX itself reaches the schema
        assert!(e("train.epochs=-9223372036854775809").contains("is beyond TOML's integer range"));
        assert!(!e("train.epochs=9223372036854775807").contains("beyond TOML"));
        // a broken array is TOML's mistake, not the string "[8, 4"
        assert!(e("student.hidden=[8, 4").starts_with("--set student.hidden=[8, 4: [8, 4 is not a TOML value ("));
        // bare words are still strings
        assert!(read_spec(&path, &["train.precision=bf16".to_string()]).is_ok());
        // a float without its leading zero is a mistake that says how to quote a string
        assert_eq!(
            e("kd.alpha=.5"),
            "--set kd.alpha=.5: .5 is not a TOML value (invalid mantissa, expected digits); \
             write the number as TOML does: 0.5, 1e-3, 64 (floats up to about 1.8e308)"
        );
        // a float beyond f64: the fix is another number, not quotes (a numeric key refuses a
        // string); below the smallest float it would read as 0 and then fail "> 0"
        assert!(e("train.lr=1e400").ends_with("(floating-point number overflowed); write the number as TOML does: 0.5, 1e-3, 64 (floats up to about 1.8e308)"));
        assert_eq!(
            e("train.lr=1e-400"),
            "--set train.lr=1e-400: 1e-400 is below the smallest float (about 5e-324) and reads as 0; give a larger value"
        );
        let zero = read_spec(&path, &["kd.alpha=0.0".to_string()]).map_err(|e| e.to_string());
        assert!(!zero.is_err_and(|e| e.contains("smallest float")), "a written 0.0 is 0");
        // a broken array or quoted string still says how to quote
        assert!(e("data.train=\"x").contains("a string goes in quotes"));
    }

    #[test]
    fn a_set_file_path_is_relative_to_the_current_folder() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        let text = "[data]\ninput_shape = [4]\nclasses = 3\n[student]\nfamily = \"mlp\"\n";
        let here = std::env::current_dir().unwrap();
        for key in FILE_KEYS {
            let doc = apply_sets(&path, text, &[format!("{key}=\"corpus/t.txt\""), "kd.alpha=0.5".into()]).unwrap();
            let table: toml::Table = doc.parse().unwrap();
            let (section, leaf) = key.split_once('.').unwrap();
            let want = here.join("corpus/t.txt");
            assert_eq!(table[section][leaf].as_str(), Some(want.to_str().unwrap()), "{key}");
        }
        // absolute paths and keys that name no file are left as given
        let doc = apply_sets(&path, text, &["data.train=/srv/t.txt".into(), "train.precision=bf16".into()]).unwrap();
        let table: toml::Table = doc.parse().unwrap();
        assert_eq!(table["data"]["train"].as_str(), Some("/srv/t.txt"));
        assert_eq!(table["train"]["precision"].as_str(), Some("bf16"));
    }

    #[test]
    fn saved_sets_name_their_files_absolutely() {
        let here = std::env::current_dir().unwrap();
        let sets =
            ["data.train=corpus/t.txt", "data.test=\"held/out.txt\"", "data.tokenizer=/abs/tok.json", "kd.alpha=0.5"]
                .map(String::from);
        let saved = absolute_file_sets(&sets);
        let quoted = |p: &Path| toml::Value::String(p.to_string_lossy().into_owned()).to_string();
        assert_eq!(saved[0], format!("data.train={}", quoted(&here.join("corpus/t.txt"))));
        assert_eq!(saved[1], format!("data.test={}", quoted(&here.join("held/out.txt"))));
        assert_eq!(saved[2], "data.tokenizer=\"/abs/tok.json\"");
        assert_eq!(saved[3], "kd.alpha=0.5");
        // they read back as the same files
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        let text = "[data]\ninput_shape = [4]\nclasses = 3\n[student]\nfamily = \"mlp\"\n";
        assert_eq!(apply_sets(&path, text, &saved).unwrap(), apply_sets(&path, text, &sets).unwrap());
    }

    #[test]
    fn a_relative_path_is_a_string() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(&path, "[data]\ninput_shape = [4]\nclasses = 3\n[student]\nfamily = \"mlp\"\n").unwrap();
        let here = std::env::current_dir().unwrap();
        for raw in ["../data/train.txt", "./t.txt", ".hidden/t"] {
            let doc =
                apply_sets(&path, &std::fs::read_to_string(&path).unwrap(), &[format!("data.train={raw}")]).unwrap();
            let table: toml::Table = doc.parse().unwrap();
            let want = std::path::absolute(here.join(raw)).unwrap();
            assert_eq!(table["data"]["train"].as_str(), Some(want.to_str().unwrap()), "{raw}");
        }
    }

    #[test]
    fn a_refusal_of_a_set_value_names_the_set() {
        let cfg = Path::new("c.toml");
        let refused = || {
            DistillError::config(cfg, "train.precision: distill runs \"fp32\", \"fp16\" or \"bf16\" (the other recipes are for `distill plan`)")
        };
        let sets = ["kd.alpha=0.5", "train.precision=pure_bf16"].map(String::from);
        assert_eq!(
            pin_on_set(refused(), cfg, &sets).to_string(),
            "--set train.precision=pure_bf16: train.precision: distill runs \"fp32\", \"fp16\" or \"bf16\" (the other \
             recipes are for `distill plan`) (over c.toml)"
        );
        // the last --set of the key is the one in effect
        let twice = ["train.precision=fp16", " train.precision =pure_fp16"].map(String::from);
        assert!(pin_on_set(refused(), cfg, &twice).to_string().starts_with("--set  train.precision =pure_fp16: "));
        // the value came from the file, or the error is another file's: unchanged
        let unrelated = ["kd.alpha=0.5", "train.precision_x=1", "train=1"].map(String::from);
        assert_eq!(pin_on_set(refused(), cfg, &unrelated).to_string(), refused().to_string());
        assert_eq!(pin_on_set(refused(), Path::new("other.toml"), &sets).to_string(), refused().to_string());
        // a key named only as advice, or in a TOML error of the file itself, is not at fault
        let file_only = [
            "data.test is missing: set it to a held-out .npz, or set data.holdout = 0.1 to split data.train",
            "TOML parse error at line 12, column 6: invalid number for key `train.lr`",
        ];
        let sets = ["data.train=x.npz", "train.lr=0.001"].map(String::from);
        for message in file_only {
            assert_eq!(
                pin_on_set(DistillError::config(cfg, message), cfg, &sets).to_string(),
                format!("c.toml: {message}")
            );
        }
        let sets = ["kd.alpha=0.5", "train.precision=pure_bf16"].map(String::from);
        // inside a run's restart advice the refusal is pinned too
        let restart = refused().resumable(Path::new("r"), Path::new("r.partial"));
        assert!(pin_on_set(restart, cfg, &sets).to_string().starts_with("--set train.precision=pure_bf16: "));
    }

    #[test]
    fn only_the_key_a_refusal_opens_with_is_at_fault() {
        assert!(opens_with_key("train.precision: no", "train.precision"));
        assert!(opens_with_key("student.transformer.head = \"classifier\" ...", "student.transformer.head"));
        assert!(!opens_with_key("train.precision_x: no", "train.precision"));
        assert!(!opens_with_key("kd.train.precision: no", "train.precision"));
        assert!(!opens_with_key("student.transformer.head: no", "student.transformer"));
        assert!(!opens_with_key("anything", ""));
        // a key named later is advice, not the fault
        assert!(!opens_with_key(
            "data.test is missing: ... or set data.holdout = 0.1 to split data.train",
            "data.train"
        ));
    }

    #[test]
    fn a_home_path_starts_from_home() {
        let home = std::env::var_os("HOME").map(PathBuf::from).filter(|h| !h.as_os_str().is_empty());
        let Some(home) = home else { return };
        assert_eq!(expand_home("~/corpus/t.txt"), home.join("corpus/t.txt"));
        assert_eq!(expand_home("~"), home);
        for kept in ["~user/t.txt", "a/~/t.txt", "t~.txt", "/abs/t.txt"] {
            assert_eq!(expand_home(kept), PathBuf::from(kept), "{kept}");
        }
        // with --set, on a file key only
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        let text = "[data]\ninput_shape = [4]\nclasses = 3\n[student]\nfamily = \"mlp\"\n";
        let doc = apply_sets(&path, text, &["data.train=~/t.txt".into(), "kd.note=~/x".into()]).unwrap();
        let table: toml::Table = doc.parse().unwrap();
        assert_eq!(table["data"]["train"].as_str(), Some(home.join("t.txt").to_str().unwrap()));
        assert_eq!(table["kd"]["note"].as_str(), Some("~/x"));
    }

    #[test]
    fn a_mistake_in_the_file_keeps_its_place_under_overrides() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        let cfg = "[data]\ninput_shape = [4]\nclasses = 3\n[student]\nfamily = \"mlp\"\n[train]\nepoch = 3\n";
        std::fs::write(&path, cfg).unwrap();
        let alone = read_spec(&path, &[]).unwrap_err().to_string();
        assert!(alone.contains("line 7, column 1: unknown field `epoch`"), "{alone}");
        let set = ["kd.alpha=0.5".to_string()];
        assert_eq!(read_spec(&path, &set).unwrap_err().to_string(), alone);
        // not TOML at all: the file's own syntax error, with its place
        std::fs::write(&path, "[data]\ninput_shape = [4]\nclasses\n").unwrap();
        let e = read_spec(&path, &set).unwrap_err().to_string();
        assert!(e.contains("line 3, column 8"), "{e}");
        // an override that mends the file's mistake is taken
        std::fs::write(&path, "[data]\ninput_shape = [4]\nclasses = 3\n").unwrap();
        assert!(read_spec(&path, &["student.family=mlp".to_string()]).is_ok());
    }
}
