//! How well a student's sentence embeddings keep the teacher's geometry on held-out text: the
//! Spearman rank correlation between the student's and the teacher's cosine similarities over
//! seeded random sentence pairs (the figure distilled encoders report against their teacher,
//! e.g. Reimers & Gurevych 2020, arXiv:2004.09813). Host-side arrays in `ndarray`.
use ndarray::{Array1, Array2, ArrayView1, Axis};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tch::{Kind, Tensor};

/// Spearman's rho between the cosine similarities that `student` and `teacher` embeddings
/// ([N, E] and [N, E'], any device and float kind) give the same `pairs` random pairs of
/// distinct rows (drawn with `seed`; at most all N (N - 1) / 2 pairs' worth of draws, with
/// repeats possible). `None` where rho is undefined: fewer than 2 rows, or pair cosines without
/// spread on either side (a single pair, a constant teacher).
pub fn spearman_of_cosines(student: &Tensor, teacher: &Tensor, pairs: usize, seed: u64) -> Option<f64> {
    let n = student.size()[0] as usize;
    if n < 2 || pairs == 0 {
        return None;
    }
    let (s, t) = (unit_rows(student), unit_rows(teacher));
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let pairs = pairs.min(n * (n - 1) / 2);
    let (mut cs, mut ct) = (Vec::with_capacity(pairs), Vec::with_capacity(pairs));
    for _ in 0..pairs {
        let i = rng.random_range(0..n);
        let j = (i + rng.random_range(1..n)) % n;
        cs.push(s.row(i).dot(&s.row(j)));
        ct.push(t.row(i).dot(&t.row(j)));
    }
    spearman(Array1::from(cs).view(), Array1::from(ct).view())
}

/// Rows of `x` [N, E] scaled to unit length (a zero row stays zero), as fp64 on the host.
fn unit_rows(x: &Tensor) -> Array2<f64> {
    let x = x.to_device(tch::Device::Cpu).to_kind(Kind::Double).contiguous();
    let (n, e) = (x.size()[0] as usize, x.size()[1] as usize);
    let flat = Vec::<f64>::try_from(x.reshape([-1])).expect("a float tensor");
    let mut a = Array2::from_shape_vec((n, e), flat).expect("n * e values");
    for mut row in a.axis_iter_mut(Axis(0)) {
        let norm = row.dot(&row).sqrt();
        if norm > 0.0 {
            row /= norm;
        }
    }
    a
}

/// Spearman's rank correlation of `a` and `b` (equal lengths): Pearson's correlation of their
/// ranks, ties given their average rank. `None` when either has no spread (all values tied, or
/// fewer than 2): rho is then undefined, and 0 would read as "unrelated".
pub fn spearman(a: ArrayView1<f64>, b: ArrayView1<f64>) -> Option<f64> {
    pearson(ranks(a).view(), ranks(b).view())
}

/// 1-based ranks of `x`, ties averaged.
fn ranks(x: ArrayView1<f64>) -> Array1<f64> {
    let mut order: Vec<usize> = (0..x.len()).collect();
    order.sort_by(|&i, &j| x[i].total_cmp(&x[j]));
    let mut r = Array1::zeros(x.len());
    let mut start = 0;
    while start < order.len() {
        let mut end = start + 1;
        while end < order.len() && x[order[end]] == x[order[start]] {
            end += 1;
        }
        let rank = (start + end + 1) as f64 / 2.0; // mean of ranks start+1 ..= end
        for &i in &order[start..end] {
            r[i] = rank;
        }
        start = end;
    }
    r
}

fn pearson(a: ArrayView1<f64>, b: ArrayView1<f64>) -> Option<f64> {
    let (da, db) = (&a - a.mean().unwrap_or(0.0), &b - b.mean().unwrap_or(0.0));
    let denom = (da.dot(&da) * db.dot(&db)).sqrt();
    (denom > 0.0).then(|| da.dot(&db) / denom)
}

#[cfg(test)]
mod tests {
    use ndarray::array;

    use super::*;

    #[test]
    fn spearman_matches_hand_values() {
        // monotone: 1; reversed: -1
        assert!(
            (spearman(array![1.0, 2.0, 3.0, 4.0].view(), array![10.0, 20.0, 25.0, 100.0].view()).unwrap() - 1.0).abs()
                < 1e-12
        );
        assert!((spearman(array![1.0, 2.0, 3.0].view(), array![3.0, 2.0, 1.0].view()).unwrap() + 1.0).abs() < 1e-12);
        // ranks a = [1, 2, 3, 4, 5], b = [2, 1, 4, 3, 5]: d^2 sum 4, rho = 1 - 6*4/(5*24) = 0.8
        let rho =
            spearman(array![1.0, 2.0, 3.0, 4.0, 5.0].view(), array![20.0, 10.0, 40.0, 30.0, 50.0].view()).unwrap();
        assert!((rho - 0.8).abs() < 1e-12, "{rho}");
        // ties share their mean rank: [1, 1, 2] -> ranks [1.5, 1.5, 3]
        assert_eq!(ranks(array![5.0, 5.0, 7.0].view()), array![1.5, 1.5, 3.0]);
        // no spread on one side (one value, or all tied): undefined, not 0
        assert_eq!(spearman(array![0.3].view(), array![0.9].view()), None);
        assert_eq!(spearman(array![1.0, 2.0, 3.0].view(), array![4.0, 4.0, 4.0].view()), None);
    }

    #[test]
    fn a_rotated_copy_keeps_every_cosine() {
        let _rng = crate::torch::test_rng::lock();
        tch::manual_seed(0);
        // a 2-D rotation (and a scale) changes the vectors but no cosine between them: rho = 1
        let s = Tensor::randn([50, 2], (Kind::Float, tch::Device::Cpu));
        let rot = Tensor::from_slice(&[0.6f32, -0.8, 0.8, 0.6]).reshape([2, 2]);
        let t = s.matmul(&rot) * 3.0;
        let rho = spearman_of_cosines(&s, &t, 500, 0).unwrap();
        assert!((rho - 1.0).abs() < 1e-9, "{rho}");
        // unrelated embeddings: near 0
        let other = Tensor::randn([50, 2], (Kind::Float, tch::Device::Cpu));
        assert!(spearman_of_cosines(&s, &other, 1000, 0).unwrap().abs() < 0.2);
        assert_eq!(spearman_of_cosines(&s.narrow(0, 0, 1), &t.narrow(0, 0, 1), 10, 0), None);
        // two rows make one pair: no ranking to correlate
        assert_eq!(spearman_of_cosines(&s.narrow(0, 0, 2), &t.narrow(0, 0, 2), 10, 0), None);
        // a teacher that embeds every sentence alike
        assert_eq!(spearman_of_cosines(&s, &Tensor::ones([50, 2], (Kind::Float, tch::Device::Cpu)), 100, 0), None);
    }
}
