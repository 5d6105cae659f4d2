//! Numerical methods as static dataflow: Krylov solvers with a fixed
//! iteration count and a factored FFT. Each builds graph ops whose count
//! depends on the iteration count (solvers) or not at all (FFT), never on
//! the problem dimension, so the program does not grow with it.
//!
//! fp16 shapes the formulations: dot products are matmuls (wide
//! accumulation, precision rule PREC-NARROW-REDUCE-SUM), the right-hand side
//! is scaled so the residual norms stay in fp16's normal range for as long
//! as they matter, and every division has a tiny guard so an exactly
//! converged residual gives 0, not 0/0.

use std::f64::consts::PI;

use crate::error::{shape_err, Result};
use crate::graph::Tensor;

/// Added to every denominator: the smallest fp16 subnormal, 2^-24.
const GUARD: f32 = 5.960_464_5e-8;

/// `‖b‖` after scaling: large enough that residual norms stay normal in fp16
/// (≥ 2^-14) down to a relative residual of about 1e-4.
const RHS_NORM: f32 = 8.0;

/// Bound on BiCGSTAB's α/ω once the residual has vanished.
const STEP_LIMIT: f32 = 1e3;

fn clamp(x: &Tensor, limit: f32) -> Result<Tensor> {
    let g = x.graph();
    x.minimum(&g.scalar(limit)?)?.maximum(&g.scalar(-limit)?)
}

fn dot(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    a.matmul_t(b, true, false)
}

fn ratio(num: &Tensor, den: &Tensor) -> Result<Tensor> {
    num.div(&den.add_scalar(GUARD)?)
}

fn check_system(op: &'static str, a: &Tensor, b: &Tensor) -> Result<usize> {
    let (s, bs) = (a.shape(), b.shape());
    if s.len() != 2 || s[0] != s[1] || bs != [s[0], 1] {
        return Err(shape_err(
            op,
            format!("A must be [n, n] and b [n, 1], got {s:?} and {bs:?}"),
        ));
    }
    Ok(s[0])
}

/// Scales `b` to norm [`RHS_NORM`]: returns the scaled b and the factor c
/// (`[1, 1]`), so the solution is `x_scaled / c`.
fn scale_rhs(b: &Tensor) -> Result<(Tensor, Tensor)> {
    // first by max|b| so b·b cannot saturate, then to the target norm
    let m = b.abs()?.max(&[0, 1], true)?.add_scalar(GUARD)?;
    let b1 = b.div(&m)?;
    let c1 = dot(&b1, &b1)?
        .add_scalar(GUARD)?
        .rsqrt()?
        .mul_scalar(RHS_NORM)?;
    let c = c1.div(&m)?;
    Ok((b1.mul(&c1)?, c))
}

/// Conjugate gradients for symmetric positive definite `a` (`[n, n]`), `b`
/// `[n, 1]`, `iterations` steps from x = 0.
pub fn conjugate_gradient(a: &Tensor, b: &Tensor, iterations: usize) -> Result<Tensor> {
    check_system("cg", a, b)?;
    let (bn, c) = scale_rhs(b)?;
    let mut x = bn.mul_scalar(0.0)?;
    let mut r = bn.clone();
    let mut p = bn;
    let mut rs = dot(&r, &r)?;
    for _ in 0..iterations {
        let ap = a.matmul(&p)?;
        let alpha = ratio(&rs, &dot(&p, &ap)?)?;
        x = x.add(&p.mul(&alpha)?)?;
        r = r.sub(&ap.mul(&alpha)?)?;
        let rs2 = dot(&r, &r)?;
        let beta = ratio(&rs2, &rs)?;
        p = r.add(&p.mul(&beta)?)?;
        rs = rs2;
    }
    x.div(&c)
}

