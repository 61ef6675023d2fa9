//! The cfg.toml reference (`docs/cfg-reference.md`), generated from the schema's own source so
//! that the two cannot drift apart: every key of every table, its type, its default and its
//! meaning (the field's doc comment, or its value type's). Shared by the example that writes
//! the file (`examples/cfg_reference.rs`) and the test that fails when they disagree
//! (`tests/cfg_reference.rs`).
//!
//! Keys, types and docs are read from the Rust source with `syn`; defaults from the compiled
//! schema itself: a minimal cfg.toml is parsed and written back as JSON, and a key serde leaves
//! out of the written file is named by its `skip_serializing_if` rule.
use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::Path;

use estimator_wasm::schema::Config;
use estimator_wasm::SpecError;
use quote::ToTokens;

/// The schema files whose structs and enums make up cfg.toml, relative to the crate.
pub const SOURCES: [&str; 4] =
    ["src/schema/spec.rs", "src/schema/student_spec.rs", "src/schema/kd_spec.rs", "src/schema/hidden_spec.rs"];

/// The smallest cfg.toml that holds every table (the estimate's is written separately).
pub const MINIMAL: &str = "[data]\ninput_shape = [8]\nclasses = 4\n\n[student]\nfamily = \"transformer\"\n\n\
[student.transformer]\nvocab = 4\nlayers = 1\nd_model = 4\nheads = 1\n\n[prune]\nsparsity = 0.5\n";

/// Valid cfg.toml files the bounds are probed in: [`MINIMAL`] (a transformer), a CNN and an
/// MLP, each with every table its family can hold.
pub const BASES: [&str; 3] = [
    MINIMAL,
    "[data]\ninput_shape = [1, 28, 28]\nclasses = 10\n\n[student]\nfamily = \"cnn\"\nchannels = [8]\nhidden = [16]\n\n\
[prune]\nsparsity = 0.5\n",
    "[data]\ninput_shape = [16]\nclasses = 10\n\n[student]\nfamily = \"mlp\"\nhidden = [16]\n\n[prune]\nsparsity = 0.5\n",
];

/// `base` with `key = value` in the table at `path` (the root when empty): the key's line
/// replaced where the table has one, else added; the table added at the end when `base` lacks it.
pub fn with_value(base: &str, path: &str, key: &str, value: &str) -> String {
    let line = format!("{key} = {value}");
    if path.is_empty() {
        return format!("{line}\n{base}");
    }
    let header = format!("[{path}]\n");
    let Some(at) = base.find(&header) else { return format!("{base}\n{header}{line}\n") };
    let start = at + header.len();
    let end = base[start..].find("\n[").map_or(base.len(), |i| start + i + 1);
    let body: Vec<&str> = base[start..end].lines().filter(|l| !l.starts_with(&format!("{key} ="))).collect();
    format!("{}{line}\n{}\n{}", &base[..start], body.join("\n"), &base[end..])
}

/// The bounds the validator holds a number (or a list of counts) to, found by writing
/// extreme values into each of [`BASES`] whose tables hold the key and keeping what
/// `Config::from_toml_str` says of this key: its "must ..." clauses, or `any` when every
/// probe passed; empty for keys that are not numbers.
fn limits(path: &str, key: &Key) -> String {
    let probes: &[&str] = match inner(&key.ty) {
        "u64" => &["0", "1", "4611686018427387904"],
        "f64" => &["-1.0", "0.0", "1e300"],
        "Vec<u64>" => &["[0]", "[4611686018427387904]"],
        _ => return String::new(),
    };
    let full = if path.is_empty() { key.name.clone() } else { format!("{path}.{}", key.name) };
    let mut clauses: Vec<String> = Vec::new();
    for base in BASES {
        if path.contains('.') && !base.contains(&format!("[{path}]\n")) {
            continue;
        }
        for value in probes {
            let text = with_value(base, path, &key.name, value);
            if let Err(SpecError::Invalid { key: k, message }) = Config::from_toml_str(&text) {
                if k == full || k.starts_with(&format!("{full}[")) {
                    // the bound, not the value tried nor advice on other keys
                    for clause in
                        message.split("; ").filter(|c| ["must", "needs", "is larger"].iter().any(|w| c.starts_with(w)))
                    {
                        if !clauses.iter().any(|c| c == clause) {
                            clauses.push(clause.to_string());
                        }
                    }
                }
            }
        }
    }
    if clauses.is_empty() {
        "any".into()
    } else {
        cell(&clauses.join("; "))
    }
}

