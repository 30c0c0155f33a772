//! Small statistics shared by the picker and the weight book.

/// The median (mean of the middle two for an even count), by selection: O(n), reorders `values`.
pub fn median(values: &mut [f64]) -> Option<f64> {
    let n = values.len();
    if n == 0 {
        return None;
    }
    let mid = n / 2;
    let (below, upper, _) = values.select_nth_unstable_by(mid, |a, b| a.total_cmp(b));
    let upper = *upper;
    if n % 2 == 1 {
        return Some(upper);
    }
    // The largest of the lower half is the other middle value.
    let lower = below.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    Some((lower + upper) / 2.0)
}

/// The lower median: the smaller middle value for an even count (the middle one for an odd count),
/// by selection: O(n), reorders `values`.
pub fn lower_median(values: &mut [f64]) -> Option<f64> {
    let n = values.len();
    if n == 0 {
        return None;
    }
    let (_, middle, _) = values.select_nth_unstable_by((n - 1) / 2, |a, b| a.total_cmp(b));
    Some(*middle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_even_and_empty() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&mut [7.0]), Some(7.0));
        assert_eq!(median(&mut []), None);
        assert_eq!(lower_median(&mut [4.0, 1.0, 2.0, 3.0]), Some(2.0));
        assert_eq!(lower_median(&mut [3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(lower_median(&mut [0.0, 1.0]), Some(0.0));
        assert_eq!(lower_median(&mut []), None);
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
        }
    }
}
