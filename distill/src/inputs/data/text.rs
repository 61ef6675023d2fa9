//! Text examples: sentences kept on the host as token ids (back to back, with offsets: 170k
//! sentences of ~20 tokens take ~14 MB), batched with dynamic padding. A batch is built in one
//! host pass (ids padded to the longest sentence of the batch, and the attention mask) and
//! reaches the device in one copy.
use serde::{Deserialize, Serialize};
use tch::{Device, Kind, Tensor};

use super::input::ModelInput;

/// What reading a text file found, for the run's report and progress output. The counts are
/// the file's: a held-out split of it keeps them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TextStats {
    /// Sentences kept (non-blank lines).
    pub lines: u64,
    /// Blank lines skipped: no characters but white space, or no tokens at all.
    pub blank_skipped: u64,
    /// Sentences longer than `data.input_shape[0]` tokens, truncated to it (the tokenizer's
    /// closing special token, `[SEP]`, kept last).
    pub truncated: u64,
    /// Mean tokens per kept sentence, special tokens included, after truncation.
    pub mean_tokens: f64,
    /// Most tokens of a kept sentence, after truncation.
    pub max_tokens: u64,
    /// A language model's packed stream: what packing counted (`lines` above are then windows).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub packing: Option<Packing>,
}

/// What packing a file's lines counted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Packing {
    /// Lines read (non-blank), each closed by the end-of-text token.
    pub lines: u64,
    /// Tokens of the whole stream, end-of-text tokens included.
    pub tokens: u64,
    /// Tokens after the last whole window, left out.
    pub dropped_tokens: u64,
}

/// Sentences as token ids: sentence `i` is `ids[starts[i]..starts[i + 1]]`.
#[derive(Debug)]
pub struct Text {
    ids: Vec<u32>,
    /// N + 1 offsets into `ids`, from 0 to `ids.len()`.
    starts: Vec<usize>,
    /// The id padding positions hold (masked out: any id in the vocabulary would do).
    pad_id: u32,
    /// `data.input_shape[0]`: the most tokens a sentence holds, and so a batch's width.
    max_tokens: usize,
    /// Where batches go (the ids themselves stay on the host).
    device: Device,
    stats: TextStats,
}

impl Text {
    /// Sentences `sentences` (each already at most `max_tokens` ids, none empty) padded with
    /// `pad_id`; `counts` are what reading them counted: (blank lines skipped, sentences
    /// truncated).
    ///
    /// # Panics
    /// When a sentence is empty or longer than `max_tokens` (the reader truncates and skips).
    pub fn new<S: AsRef<[u32]>>(sentences: &[S], pad_id: u32, max_tokens: usize, counts: (u64, u64)) -> Text {
        let mut ids = Vec::with_capacity(sentences.iter().map(|s| s.as_ref().len()).sum());
        let mut starts = Vec::with_capacity(sentences.len() + 1);
        starts.push(0);
        for s in sentences {
            let s = s.as_ref();
            assert!(!s.is_empty() && s.len() <= max_tokens, "a sentence of {} tokens (1..={max_tokens})", s.len());
            ids.extend_from_slice(s);
            starts.push(ids.len());
        }
        let n = sentences.len();
        let max = sentences.iter().map(|s| s.as_ref().len()).max().unwrap_or(0);
        let stats = TextStats {
            lines: n as u64,
            blank_skipped: counts.0,
            truncated: counts.1,
            mean_tokens: if n == 0 { 0.0 } else { ids.len() as f64 / n as f64 },
            max_tokens: max as u64,
            packing: None,
        };
        Text { ids, starts, pad_id, max_tokens, device: Device::Cpu, stats }
    }

