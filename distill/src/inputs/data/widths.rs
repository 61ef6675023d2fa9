//! The padded widths of a text run's batches, for the memory plan: each batch is padded to its
//! longest sentence ([`super::text`]), so a step holds memory for its rows x width. The epochs'
//! orders are the trainer's own ([`super::permutation`], [`super::buckets::bucketed`]), so the
//! widths are those the run will meet, not a bound.
use std::collections::BTreeMap;

use estimator_wasm::schema::Config;

use super::buckets::bucketed;
use super::{permutation, Dataset};

/// Epochs whose orders are walked: later ones draw from the same sentences and add little.
pub const MAX_EPOCHS: u64 = 16;

/// Every training batch of the run, in the order the trainer meets them, as (rows, width)
/// pairs: `lengths` holds each training sentence's tokens (special tokens included, after
/// truncation); each step takes the next `batch * world` positions of the epoch's order (the
/// global batch of a data-parallel job of `world` ranks; 1 alone), length-bucketed at that size
/// when `bucket` (`data.bucket_by_length`), for the first `min(epochs, MAX_EPOCHS)` epochs of
/// seed `seed`. Each rank trains on a contiguous share of the step (sizes differing by at most
/// one, `train::batches::Batches::shard`), padded to its own longest sentence: a step gives
/// `world` pairs, rank 0's first. A last global batch with fewer samples than ranks is dropped,
/// as the trainer drops it. Their mean rows x width is the run's padded tokens per step (its
/// FLOPs); their order is what each rank's caching allocator meets ([`worst_shares`]).
pub fn step_widths(
    lengths: &[usize],
    batch: usize,
    world: usize,
    epochs: u64,
    seed: u64,
    bucket: bool,
) -> Vec<(u64, u64)> {
    let (n, world) = (lengths.len(), world.max(1));
    let global = batch.max(1).saturating_mul(world).min(n).max(1);
    let mut shares = Vec::new();
    for epoch in 0..epochs.clamp(1, MAX_EPOCHS) {
        let order = permutation(n, seed, epoch);
        let order = if bucket { bucketed(order, |i| lengths[i], global, seed, epoch) } else { order };
        for step in order.chunks(global).filter(|step| step.len() >= world) {
            let m = step.len();
            for rank in 0..world {
                let rows = &step[rank * m / world..(rank + 1) * m / world];
                let width = rows.iter().map(|&i| lengths[i as usize]).max().unwrap_or(0) as u64;
                shares.push((rows.len() as u64, width));
            }
        }
    }
    shares
}

/// Of [`step_widths`]' pairs of `world` ranks, each step's share of the most padded tokens
/// (rows x width, the wider on a tie): one sequence whose every step holds as many tokens as
/// any rank's, for replaying the caching allocator of the rank that meets the largest batches
/// (with one rank, the steps themselves). Length-bucketed shares of a step differ by at most a
/// row and a few tokens of width, so this is, step by step, the last rank's share or close.
pub fn worst_shares(shares: &[(u64, u64)], world: usize) -> Vec<(u64, u64)> {
    shares.chunks(world.max(1)).filter_map(|step| step.iter().copied().max_by_key(|&(r, w)| (r * w, w))).collect()
}

/// The rows of the first epoch's training batch of `size` rows that holds the most padded
/// tokens (rows x its longest sentence), in `spec`'s order (`train.seed`,
/// `data.bucket_by_length`), for the step that checks a batch fits: the first `size` rows of
/// data that is not text.
pub fn widest_batch(data: &Dataset, size: usize, spec: &Config) -> Vec<i64> {
    let Some(text) = data.text() else {
        return (0..size as i64).collect();
    };
    let order = match spec.data.bucket_by_length {
        true => data.epoch_order(spec.train.seed, 0, size),
        false => permutation(data.len(), spec.train.seed, 0),
    };
    let tokens = |rows: &[i64]| rows.len() * rows.iter().map(|&i| text.sentence(i as usize).len()).max().unwrap_or(0);
    order.chunks(size.max(1)).max_by_key(|rows| tokens(rows)).map(<[i64]>::to_vec).unwrap_or_default()
}

/// The batches of a pass in length order (the evaluation, the teacher's pass over the train
/// set: [`super::Dataset::eval_batches`]) that can peak, as (rows, width) pairs: `lengths`
/// sorted and cut every `batch`, dominated pairs dropped as in [`frontier`].
pub fn pass_widths(lengths: &[usize], batch: usize) -> Vec<(u64, u64)> {
    let mut sorted = lengths.to_vec();
    sorted.sort_unstable();
    let batches: Vec<(u64, u64)> =
        sorted.chunks(batch.max(1)).map(|c| (c.len() as u64, *c.last().expect("a chunk") as u64)).collect();
    frontier(batches)
}

