//! The teacher's Hugging Face `tokenizer.json` (`data.tokenizer`) as the text reader uses it:
//! checked against the student once at load (a file, a tokenizer, a vocabulary the student's
//! embedding holds, room for its special tokens), padding off (batches are padded to their
//! longest by [`super::text::Text`]) and truncation to `data.input_shape[0]` tokens as Hugging
//! Face truncates (`LongestFirst`, from the right, the special tokens kept: `[CLS] ... [SEP]`).
use std::path::{Path, PathBuf};

use tokenizers::{PostProcessor, Tokenizer, TruncationDirection, TruncationParams, TruncationStrategy};

use crate::host::error::{DistillError, Result};

/// Sentences per `encode_batch` call: parallel within a chunk, and only one chunk's
/// `Encoding`s (tokens, offsets...) alive at a time.
const CHUNK: usize = 8192;

/// How a text file's lines become examples.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextLayout {
    /// One sentence per example, truncated to `data.input_shape[0]` tokens (sentence encoders).
    Sentences,
    /// The lines' tokens back to back, each line closed by the end-of-text token, cut into
    /// windows of `data.input_shape[0]` tokens (language models; `super::token_stream`).
    Packed,
}

/// The end-of-text tokens a packed stream closes each line with, in order of preference
/// (GPT-2 and SmolLM2, Llama, Gemma).
pub const END_OF_TEXT: [&str; 3] = ["<|endoftext|>", "</s>", "<eos>"];

/// A loaded, checked tokenizer.
pub struct TextTokenizer {
    path: PathBuf,
    tokenizer: Tokenizer,
    max_tokens: usize,
    pad_id: u32,
    layout: TextLayout,
}

/// One sentence's token ids, and whether truncation shortened it.
pub struct Encoded {
    pub ids: Vec<u32>,
    pub truncated: bool,
    /// Whether any token is the sentence's own (not a special token such as [CLS] or [SEP]):
    /// false for a line of characters the tokenizer drops (control and zero-width characters).
    pub content: bool,
}

impl TextTokenizer {
    /// Reads the tokenizer at `path`, for sentences of at most `max_tokens` tokens
    /// (`data.input_shape[0]`) and a student embedding of `vocab` rows
    /// (`student.transformer.vocab`; `None`: not checked).
    ///
    /// # Errors
    /// [`DistillError::Data`] naming the tokenizer file and the fix: missing, not a tokenizer
    /// (the parser's first line), more tokens than `vocab`, or `max_tokens` no larger than its
    /// special tokens.
    pub fn load(path: &Path, max_tokens: u64, vocab: Option<u64>, layout: TextLayout) -> Result<TextTokenizer> {
        let err = |m: String| DistillError::data(path, m);
        if !path.is_file() {
            let what = if path.is_dir() { "a folder, not a file" } else { "no such file" };
            return Err(err(format!(
                "{what}: set data.tokenizer to the teacher's tokenizer.json ({})",
                super::PATHS_RULE
            )));
        }
        let mut tokenizer = Tokenizer::from_file(path).map_err(|e| {
            let e = e.to_string();
            // the tokenizers crate's serde error on valid JSON of another shape reads like a
            // syntax error ("expected `,` or `}`"): say which it is
            let why = match std::fs::read(path).ok().and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            {
                Some(json) if json.get("model").is_none() => "valid JSON without a \"model\" key".to_string(),
                Some(_) => format!("valid JSON, but its tokenizer fields do not read: {}", first_line(&e)),
                None => first_line(&e).to_string(),
            };
            err(format!(
                "not a Hugging Face tokenizer.json ({why}): point data.tokenizer at the teacher's tokenizer.json"
            ))
        })?;
        let size = tokenizer.get_vocab_size(true) as u64;
        if let Some(vocab) = vocab.filter(|&v| size > v) {
            return Err(err(format!(
                "the tokenizer has {size} tokens but student.transformer.vocab = {vocab}: set vocab >= {size}"
            )));
        }
        let special = tokenizer.get_post_processor().map_or(0, |p| p.added_tokens(false));
        let max_tokens = max_tokens as usize;
        if max_tokens <= special {
            return Err(err(format!(
                "data.input_shape = [{max_tokens}] leaves no room beside the tokenizer's {special} special tokens: set input_shape to at least [{}]",
                special + 1
            )));
        }
        // the file's own padding (MiniLM's pads to 128) gives way to per-batch padding; its pad
        // id still fills the padding
        let pad_id = tokenizer.get_padding().map(|p| p.pad_id).or_else(|| tokenizer.token_to_id("[PAD]")).unwrap_or(0);
        tokenizer.with_padding(None);
        if layout == TextLayout::Packed {
            // a stream is cut into windows, never truncated
            tokenizer.with_truncation(None).map_err(|e| err(format!("cannot switch truncation off ({e})")))?;
            let tokenizer = TextTokenizer { path: path.to_path_buf(), tokenizer, max_tokens, pad_id, layout };
            let eos = tokenizer.end_of_text().ok_or_else(|| {
                err(format!(
                    "a language model's text is packed with an end-of-text token after each line, and this tokenizer has none of {}: add one to its added_tokens",
                    END_OF_TEXT.join(", ")
                ))
            })?;
            return Ok(TextTokenizer { pad_id: eos, ..tokenizer });
        }
        let truncation = TruncationParams {
            direction: TruncationDirection::Right,
            max_length: max_tokens,
            strategy: TruncationStrategy::LongestFirst,
            stride: 0,
        };
        tokenizer
            .with_truncation(Some(truncation))
            .map_err(|e| err(format!("cannot truncate to {max_tokens} tokens ({e})")))?;
        Ok(TextTokenizer { path: path.to_path_buf(), tokenizer, max_tokens, pad_id, layout })
    }

