//! `docs/cfg-reference.md` is the schema's own account of cfg.toml: it must equal what
//! `reference/generate.rs` makes of the source, and the source it reads must hold exactly the
//! keys and names serde accepts.
#[path = "../reference/generate.rs"]
mod generate;

use std::path::Path;

use estimator_wasm::schema::Config;
use generate::{read_schema, tables, with_value, BASES, MINIMAL};

fn crate_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The backticked names serde's error for `text` expects ("expected `a`", "`a` or `b`",
/// "one of `a`, `b`, `c`").
fn expected_names(text: &str) -> Vec<String> {
    let err = basic_toml::from_str::<Config>(text).expect_err("the probe is refused").to_string();
    let list = err.split(", expected ").nth(1).unwrap_or_else(|| panic!("no list in: {err}"));
    let list = list.split(" for key `").next().unwrap_or(list);
    let list = list.split(" at line ").next().unwrap_or(list);
    list.split('`').skip(1).step_by(2).map(str::to_string).collect()
}

#[test]
fn the_reference_is_what_the_schema_generates() {
    let file = crate_dir().join("../docs/cfg-reference.md");
    let written = std::fs::read_to_string(&file).unwrap_or_default();
    assert!(
        written == generate::reference(crate_dir()),
        "{} is out of date with the schema: regenerate it with\n  \
         cargo run -p estimator-wasm --example cfg_reference > docs/cfg-reference.md",
        file.display()
    );
}

#[test]
fn the_probed_files_are_valid() {
    for base in BASES {
        Config::from_toml_str(base).unwrap_or_else(|e| panic!("{e}\n{base}"));
    }
}

#[test]
fn every_table_lists_the_keys_serde_accepts() {
    let schema = read_schema(crate_dir());
    let tables = tables(&schema);
    let paths: Vec<&str> = tables.iter().map(|t| t.path.as_str()).collect();
    assert_eq!(
        paths,
        ["", "data", "teacher", "student", "student.transformer", "kd", "kd.hidden", "train", "prune", "estimate"]
    );
    // `[[kd.hidden]]` is a list of tables, which `with_value` cannot write into: its keys are
    // checked by `estimator-wasm/src/schema/hidden_spec.rs`'s tests
    for table in tables.iter().filter(|t| t.path != "kd.hidden") {
        let source: Vec<String> = schema.structs[&table.ty].keys.iter().map(|k| k.name.clone()).collect();
        let serde = expected_names(&with_value(MINIMAL, &table.path, "zzz_unknown", "1"));
        assert_eq!(source, serde, "table [{}]", table.path);
    }
}

#[test]
fn every_named_value_is_one_serde_accepts() {
    let schema = read_schema(crate_dir());
    let mut probed = 0;
    for table in tables(&schema).into_iter().filter(|t| t.path != "kd.hidden") {
        for key in &schema.structs[&table.ty].keys {
            let ty = key.ty.trim_start_matches("Option<").trim_end_matches('>');
            let Some(e) = schema.enums.get(ty) else { continue };
            let source: Vec<String> = e.values.iter().map(|(name, _)| name.clone()).collect();
            let serde = expected_names(&with_value(MINIMAL, &table.path, &key.name, "\"zzz\""));
            assert_eq!(source, serde, "{}.{}", table.path, key.name);
            probed += 1;
        }
    }
    // every enum-valued key of the tables above (teacher and train precision, the student's
    // activation, norm, pool, family, the transformer's six, kd's two, prune's two, estimate's two)
    assert_eq!(probed, 19);
}

#[test]
fn every_key_says_what_it_means() {
    let schema = read_schema(crate_dir());
    for table in tables(&schema) {
        for key in &schema.structs[&table.ty].keys {
            if table.path.is_empty() {
                continue; // the root's keys are the tables, each with its own section
            }
            assert!(!generate::meaning(key, &schema).is_empty(), "{}.{} has no doc comment", table.path, key.name);
        }
    }
}
