//! Small statistics shared by the picker and the weight book.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// The median (mean of the middle two for an even count). Sorts `values`.
pub fn median(values: &mut Vec<f64>) -> Option<f64> {
    sort(values);
    let n = values.len();
    let upper = *values.get(n / 2)?;
    if n % 2 == 1 {
        return Some(upper);
    }
    Some((values[n / 2 - 1] + upper) / 2.0)
}

/// The lower median: the smaller middle value for an even count (the middle one for an odd count).
/// Sorts `values`.
pub fn lower_median(values: &mut Vec<f64>) -> Option<f64> {
    sort(values);
    values.get(values.len().checked_sub(1)? / 2).copied()
}

/// Sort `values` in `f64::total_cmp` order by a heap (`BinaryHeap::into_sorted_vec`; the vector's
/// buffer is the heap's, nothing is allocated): O(n log n) against selection's O(n) for the few
/// values a median here is taken of, and a heap's sift is a fraction of the code of
/// `select_nth_unstable` (the filter's module carries ~3 KB less).
fn sort(values: &mut Vec<f64>) {
    let heap: BinaryHeap<TotalOrder> = std::mem::take(values).into_iter().map(TotalOrder).collect();
    *values = heap.into_sorted_vec().into_iter().map(|v| v.0).collect();
}

/// An f64 ordered by `f64::total_cmp`.
struct TotalOrder(f64);

impl Ord for TotalOrder {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.total_cmp(&other.0)
    }
}

impl PartialOrd for TotalOrder {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for TotalOrder {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for TotalOrder {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_even_and_empty() {
        assert_eq!(median(&mut vec![3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&mut vec![4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&mut vec![7.0]), Some(7.0));
        assert_eq!(median(&mut vec![]), None);
        assert_eq!(lower_median(&mut vec![4.0, 1.0, 2.0, 3.0]), Some(2.0));
        assert_eq!(lower_median(&mut vec![3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(lower_median(&mut vec![0.0, 1.0]), Some(0.0));
        assert_eq!(lower_median(&mut vec![]), None);
    }

    #[test]
    fn median_matches_sorting() {
        let mut rng = crate::rng::Rng::new(4);
        for n in 1..40 {
            let mut v: Vec<f64> = (0..n).map(|_| rng.below(20) as f64).collect();
            let mut sorted = v.clone();
            sorted.sort_by(|a, b| a.total_cmp(b));
            let expected = if n % 2 == 1 { sorted[n / 2] } else { (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0 };
            assert_eq!(median(&mut v), Some(expected), "n={n}");
            assert_eq!(v, sorted, "sorted in place");
        }
    }
}
