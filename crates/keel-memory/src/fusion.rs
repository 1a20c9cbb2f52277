//! Reciprocal rank fusion: several rankings of the same items become one. An item's fused
//! score is the sum, over the rankings that hold it, of `weight / (k + rank)` (ranks from 1),
//! so what several rankings put near the top wins, and no ranking's raw scores (BM25, cosine,
//! recency) need to be comparable with another's.

use std::collections::HashMap;
use std::hash::Hash;

/// The usual `k`: it damps the difference between the first few ranks.
pub const RRF_K: f64 = 60.0;

/// One ranking to fuse: items best first, and how much it counts.
#[derive(Clone, Debug)]
pub struct Ranking<T> {
    /// How much this ranking counts (1.0 for a full vote).
    pub weight: f64,
    /// Its items, best first; an item repeated counts at its first place only.
    pub items: Vec<T>,
}

/// Fuses `rankings` with constant `k`: every item of any ranking once, with its fused score,
/// best first; ties go to the smaller item, so the order never depends on hashing.
pub fn fuse<T: Clone + Eq + Hash + Ord>(rankings: &[Ranking<T>], k: f64) -> Vec<(T, f64)> {
    let mut scores: HashMap<&T, f64> = HashMap::new();
    for ranking in rankings {
        let mut seen: std::collections::HashSet<&T> = std::collections::HashSet::new();
        for (index, item) in ranking.items.iter().enumerate() {
            if seen.insert(item) {
                *scores.entry(item).or_default() += ranking.weight / (k + index as f64 + 1.0);
            }
        }
    }
    let mut fused: Vec<(T, f64)> = scores
        .into_iter()
        .map(|(item, score)| (item.clone(), score))
        .collect();
    fused.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    fused
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ranking(weight: f64, items: &[u8]) -> Ranking<u8> {
        Ranking {
            weight,
            items: items.to_vec(),
        }
    }

    #[test]
    fn agreement_beats_a_single_first_place() {
        let fused = fuse(&[ranking(1.0, &[1, 2, 3]), ranking(1.0, &[4, 2, 3])], RRF_K);
        assert_eq!(fused[0].0, 2);
        assert!((fused[0].1 - 2.0 / 62.0).abs() < 1e-12);
    }

    fn rankings() -> impl Strategy<Value = Vec<Ranking<u8>>> {
        prop::collection::vec(
            (0.1f64..2.0, prop::collection::vec(0u8..30, 0..20))
                .prop_map(|(weight, items)| Ranking { weight, items }),
            0..5,
        )
    }

    proptest! {
        #[test]
        fn every_item_once_with_the_sum_of_its_votes(rankings in rankings()) {
            let fused = fuse(&rankings, RRF_K);
            let mut all: Vec<u8> = rankings.iter().flat_map(|r| r.items.clone()).collect();
            all.sort();
            all.dedup();
            let mut got: Vec<u8> = fused.iter().map(|(item, _)| *item).collect();
            got.sort();
            prop_assert_eq!(got, all);
            for (item, score) in &fused {
                let expected: f64 = rankings
                    .iter()
                    .filter_map(|r| r.items.iter().position(|i| i == item)
                        .map(|p| r.weight / (RRF_K + p as f64 + 1.0)))
                    .sum();
                prop_assert!((score - expected).abs() < 1e-9);
            }
            prop_assert!(fused.windows(2).all(|w| w[0].1 >= w[1].1));
        }

        #[test]
        fn the_order_of_the_rankings_does_not_matter(rankings in rankings()) {
            let mut reversed = rankings.clone();
            reversed.reverse();
            let a: Vec<u8> = fuse(&rankings, RRF_K).into_iter().map(|(i, _)| i).collect();
            let b: Vec<u8> = fuse(&reversed, RRF_K).into_iter().map(|(i, _)| i).collect();
            prop_assert_eq!(a, b);
        }

        #[test]
        fn first_everywhere_is_first(rankings in rankings(), top in 30u8..40) {
            let with_top: Vec<Ranking<u8>> = rankings
                .into_iter()
                .map(|mut r| { r.items.insert(0, top); r })
                .collect();
            let fused = fuse(&with_top, RRF_K);
            if !with_top.is_empty() {
                prop_assert_eq!(fused[0].0, top);
            }
        }

        #[test]
        fn another_ranking_never_lowers_a_score(
            rankings in rankings(),
            extra in prop::collection::vec(0u8..30, 0..20),
        ) {
            let before: HashMap<u8, f64> = fuse(&rankings, RRF_K).into_iter().collect();
            let mut more = rankings.clone();
            more.push(ranking(1.0, &extra));
            let after: HashMap<u8, f64> = fuse(&more, RRF_K).into_iter().collect();
            for (item, score) in before {
                prop_assert!(after[&item] >= score);
            }
        }
    }
}