/// BiCGSTAB for a general nonsingular `a` (`[n, n]`), `b` `[n, 1]`,
/// `iterations` steps from x = 0.
pub fn bicgstab(a: &Tensor, b: &Tensor, iterations: usize) -> Result<Tensor> {
    check_system("bicgstab", a, b)?;
    let (bn, c) = scale_rhs(b)?;
    let g = a.graph();
    let mut x = bn.mul_scalar(0.0)?;
    let mut r = bn.clone();
    let r_hat = bn;
    let mut rho = g.scalar(1.0)?;
    let mut alpha = g.scalar(1.0)?;
    let mut omega = g.scalar(1.0)?;
    let mut v = x.clone();
    let mut p = x.clone();
    for _ in 0..iterations {
        let rho2 = dot(&r_hat, &r)?;
        // after convergence ω → 0: α/ω is clamped so the dead iterations
        // stay finite (0·∞ would be NaN)
        let beta = ratio(&rho2, &rho)?.mul(&clamp(&ratio(&alpha, &omega)?, STEP_LIMIT)?)?;
        p = r.add(&p.sub(&v.mul(&omega)?)?.mul(&beta)?)?;
        v = a.matmul(&p)?;
        alpha = ratio(&rho2, &dot(&r_hat, &v)?)?;
        let h = x.add(&p.mul(&alpha)?)?;
        let s = r.sub(&v.mul(&alpha)?)?;
        let t = a.matmul(&s)?;
        omega = ratio(&dot(&t, &s)?, &dot(&t, &t)?)?;
        x = h.add(&s.mul(&omega)?)?;
        r = s.sub(&t.mul(&omega)?)?;
        rho = rho2;
    }
    x.div(&c)
}

/// The largest divisor of `n` that is at most √n.
fn split(n: usize) -> usize {
    (1..=n)
        .take_while(|d| d * d <= n)
        .filter(|d| n.is_multiple_of(*d))
        .last()
        .unwrap_or(1)
}

/// `exp(−2πi·jk/n)` for `j < rows`, `k < cols`, as (re, im).
fn twiddles(rows: usize, cols: usize, n: usize) -> (Vec<f32>, Vec<f32>) {
    let angle = |j: usize, k: usize| -2.0 * PI * ((j * k) % n) as f64 / n as f64;
    let re = (0..rows * cols)
        .map(|i| angle(i / cols, i % cols).cos() as f32)
        .collect();
    let im = (0..rows * cols)
        .map(|i| angle(i / cols, i % cols).sin() as f32)
        .collect();
    (re, im)
}

/// Complex product `(ar + i·ai)(br + i·bi)` where `f(x, y)` is the product
/// (matmul or element-wise).
fn cmul(
    ar: &Tensor,
    ai: &Tensor,
    br: &Tensor,
    bi: &Tensor,
    f: impl Fn(&Tensor, &Tensor) -> Result<Tensor>,
) -> Result<(Tensor, Tensor)> {
    let re = f(ar, br)?.sub(&f(ai, bi)?)?;
    let im = f(ar, bi)?.add(&f(ai, br)?)?;
    Ok((re, im))
}

/// The DFT along the last axis of `(re, im)`, factored as n = n1·n2
/// (Cooley–Tukey four-step: n1-point DFTs, twiddles, n2-point DFTs), so its
/// op count is the same for every n and its constants are O(n).
pub fn fft(re: &Tensor, im: &Tensor) -> Result<(Tensor, Tensor)> {
    let s = re.shape();
    if s.is_empty() || im.shape() != s {
        return Err(shape_err(
            "fft",
            format!("re {s:?} and im {:?} must match", im.shape()),
        ));
    }
    let g = re.graph();
    let n = s[s.len() - 1];
    let (n1, n2) = (split(n), n / split(n));
    let lead: Vec<isize> = s[..s.len() - 1].iter().map(|&d| d as isize).collect();
    let shaped = |dims: &[usize]| -> Vec<isize> {
        lead.iter()
            .copied()
            .chain(dims.iter().map(|&d| d as isize))
            .collect()
    };
    // x[j1·n2 + j2] as [.., n1, n2]
    let (xr, xi) = (
        re.reshape(&shaped(&[n1, n2]))?,
        im.reshape(&shaped(&[n1, n2]))?,
    );
    let (f1r, f1i) = twiddles(n1, n1, n1);
    let (f1r, f1i) = (g.constant(&[n1, n1], f1r)?, g.constant(&[n1, n1], f1i)?);
    let (yr, yi) = cmul(&f1r, &f1i, &xr, &xi, |a, b| a.matmul(b))?;
    let (tr, ti) = twiddles(n1, n2, n);
    let (tr, ti) = (g.constant(&[n1, n2], tr)?, g.constant(&[n1, n2], ti)?);
    let (yr, yi) = cmul(&yr, &yi, &tr, &ti, |a, b| a.mul(b))?;
    let (f2r, f2i) = twiddles(n2, n2, n2);
    let (f2r, f2i) = (g.constant(&[n2, n2], f2r)?, g.constant(&[n2, n2], f2i)?);
    let (zr, zi) = cmul(&yr, &yi, &f2r, &f2i, |a, b| a.matmul(b))?;
    // X[k1 + n1·k2] = Z[k1, k2]
    let out = shaped(&[n]);
    Ok((zr.t()?.reshape(&out)?, zi.t()?.reshape(&out)?))
}