    /// How lines become examples.
    pub fn layout(&self) -> TextLayout {
        self.layout
    }

    /// Tokens in the vocabulary, added tokens included.
    pub fn vocab_size(&self) -> u64 {
        self.tokenizer.get_vocab_size(true) as u64
    }

    /// The id of the first of [`END_OF_TEXT`] the vocabulary holds.
    pub fn end_of_text(&self) -> Option<u32> {
        END_OF_TEXT.iter().find_map(|t| self.tokenizer.token_to_id(t))
    }

    /// The tokenizer file (for messages and the run's fingerprints).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The most tokens of a sentence, or a packed window's tokens (`data.input_shape[0]`).
    pub fn max_tokens(&self) -> usize {
        self.max_tokens
    }

    /// The id padding positions hold: the file's padding id, else `[PAD]`'s, else 0 (packed:
    /// the end-of-text id).
    pub fn pad_id(&self) -> u32 {
        self.pad_id
    }

    /// Token ids of `sentences` with the special tokens, truncated to [`Self::max_tokens`]
    /// (packed: whole), encoded in parallel chunks.
    ///
    /// # Errors
    /// [`DistillError::Data`] naming the tokenizer file when the tokenizer fails on a sentence.
    pub fn encode(&self, sentences: &[&str]) -> Result<Vec<Encoded>> {
        let mut out = Vec::with_capacity(sentences.len());
        for chunk in sentences.chunks(CHUNK) {
            let encodings = self
                .tokenizer
                .encode_batch_fast(chunk.to_vec(), true)
                .map_err(|e| DistillError::data(&self.path, format!("cannot tokenize ({e})")))?;
            out.extend(encodings.into_iter().map(|e| Encoded {
                truncated: !e.get_overflowing().is_empty(),
                content: e.get_special_tokens_mask().contains(&0),
                ids: e.get_ids().to_vec(),
            }));
        }
        Ok(out)
    }
}

/// The first line of a multi-line error message.
fn first_line(message: &str) -> &str {
    message.lines().next().unwrap_or_default()
}