/// The pairs of `batches` that no other pair matches in both rows and width, sorted by width.
pub fn frontier(batches: impl IntoIterator<Item = (u64, u64)>) -> Vec<(u64, u64)> {
    let mut most: BTreeMap<u64, u64> = BTreeMap::new();
    for (rows, width) in batches {
        let slot = most.entry(width).or_insert(0);
        *slot = (*slot).max(rows);
    }
    let mut kept = Vec::new();
    let mut wider_rows = 0;
    for (&width, &rows) in most.iter().rev() {
        if rows > wider_rows {
            kept.push((rows, width));
            wider_rows = rows;
        }
    }
    kept.reverse();
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn widths_are_the_orders_own_and_dominated_pairs_are_dropped() {
        // 10 sentences of 1..=10 tokens in batches of 4: sorted into one pool, the full batches
        // are [1..4] and [5..8] (widths 4 and 8) and the partial last one [9, 10] (width 10)
        let lengths: Vec<usize> = (1..=10).collect();
        assert_eq!(frontier(step_widths(&lengths, 4, 1, 3, 0, true)), vec![(4, 8), (2, 10)]);
        // one batch of everything: the whole set at the longest width
        assert_eq!(frontier(step_widths(&lengths, 64, 1, 1, 0, true)), vec![(10, 10)]);
    }

    #[test]
    fn the_steps_are_every_batch_in_the_trainers_order() {
        // 10 sentences of 1..=10 tokens in batches of 4, 2 epochs: each epoch cuts 4 + 4 + 2
        // rows, and its widths are those of the frontier's batches plus the narrowest one (4)
        let lengths: Vec<usize> = (1..=10).collect();
        let steps = step_widths(&lengths, 4, 1, 2, 0, true);
        assert_eq!(steps.len(), 6);
        assert_eq!(steps.iter().map(|s| s.0).sum::<u64>(), 20);
        let mut epoch: Vec<(u64, u64)> = steps[..3].to_vec();
        epoch.sort_unstable_by_key(|s| s.1);
        assert_eq!(epoch, vec![(4, 4), (4, 8), (2, 10)]);
        assert_eq!(frontier(steps), vec![(4, 8), (2, 10)]);
    }

    #[test]
    fn data_parallel_ranks_pad_their_own_shares_and_a_last_batch_short_of_ranks_is_dropped() {
        // 11 sentences of 1..=11 tokens, 2 ranks x 2 rows, one sorted pool, global batches of 4:
        // [1-4] [5-8] and the last [9, 10, 11] (3 rows: shares [9] and [10, 11])
        let lengths: Vec<usize> = (1..=11).collect();
        let shares = step_widths(&lengths, 2, 2, 1, 0, true);
        let mut steps: Vec<[(u64, u64); 2]> = shares.chunks(2).map(|s| [s[0], s[1]]).collect();
        steps.sort_unstable_by_key(|s| s[1].1);
        assert_eq!(steps, vec![[(2, 2), (2, 4)], [(2, 6), (2, 8)], [(1, 9), (2, 11)]]);
        // the worst share of each step, in the trainer's order
        let worst = worst_shares(&shares, 2);
        assert_eq!(worst.len(), 3);
        let mut sorted = worst.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, vec![(2, 4), (2, 8), (2, 11)]);
        // 3 ranks: 11 = 6 + 5; the last batch of 5 splits [7] [8, 9] [10, 11]
        let shares = step_widths(&lengths, 2, 3, 1, 0, true);
        assert_eq!(&shares[3..], &[(1, 7), (2, 9), (2, 11)]);
        assert_eq!(shares.iter().map(|s| s.0).sum::<u64>(), 11);
        // 4 ranks x 2: a global batch of 8 and a last one of 3, fewer than 4 ranks: dropped
        let shares = step_widths(&lengths, 2, 4, 1, 0, true);
        assert_eq!(shares, vec![(2, 2), (2, 4), (2, 6), (2, 8)]);
    }

    #[test]
    fn unbucketed_batches_keep_the_widest_of_equal_rows() {
        // two batches of 4 in permutation order: whichever holds the 9-token sentence is 9
        // wide, and the other, no larger, is dropped
        let lengths = [3, 1, 4, 1, 5, 9, 2, 6];
        assert_eq!(frontier(step_widths(&lengths, 4, 1, 1, 7, false)), vec![(4, 9)]);
        // batches of 3 leave a last one of 2 rows: kept only if it is the widest
        let widths = frontier(step_widths(&lengths, 3, 1, 1, 7, false));
        assert_eq!(widths.last().map(|p| p.1), Some(9));
        assert!(widths.windows(2).all(|w| w[0].0 > w[1].0 && w[0].1 < w[1].1), "{widths:?}");
    }

    #[test]
    fn a_pass_in_length_order_keeps_its_last_batch_when_it_is_the_widest() {
        // sorted: [1, 2, 3] [4, 5, 6] [7]: a full batch 6 wide and the last one 7 wide
        assert_eq!(pass_widths(&[7, 3, 1, 6, 2, 5, 4], 3), vec![(3, 6), (1, 7)]);
        assert_eq!(pass_widths(&[5, 5, 5, 5], 2), vec![(2, 5)]);
    }

    #[test]
    fn the_probe_takes_the_batch_of_the_most_padded_tokens() {
        use crate::inputs::data::{Examples, Text};
        // sentences of 1..=10 tokens in batches of 4, one sorted pool: [1-4] 4 wide, [5-8] 8
        // wide (32 tokens), and the last [9, 10] (20 tokens): the probe takes [5-8]
        let sentences: Vec<Vec<u32>> = (1..=10).map(|n| vec![7; n]).collect();
        let text = Text::new(&sentences, 0, 16, (0, 0));
        let data = Dataset::new("t.txt".into(), Examples::Text(text), None);
        let spec = Config::from_toml_str(
            "[data]\ntokenizer = \"t.json\"\ninput_shape = [16]\nclasses = 4\nbucket_by_length = true\n\
             [student]\nfamily = \"transformer\"\nactivation = \"gelu\"\n[student.transformer]\nvocab = 8\nlayers = 1\n\
             d_model = 4\nheads = 1\nmlp_width = 4\nhead = \"embedding\"\n[kd]\nobjective = \"embedding_mse\"\n",
        )
        .unwrap();
        let mut widths: Vec<usize> = widest_batch(&data, 4, &spec).iter().map(|&i| i as usize + 1).collect();
        widths.sort_unstable();
        assert_eq!(widths, [5, 6, 7, 8]);
    }
}
