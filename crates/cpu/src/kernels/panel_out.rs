//! Where a batched product writes its results: [`PanelOut`], one call's
//! view of an output buffer: weight-row-major, token-major, or one band of
//! rows of a token-major buffer whose bands parallel tasks write at once
//! ([`PanelOut::token_major_bands`]: the products of a group then go
//! straight into the layer's activations, with no scratch copy to gather
//! afterwards).
//!
//! One of the two places outside the SIMD modules that allow `unsafe`
//! (with `arena.rs`): safe Rust cannot hand several threads `&mut` access
//! to interleaved parts of one slice (a token-major band is a strided set
//! of runs), so the views write through a raw pointer, each write
//! bounds-checked and confined to the view's rows.
#![allow(unsafe_code)]

use std::marker::PhantomData;
use std::ops::Range;

/// The output of a batched product of `rows` weight rows and `toks`
/// tokens: element (token `t`, row `r`) at `base + t * tok_step + r *
/// row_step` of the buffer. Weight-row-major (`out[r * toks + t]`, as
/// [`super::Kernels::matmul`]) or token-major (`out[t * stride + r]`).
///
/// It holds a raw pointer rather than a slice so that several of them, on
/// several threads, can write disjoint row bands of one token-major buffer
/// ([`Self::token_major_bands`]). Every write is checked against the
/// view's own rows and tokens and against the buffer's length, and no two
/// live views share a row: each is made from a `&mut` slice, as a band of
/// a `&mut` view, or as one of the disjoint bands of a `&mut` slice.
pub(crate) struct PanelOut<'a> {
    ptr: *mut f32,
    len: usize,
    base: usize,
    tok_step: usize,
    row_step: usize,
    rows: usize,
    toks: usize,
    _out: PhantomData<&'a mut [f32]>,
}

impl<'a> PanelOut<'a> {
    /// `out[r * toks + t]` for `rows` rows and `toks` tokens.
    pub(crate) fn row_major(out: &'a mut [f32], rows: usize, toks: usize) -> Self {
        Self::strided(out, toks.max(1), 1, rows, toks)
    }

    /// `out[t * rows + r]` for `rows` rows and `toks` tokens.
    pub(crate) fn token_major(out: &'a mut [f32], rows: usize, toks: usize) -> Self {
        Self::strided(out, 1, rows.max(1), rows, toks)
    }

    /// `out[t * rows + r]` for `rows` rows and `toks` tokens, as disjoint
    /// bands of `per` rows (the last may be shorter), each with the rows
    /// it covers; band row `i` is row `start + i` of the whole.
    pub(crate) fn token_major_bands(
        out: &'a mut [f32],
        rows: usize,
        toks: usize,
        per: usize,
    ) -> impl Iterator<Item = (Range<usize>, PanelOut<'a>)> {
        let whole = Self::token_major(out, rows, toks);
        (0..rows).step_by(per.max(1)).map(move |r0| {
            let r = r0..(r0 + per.max(1)).min(rows);
            let band = PanelOut {
                base: r0,
                rows: r.len(),
                _out: PhantomData,
                ..whole
            };
            (r, band)
        })
    }

    fn strided(
        out: &'a mut [f32],
        row_step: usize,
        tok_step: usize,
        rows: usize,
        toks: usize,
    ) -> Self {
        PanelOut {
            ptr: out.as_mut_ptr(),
            len: out.len(),
            base: 0,
            tok_step,
            row_step,
            rows,
            toks,
            _out: PhantomData,
        }
    }