/// The 2-D DFT over the last two axes.
pub fn fft2(re: &Tensor, im: &Tensor) -> Result<(Tensor, Tensor)> {
    if re.shape().len() < 2 {
        return Err(shape_err("fft2", "needs rank >= 2"));
    }
    let (r, i) = fft(re, im)?;
    let (r, i) = fft(&r.t()?, &i.t()?)?;
    Ok((r.t()?, i.t()?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{compile, CompileOptions, Graph};

    fn lcg(seed: &mut u64) -> f64 {
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (*seed >> 11) as f64 / (1u64 << 53) as f64
    }

    fn rel_err(got: &[f32], want: &[f64]) -> f64 {
        let num: f64 = got
            .iter()
            .zip(want)
            .map(|(&g, &w)| (f64::from(g) - w).powi(2))
            .sum();
        let den: f64 = want.iter().map(|w| w * w).sum();
        (num / den).sqrt()
    }

    #[test]
    fn fft_matches_the_dft_definition() -> Result<()> {
        for n in [8usize, 12, 64] {
            let g = Graph::new();
            let (re, im) = (g.input("re", &[2, n])?, g.input("im", &[2, n])?);
            let (yr, yi) = fft(&re, &im)?;
            let mut seed = n as u64;
            let xr: Vec<f64> = (0..2 * n).map(|_| 2.0 * lcg(&mut seed) - 1.0).collect();
            let xi: Vec<f64> = (0..2 * n).map(|_| 2.0 * lcg(&mut seed) - 1.0).collect();
            let fr: Vec<f32> = xr.iter().map(|&v| v as f32).collect();
            let fi: Vec<f32> = xi.iter().map(|&v| v as f32).collect();
            let out = compile(&[&yr, &yi], &CompileOptions::default())?
                .run(&[("re", &fr), ("im", &fi)])?;
            let (mut wr, mut wi) = (vec![0.0; 2 * n], vec![0.0; 2 * n]);
            for b in 0..2 {
                for k in 0..n {
                    for j in 0..n {
                        let a = -2.0 * PI * (j * k) as f64 / n as f64;
                        let (x, y) = (xr[b * n + j], xi[b * n + j]);
                        wr[b * n + k] += x * a.cos() - y * a.sin();
                        wi[b * n + k] += x * a.sin() + y * a.cos();
                    }
                }
            }
            assert!(
                rel_err(&out[0].values, &wr) < 5e-3,
                "n {n} re {}",
                rel_err(&out[0].values, &wr)
            );
            assert!(rel_err(&out[1].values, &wi) < 5e-3, "n {n} im");
        }
        Ok(())
    }

    #[test]
    fn cg_solves_an_spd_system_to_fp16_accuracy() -> Result<()> {
        let n = 48;
        // A = I + u·uᵀ/n-ish SPD with condition ~10: diag in [1, 10] rotated by a Householder reflector
        let mut seed = 7;
        let v: Vec<f64> = (0..n).map(|_| lcg(&mut seed) - 0.5).collect();
        let vn: f64 = v.iter().map(|x| x * x).sum();
        let d: Vec<f64> = (0..n)
            .map(|i| 1.0 + 9.0 * i as f64 / (n - 1) as f64)
            .collect();
        let h = |i: usize, j: usize| f64::from(u8::from(i == j)) - 2.0 * v[i] * v[j] / vn;
        let a: Vec<f64> = (0..n * n)
            .map(|ij| (0..n).map(|k| h(ij / n, k) * d[k] * h(k, ij % n)).sum())
            .collect();
        let x_true: Vec<f64> = (0..n).map(|_| lcg(&mut seed) - 0.5).collect();
        let b: Vec<f64> = (0..n)
            .map(|i| (0..n).map(|j| a[i * n + j] * x_true[j]).sum())
            .collect();
        let g = Graph::new();
        let at = g.input("a", &[n, n])?;
        let bt = g.input("b", &[n, 1])?;
        for (name, x) in [
            ("cg", conjugate_gradient(&at, &bt, 20)?),
            ("bicgstab", bicgstab(&at, &bt, 12)?),
        ] {
            let mut exe = compile(&[&x], &CompileOptions::default())?;
            let af: Vec<f32> = a.iter().map(|&v| v as f32).collect();
            let bf: Vec<f32> = b.iter().map(|&v| v as f32).collect();
            let out = exe.run(&[("a", &af), ("b", &bf)])?;
            let e = rel_err(&out[0].values, &x_true);
            assert!(e < 5e-3, "{name}: relative error {e}");
        }
        Ok(())
    }
}
