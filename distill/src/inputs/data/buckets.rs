//! Length-bucketed batch order for text: sentences of similar length share a batch, so dynamic
//! padding pads little (WordNet lines average ~11 tokens but a random batch of 64 pads to its
//! longest, often 40+). The "sortish" order of fairseq and Hugging Face's `group_by_length`:
//! the epoch's seeded permutation is cut into pools of [`POOL_BATCHES`] batches, each pool
//! sorted by length and cut into batches, and the full batches shuffled across the epoch; the
//! last, partial batch stays last. Seeded by (seed, epoch) like the permutation, so a resumed
//! run rebuilds any epoch's order exactly.
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// Batches per pool sorted together: large enough that a pool's batches are near-uniform in
/// length, small enough that which sentences meet in a batch still varies by epoch.
pub const POOL_BATCHES: usize = 50;

/// `order` (an epoch's permutation of the samples) regrouped so that each run of `batch`
/// consecutive samples holds sentences of similar `length`; `seed` and `epoch` seed the
/// shuffle of the batches (a stream of its own, not the permutation's).
pub fn bucketed(mut order: Vec<i64>, length: impl Fn(usize) -> usize, batch: usize, seed: u64, epoch: u64) -> Vec<i64> {
    let batch = batch.max(1);
    for pool in order.chunks_mut(batch * POOL_BATCHES) {
        pool.sort_by_key(|&i| length(i as usize));
    }
    let full = order.len() / batch;
    let mut batches: Vec<usize> = (0..full).collect();
    // the permutation's seed with the golden-ratio constant added: another stream
    let mut rng = ChaCha8Rng::seed_from_u64(seed.wrapping_add(0x9e37_79b9_7f4a_7c15));
    rng.set_stream(epoch);
    batches.shuffle(&mut rng);
    let mut out = Vec::with_capacity(order.len());
    for b in batches {
        out.extend_from_slice(&order[b * batch..(b + 1) * batch]);
    }
    out.extend_from_slice(&order[full * batch..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batches(order: &[i64], batch: usize) -> Vec<Vec<i64>> {
        order.chunks(batch).map(|b| b.to_vec()).collect()
    }

    #[test]
    fn batches_hold_sentences_of_similar_length_in_a_seeded_order() {
        // samples 1..=9, sample i of length 10 - i: sorted by length, (9, 8), (7, 6), (5, 4),
        // (3, 2) and 1 alone, last
        let length = |i: usize| 10 - i;
        let order: Vec<i64> = vec![3, 7, 9, 1, 5, 8, 2, 6, 4];
        let out = bucketed(order.clone(), length, 2, 7, 0);
        let mut got = batches(&out, 2);
        assert_eq!(got.pop(), Some(vec![1]), "the partial batch stays last");
        got.sort();
        assert_eq!(got, [vec![3, 2], vec![5, 4], vec![7, 6], vec![9, 8]]);
        assert_eq!(out, bucketed(order.clone(), length, 2, 7, 0), "seeded");
        let epochs: Vec<Vec<i64>> = (1..4).map(|e| bucketed(order.clone(), length, 2, 7, e)).collect();
        assert!(epochs.iter().any(|o| *o != out), "epochs shuffle the batches differently");
    }

    #[test]
    fn each_pool_is_sorted_on_its_own() {
        // batch 2, pools of 100: the evens 0..200 fill the first pool, the odds the second, so
        // batches pair 2k with 2k + 2 (a sort of the whole epoch would pair 2k with 2k + 1)
        let order: Vec<i64> = (0..100).map(|i| 2 * i).chain((0..100).map(|i| 2 * i + 1)).collect();
        let out = bucketed(order, |i| i, 2, 0, 0);
        assert_eq!(out.len(), 200);
        for b in batches(&out, 2) {
            assert_eq!(b[1] - b[0], 2, "{b:?}");
            assert_eq!(b[0] % 4, b[0] % 2, "{b:?} starts a pair of its pool");
        }
    }
}
