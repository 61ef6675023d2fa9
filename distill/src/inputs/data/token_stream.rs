//! A language model's text: the lines of a `.txt` tokenised whole, each closed by the
//! end-of-text token, laid back to back into one stream and cut into windows of
//! `data.input_shape[0]` tokens (the packing of Hugging Face's `run_clm.py`, `group_texts`).
//! Every window is full: the tokens after the last whole window are dropped and counted.
//!
//! Each window's labels are the stream's next tokens [N, S] Int64: label `j` of window `i` is
//! stream token `i * S + j + 1`, so a window's last position predicts the first token of the
//! next window; only the stream's very last token has none (-100, PyTorch's `ignore_index`).
use tch::Tensor;

pub use super::text::Packing;
use super::text::Text;
use super::tokenizer::TextTokenizer;
use crate::host::error::{DistillError, Result};

/// The label of a position with no next token (`ignore_index` of PyTorch's `cross_entropy`).
pub const IGNORE: i64 = -100;

/// The windows of `lines` tokenised by `tokenizer` (in [`super::tokenizer::TextLayout::Packed`]):
/// the windows as [`Text`] (every one `max_tokens` long), their labels [N, S] and the counts;
/// `blank` is the blank lines the reader skipped.
///
/// # Errors
/// [`DistillError::Data`] naming `path` when the stream holds fewer tokens than one window.
pub fn pack(
    path: &std::path::Path,
    lines: &[&str],
    tokenizer: &TextTokenizer,
    blank: u64,
) -> Result<(Text, Tensor, Packing)> {
    let eos = tokenizer.end_of_text().expect("a packed tokenizer has an end-of-text token");
    let mut stream: Vec<u32> = Vec::new();
    let (mut blank, mut packed) = (blank, 0u64);
    for encoded in tokenizer.encode(lines)? {
        // a line of characters the tokenizer drops (control or zero-width ones) is blank
        if !encoded.content {
            blank += 1;
            continue;
        }
        stream.extend_from_slice(&encoded.ids);
        stream.push(eos);
        packed += 1;
    }
    let s = tokenizer.max_tokens();
    let windows = stream.len() / s;
    if windows == 0 {
        return Err(DistillError::data(
            path,
            format!(
                "holds {} tokens, fewer than one window of data.input_shape[0] = {s}: give more text or a shorter input_shape",
                stream.len()
            ),
        ));
    }
    let kept: Vec<&[u32]> = stream.chunks_exact(s).collect();
    let next: Vec<i64> = (0..windows * s).map(|k| stream.get(k + 1).map_or(IGNORE, |&t| i64::from(t))).collect();
    let labels = Tensor::from_slice(&next).reshape([windows as i64, s as i64]);
    let packing =
        Packing { lines: packed, tokens: stream.len() as u64, dropped_tokens: (stream.len() - windows * s) as u64 };
    let mut text = Text::new(&kept, eos, s, (blank, 0));
    text.set_packing(packing.clone());
    Ok((text, labels, packing))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inputs::data::tokenizer::TextLayout;

    /// A word-level tokenizer: <|endoftext|>=0 a=1 b=2 c=3 d=4 (whitespace split).
    const TOKENIZER: &str = r#"{"version":"1.0","truncation":null,"padding":null,
 "added_tokens":[{"id":0,"content":"<|endoftext|>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true}],
 "normalizer":null,"pre_tokenizer":{"type":"WhitespaceSplit"},"post_processor":null,"decoder":null,
 "model":{"type":"WordLevel","vocab":{"<|endoftext|>":0,"a":1,"b":2,"c":3,"d":4},"unk_token":"<|endoftext|>"}}"#;

    fn tokenizer(window: u64) -> (tempfile::TempDir, TextTokenizer) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("t.json"), TOKENIZER).unwrap();
        let t = TextTokenizer::load(&dir.path().join("t.json"), window, Some(5), TextLayout::Packed).unwrap();
        (dir, t)
    }

    #[test]
    fn lines_are_closed_packed_and_cut_with_next_token_labels() {
        // stream: a b 0 c 0 d d a 0 (9 tokens) -> windows of 4: [a b 0 c] [0 d d a], 1 dropped
        let (_dir, t) = tokenizer(4);
        let (text, labels, packing) = pack("x.txt".as_ref(), &["a b", "c", "d d a"], &t, 2).unwrap();
        assert_eq!(packing, Packing { lines: 3, tokens: 9, dropped_tokens: 1 });
        assert_eq!((text.len(), text.sentence(0), text.sentence(1)), (2, &[1u32, 2, 0, 3][..], &[0u32, 4, 4, 1][..]));
        // the last position of window 0 predicts window 1's first token; window 1's the dropped 0
        assert_eq!(Vec::<Vec<i64>>::try_from(&labels).unwrap(), [vec![2, 0, 3, 0], vec![4, 4, 1, 0]]);
        assert_eq!((text.stats().lines, text.stats().blank_skipped, text.stats().max_tokens), (2, 2, 4));
        assert_eq!(text.stats().packing.as_ref(), Some(&packing));
    }

    #[test]
    fn the_stream_end_has_no_label_and_too_little_text_is_refused() {
        // stream: a b 0 (3 tokens) in windows of 3: the last token has no next one
        let (_dir, t) = tokenizer(3);
        let (_, labels, _) = pack("x.txt".as_ref(), &["a b"], &t, 0).unwrap();
        assert_eq!(Vec::<Vec<i64>>::try_from(&labels).unwrap(), [vec![2, 0, IGNORE]]);
        let (_dir, t) = tokenizer(8);
        let e = pack("x.txt".as_ref(), &["a b"], &t, 0).unwrap_err().to_string();
        assert!(
            e.contains("x.txt") && e.contains("holds 3 tokens, fewer than one window of data.input_shape[0] = 8"),
            "{e}"
        );
    }
}