    pub fn len(&self) -> usize {
        self.starts.len() - 1
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The token ids of sentence `i`.
    pub fn sentence(&self, i: usize) -> &[u32] {
        &self.ids[self.starts[i]..self.starts[i + 1]]
    }

    /// What reading the file counted.
    pub fn stats(&self) -> &TextStats {
        &self.stats
    }

    /// Records what packing counted (a language model's windows, `super::token_stream`).
    pub fn set_packing(&mut self, packing: Packing) {
        self.stats.packing = Some(packing);
    }

    /// The id padding positions hold.
    pub fn pad_id(&self) -> u32 {
        self.pad_id
    }

    /// Sentences `index` ([K] Int64, any device), their ids copied; the file's counts kept.
    pub fn select(&self, index: &Tensor) -> Text {
        let rows = host_rows(index);
        let sentences: Vec<&[u32]> = rows.iter().map(|&r| self.sentence(r)).collect();
        let mut text = Text::new(&sentences, self.pad_id, self.max_tokens, (0, 0));
        text.stats = self.stats.clone();
        text.device = self.device;
        text
    }

    /// The same sentences, batched onto `device` (the ids stay on the host).
    pub fn into_device(self, device: Device) -> Text {
        Text { device, ..self }
    }

    /// The model input of sentences `index` ([B] Int64, any device): ids [B, S] padded with
    /// the pad id and the attention mask [B, S] (1 = token, 0 = padding), both Int64, S the
    /// longest of the B sentences.
    pub fn input(&self, index: &Tensor) -> ModelInput {
        self.padded(&host_rows(index))
    }

    /// The model input of sentences `start..start + len` (see [`Text::input`]).
    pub fn input_range(&self, start: i64, len: i64) -> ModelInput {
        let rows: Vec<usize> = (start as usize..(start + len) as usize).collect();
        self.padded(&rows)
    }

    /// Bytes of one sample as the networks receive it at the widest: ids and mask, Int64,
    /// `data.input_shape[0]` tokens each (the memory plan's worst case).
    pub fn sample_bytes(&self) -> u64 {
        2 * self.max_tokens as u64 * 8
    }

    /// Ids and mask of `rows`, built in one host buffer [2, B, S] and copied to the device once.
    fn padded(&self, rows: &[usize]) -> ModelInput {
        let b = rows.len();
        let s = rows.iter().map(|&r| self.starts[r + 1] - self.starts[r]).max().unwrap_or(0);
        let mut buf = vec![0i64; 2 * b * s];
        let (ids, mask) = buf.split_at_mut(b * s);
        for (i, &r) in rows.iter().enumerate() {
            let sentence = self.sentence(r);
            let (row, row_mask) = (&mut ids[i * s..(i + 1) * s], &mut mask[i * s..(i + 1) * s]);
            for (slot, &id) in row.iter_mut().zip(sentence) {
                *slot = i64::from(id);
            }
            row[sentence.len()..].fill(i64::from(self.pad_id));
            row_mask[..sentence.len()].fill(1);
        }
        let both = Tensor::from_slice(&buf).reshape([2, b as i64, s as i64]).to_device(self.device);
        debug_assert_eq!(both.kind(), Kind::Int64);
        ModelInput { x: both.get(0), mask: Some(both.get(1)) }
    }
}

/// `index` ([K] Int64, any device) as host row numbers.
fn host_rows(index: &Tensor) -> Vec<usize> {
    let rows =
        Vec::<i64>::try_from(index.to_device(Device::Cpu).to_kind(Kind::Int64).reshape([-1])).expect("an Int64 index");
    rows.into_iter().map(|r| r as usize).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text() -> Text {
        // [CLS]=101 ... [SEP]=102, pad 0; lengths 4, 2, 6
        let s: [&[u32]; 3] = [&[101, 7, 8, 102], &[101, 102], &[101, 1, 2, 3, 4, 102]];
        Text::new(&s, 0, 6, (2, 1))
    }

    fn rows(t: &Tensor) -> Vec<Vec<i64>> {
        Vec::<Vec<i64>>::try_from(t).unwrap()
    }

    #[test]
    fn a_batch_is_padded_to_its_longest_sentence_with_its_mask() {
        let t = text();
        let input = t.input(&Tensor::from_slice(&[1i64, 0]));
        assert_eq!(rows(&input.x), [vec![101, 102, 0, 0], vec![101, 7, 8, 102]]);
        assert_eq!(rows(input.mask.as_ref().unwrap()), [vec![1, 1, 0, 0], vec![1, 1, 1, 1]]);
        assert_eq!((input.x.kind(), input.mask.as_ref().unwrap().kind()), (Kind::Int64, Kind::Int64));
        let all = t.input_range(1, 2);
        assert_eq!(rows(&all.x), [vec![101, 102, 0, 0, 0, 0], vec![101, 1, 2, 3, 4, 102]]);
        assert_eq!(rows(all.mask.as_ref().unwrap()), [vec![1, 1, 0, 0, 0, 0], vec![1; 6]]);
    }

    #[test]
    fn the_pad_id_fills_padding() {
        let s: [&[u32]; 2] = [&[5, 6, 7], &[5]];
        let input = Text::new(&s, 9, 3, (0, 0)).input_range(0, 2);
        assert_eq!(rows(&input.x), [vec![5, 6, 7], vec![5, 9, 9]]);
    }

    #[test]
    fn stats_and_sizes_are_counted() {
        let t = text();
        assert_eq!(
            *t.stats(),
            TextStats { lines: 3, blank_skipped: 2, truncated: 1, mean_tokens: 4.0, max_tokens: 6, packing: None }
        );
        // ids and mask, 6 tokens of 8 bytes each
        assert_eq!(t.sample_bytes(), 96);
    }

    #[test]
    fn selecting_keeps_the_ids_and_the_file_counts() {
        let t = text().into_device(Device::Cpu);
        let part = t.select(&Tensor::from_slice(&[2i64, 1]));
        assert_eq!(part.len(), 2);
        assert_eq!((part.sentence(0), part.sentence(1)), (&[101u32, 1, 2, 3, 4, 102][..], &[101u32, 102][..]));
        assert_eq!(part.stats(), t.stats());
        assert_eq!(rows(&part.input_range(0, 2).x), [vec![101, 1, 2, 3, 4, 102], vec![101, 102, 0, 0, 0, 0]]);
    }
}