/// One key of a table, as its struct field declares it.
pub struct Key {
    pub name: String,
    /// The Rust type as written (`Option<u64>`, `Vec<f64>`, `Precision`).
    pub ty: String,
    pub doc: String,
    /// serde's `default` attribute is present (bare or naming a function).
    pub has_default: bool,
    /// serde's `skip_serializing_if` function, when set.
    pub skip_if: Option<String>,
}

/// One struct of the schema (a cfg.toml table).
pub struct Struct {
    pub doc: String,
    pub keys: Vec<Key>,
}

/// One unit enum spelled by `names!`: its doc and its values with theirs.
pub struct Enum {
    pub doc: String,
    pub values: Vec<(String, String)>,
}

/// Everything the reference is made of, read from [`SOURCES`].
pub struct Schema {
    pub structs: BTreeMap<String, Struct>,
    pub enums: BTreeMap<String, Enum>,
}

/// A table of cfg.toml: its dotted path (`student.transformer`) and its struct.
pub struct Table {
    pub path: String,
    pub ty: String,
}

fn doc_of(attrs: &[syn::Attribute]) -> String {
    let lines: Vec<String> = attrs
        .iter()
        .filter(|a| a.path().is_ident("doc"))
        .filter_map(|a| match &a.meta {
            syn::Meta::NameValue(nv) => match &nv.value {
                syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Str(s), .. }) => Some(s.value().trim().to_string()),
                _ => None,
            },
            _ => None,
        })
        .collect();
    lines.join(" ").split_whitespace().collect::<Vec<_>>().join(" ")
}

fn serde_attrs(attrs: &[syn::Attribute]) -> (bool, Option<String>) {
    let (mut has_default, mut skip_if) = (false, None);
    for a in attrs.iter().filter(|a| a.path().is_ident("serde")) {
        let _ = a.parse_nested_meta(|m| {
            if m.path.is_ident("default") {
                has_default = true;
            }
            if m.path.is_ident("skip_serializing_if") {
                let s: syn::LitStr = m.value()?.parse()?;
                skip_if = Some(s.value());
            } else if m.input.peek(syn::Token![=]) {
                let _: syn::LitStr = m.value()?.parse()?;
            }
            Ok(())
        });
    }
    (has_default, skip_if)
}

/// Reads the structs and `names!` enums of [`SOURCES`] under `crate_dir`.
pub fn read_schema(crate_dir: &Path) -> Schema {
    let mut schema = Schema { structs: BTreeMap::new(), enums: BTreeMap::new() };
    let mut enum_docs = BTreeMap::new();
    for source in SOURCES {
        let text = std::fs::read_to_string(crate_dir.join(source)).expect("a schema source");
        let file = syn::parse_file(&text).expect("the schema source parses");
        for item in file.items {
            match item {
                syn::Item::Struct(s) => {
                    let keys = s
                        .fields
                        .iter()
                        .filter_map(|f| {
                            let (has_default, skip_if) = serde_attrs(&f.attrs);
                            let name = f.ident.as_ref()?.to_string();
                            let ty = f.ty.to_token_stream().to_string().replace(' ', "");
                            Some(Key { name, ty, doc: doc_of(&f.attrs), has_default, skip_if })
                        })
                        .collect();
                    schema.structs.insert(s.ident.to_string(), Struct { doc: doc_of(&s.attrs), keys });
                }
                syn::Item::Enum(e) => {
                    let variants = e.variants.iter().map(|v| (v.ident.to_string(), doc_of(&v.attrs))).collect();
                    enum_docs.insert(e.ident.to_string(), (doc_of(&e.attrs), variants));
                }
                syn::Item::Macro(m) if m.mac.path.is_ident("names") => {
                    let (name, spelled) = names_macro(&m.mac.tokens.to_string());
                    let (doc, variants): (String, BTreeMap<String, String>) =
                        enum_docs.get(&name).cloned().expect("names! follows its enum");
                    let values =
                        spelled.into_iter().map(|(v, s)| (s, variants.get(&v).cloned().unwrap_or_default())).collect();
                    schema.enums.insert(name, Enum { doc, values });
                }
                _ => {}
            }
        }
    }
    schema
}

/// `Pool { Max = "max", Avg = "avg" }` as `("Pool", [("Max", "max"), ("Avg", "avg")])`.
fn names_macro(tokens: &str) -> (String, Vec<(String, String)>) {
    let (name, body) = tokens.split_once('{').expect("names!(Enum { .. })");
    let pairs = body
        .trim_end_matches(|c: char| c == '}' || c.is_whitespace())
        .split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|p| {
            let (v, s) = p.split_once('=').expect("Variant = \"name\"");
            (v.trim().to_string(), s.trim().trim_matches('"').to_string())
        })
        .collect();
    (name.trim().to_string(), pairs)
}

