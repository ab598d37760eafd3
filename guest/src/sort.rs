//! One small stable sort for the module. The standard library's sorts are instantiated per comparator
//! (each a quicksort, a heapsort and small-sort kernels): 106 KB of the component's code, 50 KB less
//! with this one at the module's own call sites (the rest is in dependencies). This one is instantiated
//! per element type only, and the comparator is called through a reference.

use std::cmp::Ordering;

/// Sorts `v` by `cmp`, stably (equal elements keep their order), in O(n log n).
pub fn sort_by<T>(v: &mut Vec<T>, mut cmp: impl FnMut(&T, &T) -> Ordering) {
    if v.len() > 1 {
        *v = merge_sort(std::mem::take(v), &mut cmp);
    }
}

/// [`sort_by`] by `Ord`.
pub fn sort<T: Ord>(v: &mut Vec<T>) {
    sort_by(v, T::cmp)
}

#[inline(never)]
fn merge_sort<T>(mut v: Vec<T>, cmp: &mut dyn FnMut(&T, &T) -> Ordering) -> Vec<T> {
    if v.len() <= 12 {
        for i in 1..v.len() {
            let mut j = i;
            while j > 0 && cmp(&v[j - 1], &v[j]) == Ordering::Greater {
                v.swap(j - 1, j);
                j -= 1;
            }
        }
        return v;
    }
    let right = v.split_off(v.len() / 2);
    let left = merge_sort(v, cmp);
    let right = merge_sort(right, cmp);
    let mut out = Vec::with_capacity(left.len() + right.len());
    let mut l = left.into_iter().peekable();
    let mut r = right.into_iter().peekable();
    loop {
        let take_right = match (l.peek(), r.peek()) {
            (Some(a), Some(b)) => cmp(b, a) == Ordering::Less,
            (Some(_), None) => {
                out.extend(l);
                break;
            }
            (None, _) => {
                out.extend(r);
                break;
            }
        };
        out.push(if take_right { r.next() } else { l.next() }.expect("peeked"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sorts_stably_like_the_standard_sort() {
        // A small deterministic generator: every length up to 100, many ties.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for len in 0..100 {
            let mut v: Vec<(u8, usize)> = (0..len)
                .map(|i| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    ((x % 7) as u8, i)
                })
                .collect();
            let mut want = v.clone();
            want.sort_by(|a, b| a.0.cmp(&b.0));
            sort_by(&mut v, |a, b| a.0.cmp(&b.0));
            assert_eq!(v, want, "length {len}");
        }
    }
}