    /// Rows `r0..r0 + n` of this output (clamped to its rows), as an
    /// output of their own: row `i` of the band is row `r0 + i` here.
    pub(crate) fn band(&mut self, r0: usize, n: usize) -> PanelOut<'_> {
        let r0 = r0.min(self.rows);
        PanelOut {
            base: self.base + r0 * self.row_step,
            rows: n.min(self.rows - r0),
            _out: PhantomData,
            ..*self
        }
    }

    /// True if `n_rows` rows of `n_tok` tokens fit this output.
    pub(crate) fn fits(&self, n_rows: usize, n_tok: usize) -> bool {
        if n_rows == 0 || n_tok == 0 {
            return n_rows <= self.rows && n_tok <= self.toks;
        }
        n_rows <= self.rows
            && n_tok <= self.toks
            && self.at(n_tok - 1, n_rows - 1).is_some_and(|i| i < self.len)
    }

    fn at(&self, t: usize, r: usize) -> Option<usize> {
        let tt = t.checked_mul(self.tok_step)?;
        let rr = r.checked_mul(self.row_step)?;
        self.base.checked_add(tt)?.checked_add(rr)
    }

    /// Writes `v[i]` to (token `t`, row `r + i`).
    ///
    /// # Panics
    /// If those rows or the token lie outside this output (a kernel bug:
    /// kernels check [`Self::fits`] first).
    #[inline]
    pub(crate) fn put(&mut self, t: usize, r: usize, v: &[f32]) {
        let end = r.checked_add(v.len());
        assert!(
            t < self.toks && end.is_some_and(|e| e <= self.rows),
            "token {t}, rows {r}+{} outside a {}x{} output",
            v.len(),
            self.toks,
            self.rows
        );
        let Some(last) = v.len().checked_sub(1) else {
            return;
        };
        let (first, final_) = (self.at(t, r), self.at(t, r + last));
        assert!(final_.is_some_and(|i| i < self.len), "output too short");
        let first = first.unwrap_or(usize::MAX);
        if self.row_step == 1 {
            // SAFETY: `first..first + v.len()` is inside the buffer (checked
            // above); the rows are this view's, and no other live view
            // writes them (see the type's documentation).
            unsafe { std::ptr::copy_nonoverlapping(v.as_ptr(), self.ptr.add(first), v.len()) };
        } else {
            for (i, x) in v.iter().enumerate() {
                // SAFETY: as above; every index is below the last one,
                // which is inside the buffer.
                unsafe { *self.ptr.add(first + i * self.row_step) = *x };
            }
        }
    }
}

// SAFETY: a view writes only its own rows, which no other live view
// shares (see the type's documentation), like a `&mut [f32]`.
unsafe impl Send for PanelOut<'_> {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_and_bands_index_as_documented() {
        let mut buf = vec![0.0f32; 12];
        let mut o = PanelOut::row_major(&mut buf, 3, 4);
        o.put(1, 0, &[1.0, 2.0]);
        let mut b = o.band(2, 5);
        assert!(b.fits(1, 4) && !b.fits(2, 1));
        b.put(3, 0, &[7.0]);
        assert_eq!(buf, [0., 1., 0., 0., 0., 2., 0., 0., 0., 0., 0., 7.]);

        let mut buf = vec![0.0f32; 12];
        let mut bands: Vec<_> = PanelOut::token_major_bands(&mut buf, 4, 3, 3).collect();
        assert_eq!(
            bands.iter().map(|(r, _)| r.clone()).collect::<Vec<_>>(),
            [0..3, 3..4]
        );
        bands[0].1.put(2, 1, &[1.0, 2.0]);
        bands[1].1.put(0, 0, &[3.0]);
        assert!(!bands[1].1.fits(2, 1) && bands[0].1.fits(3, 3) && !bands[0].1.fits(3, 4));
        drop(bands);
        assert_eq!(buf, [0., 0., 0., 3., 0., 0., 0., 0., 0., 1., 2., 0.]);
    }

    #[test]
    #[should_panic(expected = "outside")]
    fn a_band_cannot_write_its_neighbours_rows() {
        let mut buf = vec![0.0f32; 8];
        let mut bands = PanelOut::token_major_bands(&mut buf, 4, 2, 2);
        if let Some((_, mut a)) = bands.next() {
            a.put(0, 1, &[1.0, 2.0]);
        }
    }

    #[test]
    fn a_short_buffer_does_not_fit() {
        let mut buf = vec![0.0f32; 7];
        let o = PanelOut::token_major(&mut buf, 4, 2);
        assert!(!o.fits(4, 2) && o.fits(3, 2) && o.fits(4, 1));
    }
}