/// `Option<Box<StudentSpec>>` as `StudentSpec`.
fn inner(ty: &str) -> &str {
    let mut t = ty;
    for wrapper in ["Option<", "Box<"] {
        if let Some(rest) = t.strip_prefix(wrapper) {
            t = &rest[..rest.len() - 1];
        }
    }
    // a list of tables (`[[kd.hidden]]`), not of numbers
    match t.strip_prefix("Vec<") {
        Some(rest) if rest.starts_with(|c: char| c.is_ascii_uppercase()) => &rest[..rest.len() - 1],
        _ => t,
    }
}

/// The tables of cfg.toml in reading order, from `Config` down. A struct met twice (the
/// teacher's `arch` is a `[student]`) is listed once, at its shortest path.
pub fn tables(schema: &Schema) -> Vec<Table> {
    let children = |ty: &str| -> Vec<(String, String)> {
        let keys = &schema.structs[ty].keys;
        keys.iter()
            .filter(|k| schema.structs.contains_key(inner(&k.ty)))
            .map(|k| (k.name.clone(), inner(&k.ty).to_string()))
            .collect()
    };
    let join = |path: &str, key: &str| if path.is_empty() { key.to_string() } else { format!("{path}.{key}") };
    // breadth first: each struct's shortest path
    let mut home: BTreeMap<String, String> = BTreeMap::from([("Config".to_string(), String::new())]);
    let mut queue = std::collections::VecDeque::from([("Config".to_string(), String::new())]);
    while let Some((ty, path)) = queue.pop_front() {
        for (key, sub) in children(&ty) {
            if !home.contains_key(&sub) {
                home.insert(sub.clone(), join(&path, &key));
                queue.push_back((sub, join(&path, &key)));
            }
        }
    }
    // depth first, each struct where it lives
    fn walk(
        ty: &str,
        path: &str,
        home: &BTreeMap<String, String>,
        children: &dyn Fn(&str) -> Vec<(String, String)>,
        out: &mut Vec<Table>,
    ) {
        out.push(Table { path: path.to_string(), ty: ty.to_string() });
        for (key, sub) in children(ty) {
            let child = if path.is_empty() { key } else { format!("{path}.{key}") };
            if home[&sub] == child {
                walk(&sub, &child, home, children, out);
            }
        }
    }
    let mut out = Vec::new();
    walk("Config", "", &home, &children, &mut out);
    out
}

/// The defaults serde fills in, as JSON objects keyed by table path: [`MINIMAL`] parsed and
/// written back (keys it leaves out are absent).
fn written_defaults() -> BTreeMap<String, serde_json::Value> {
    let config: Config = basic_toml::from_str(MINIMAL).expect("the minimal cfg.toml parses");
    let mut all = serde_json::to_value(&config).expect("a config serialises");
    all["estimate"] = serde_json::to_value(&config.estimate).expect("estimate serialises");
    let mut out = BTreeMap::new();
    out.insert(String::new(), all.clone());
    for path in ["data", "teacher", "student", "kd", "train", "prune", "estimate"] {
        out.insert(path.to_string(), all[path].clone());
    }
    out.insert("student.transformer".to_string(), all["student"]["transformer"].clone());
    let pair = estimator_wasm::schema::hidden_spec::HiddenPair::default();
    out.insert("kd.hidden".to_string(), serde_json::to_value(&pair).expect("a pair serialises"));
    out
}

/// What a key defaults to when cfg.toml leaves it out.
fn default_of(key: &Key, written: Option<&serde_json::Value>, schema: &Schema) -> String {
    let required = !key.has_default && !key.ty.starts_with("Option<");
    if required {
        return "required".into();
    }
    if schema.structs.contains_key(inner(&key.ty)) {
        return if key.ty.starts_with("Vec<") { "none".into() } else { "unset".into() };
    }
    if let Some(v) = written {
        return format!("`{}`", toml_value(v));
    }
    match key.skip_if.as_deref() {
        Some("Option::is_none") => "unset".into(),
        Some("Vec::is_empty") => "`[]`".into(),
        Some("std::ops::Not::not") => "`false`".into(),
        Some("is_zero") => "`0`".into(),
        Some("is_three") => "`3`".into(),
        Some("Pool::is_max") => "`\"max\"`".into(),
        other => {
            panic!("key `{}`: no default known for skip_serializing_if {other:?} (written: {written:?})", key.name)
        }
    }
}

fn toml_value(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::Array(items) => {
            format!("[{}]", items.iter().map(toml_value).collect::<Vec<_>>().join(", "))
        }
        other => other.to_string(),
    }
}

/// The type column: what a value of `ty` is spelled as in TOML.
fn type_of(ty: &str, schema: &Schema) -> String {
    let t = inner(ty);
    if let Some(e) = schema.enums.get(t) {
        return e.values.iter().map(|(s, _)| format!("`\"{s}\"`")).collect::<Vec<_>>().join(", ");
    }
    if schema.structs.contains_key(t) {
        return if ty.starts_with("Vec<") { "list of tables".into() } else { "table".into() };
    }
    match t {
        "u64" => "integer".into(),
        "f64" => "number".into(),
        "bool" => "boolean".into(),
        "String" => "string".into(),
        "Vec<u64>" => "list of integers".into(),
        "Vec<f64>" => "list of numbers".into(),
        "[f64;2]" => "two numbers".into(),
        "BatchSize" => "integer or `\"auto\"`".into(),
        "Checkpointing" => "`\"none\"`, `\"sqrt\"` or an integer".into(),
        "OutputSelector" => "integer or string".into(),
        other => panic!("no TOML spelling known for type `{other}`"),
    }
}

/// A doc comment as one Markdown table cell: intra-doc links as code, no bare pipes.
fn cell(doc: &str) -> String {
    doc.replace("[`", "`").replace("`]", "`").replace("`None`", "unset").replace('|', "\\|")
}

/// What a key means: its field's doc, else its value type's, with each enum value's meaning.
pub fn meaning(key: &Key, schema: &Schema) -> String {
    let t = inner(&key.ty);
    let mut text = if key.doc.is_empty() {
        schema.enums.get(t).map(|e| e.doc.clone()).unwrap_or_default()
    } else {
        key.doc.clone()
    };
    if let Some(e) = schema.enums.get(t) {
        let documented: Vec<String> =
            e.values.iter().filter(|(_, d)| !d.is_empty()).map(|(s, d)| format!("`\"{s}\"`: {d}")).collect();
        if !documented.is_empty() {
            text = format!("{text} {}", documented.join(" "));
        }
    }
    if let Some(seen) = schema.structs.get(t) {
        if text.is_empty() {
            text = seen.doc.clone();
        }
    }
    cell(text.trim())
}

/// The whole of `docs/cfg-reference.md`.
pub fn reference(crate_dir: &Path) -> String {
    let schema = read_schema(crate_dir);
    let written = written_defaults();
    let mut out = String::new();
    out.push_str(
        "# cfg.toml reference\n\n\
         Every key `distill`, `distill plan` and the explorer read from a cfg.toml, generated from the \
         schema's source (`estimator-wasm/src/schema/`): the key's type, its default when left out and \
         its meaning. Regenerate with\n\n\
         ```sh\ncargo run -p estimator-wasm --example cfg_reference > docs/cfg-reference.md\n```\n\n\
         (`estimator-wasm/tests/cfg_reference.rs` fails when this file and the schema disagree). Every \
         table refuses keys it does not list, with the line and column; `required` keys have no \
         default; `unset` keys mean what their text says when absent. `limits` are the validator's own \
         words for the bounds of a number, found by trying extreme values in a transformer, a CNN and \
         an MLP cfg (`any`: none refused); they are checked before any work.\n",
    );
    let tables = tables(&schema);
    for table in &tables {
        if table.path.is_empty() {
            continue;
        }
        let st = &schema.structs[&table.ty];
        let defaults = written.get(&table.path);
        // a list of tables (`Vec<HiddenPair>`) is written `[[kd.hidden]]`
        let listed = schema.structs.values().flat_map(|st| &st.keys).any(|k| k.ty == format!("Vec<{}>", table.ty));
        let (open, close) = if listed { ("[[", "]]") } else { ("[", "]") };
        let _ = write!(out, "\n## `{open}{}{close}`\n\n", table.path);
        if !st.doc.is_empty() {
            let _ = writeln!(out, "{}\n", cell(&st.doc).replace("\\|", "|"));
        }
        out.push_str("| key | type | default | limits | meaning |\n|---|---|---|---|---|\n");
        for key in &st.keys {
            let sub = inner(&key.ty);
            let shown = tables.iter().find(|t| t.ty == sub && t.path != format!("{}.{}", table.path, key.name));
            let ty = match shown {
                Some(t) if key.ty.starts_with("Vec<") => format!("list of tables: the `[[{}]]` keys", t.path),
                Some(t) if schema.structs.contains_key(sub) => format!("table: the `[{}]` keys", t.path),
                _ => type_of(&key.ty, &schema),
            };
            let default = default_of(key, defaults.and_then(|d| d.get(&key.name)), &schema);
            let bounds = limits(&table.path, key);
            let _ = writeln!(out, "| `{}` | {ty} | {default} | {bounds} | {} |", key.name, meaning(key, &schema));
        }
    }
    out
}
