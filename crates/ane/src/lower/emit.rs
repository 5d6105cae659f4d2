//! MIL subgraphs shared by the kernels: 1×1-conv projections, the ANE-safe RMSNorm, gated FFNs.

use super::quantize::{self, WeightFormat};
use super::sensitivity::{BlockMask, ProjBlock};
use super::tensors::{Pack, WEIGHT_PATH};
use super::{LowerOptions, Result};
use anedvd_graph::Activation;
use anedvd_mil::builder::{FunctionBuilder, Var};
use anedvd_mil::ir::{BlobRef, DType, TensorType};

/// √(2/π), the GELU tanh-approximation constant.
const GELU_K: f64 = 0.797_884_560_802_865_4;
/// The cubic coefficient of the GELU tanh approximation.
const GELU_C: f64 = 0.044_715;
/// Added to the row maximum before taking its reciprocal, so all-zero
/// columns (decode fills one column of W) give zeros, not NaN.
const NORM_TINY: f64 = 1e-4;
/// Longest sum in one conv (PREC-WIDE-SUM-SPLIT): longer channel sums are
/// split into parts of at most this many terms.
const SUM_PART: usize = 4096;
/// Above this many terms each summand is scaled by [`WIDE_SUM_SCALE`]
/// (PREC-WIDE-SUM-SPLIT), keeping the sum below the matmul cliff.
const SUM_SCALE_ABOVE: usize = 1024;
/// 2^-4, exact in fp16.
const WIDE_SUM_SCALE: f32 = 0.0625;
/// Lloyd rounds per palette (k-means converges well before on weights).
pub(super) const LUT_ITERATIONS: usize = 12;

/// A function under construction together with its weight file.
pub struct Emitter {
    /// The function.
    pub b: FunctionBuilder,
    /// Its weight file.
    pub pack: Pack,
    /// Activation width W.
    pub width: usize,
    /// How the next projection's weights are stored.
    pub weight_format: WeightFormat,
    /// The format asked for, and the blocks kept fp16 ([`Emitter::block`]).
    base_format: (WeightFormat, BlockMask),
    /// The constant-weight sum kernels made so far, by (length, weight), so
    /// the norms of one program share them.
    sum_weights: Vec<((usize, u32), Var)>,
}

impl Emitter {
    /// An empty `main` function over activations of width `width`, its
    /// projections stored as `weight_format`.
    pub fn new(width: usize, weight_format: WeightFormat) -> Self {
        Emitter {
            b: FunctionBuilder::new("main"),
            pack: Pack::new(),
            width,
            weight_format,
            base_format: (weight_format, BlockMask::default()),
            sum_weights: Vec::new(),
        }
    }

    /// [`Emitter::new`] for `o`'s width and weights, its fp16 blocks kept.
    pub fn for_options(o: &LowerOptions) -> Self {
        let mut e = Emitter::new(o.width, o.weights);
        e.base_format.1 = o.fp16_blocks;
        e
    }

    /// The projections that follow are in the format asked for (no block).
    pub fn base(&mut self) {
        self.weight_format = self.base_format.0;
    }

    /// The projections that follow belong to block `b`: stored fp16 if
    /// the options keep it so, else in the format asked for.
    pub fn block(&mut self, b: ProjBlock) {
        let (format, mask) = self.base_format;
        self.weight_format = mask.format(b, format);
    }

    /// The `[1, C, 1, W]` fp16 input `x`.
    pub fn input(&mut self, channels: usize) -> Result<Var> {
        Ok(self
            .b
            .input("x", DType::Fp16, &[1, channels, 1, self.width])?)
    }

    /// An fp16 scalar const.
    fn scalar(&mut self, name: &str, v: f64) -> Result<Var> {
        Ok(self.b.fp16(name, v)?)
    }

    /// A `[1, C, 1, 1]` per-channel const from the weight file.
    pub fn channel_const(&mut self, name: &str, values: &[f32]) -> Result<Var> {
        let off = self.pack.vector(values);
        Ok(self.b.const_blob(
            name,
            DType::Fp16,
            &[1, values.len(), 1, 1],
            WEIGHT_PATH,
            off,
        )?)
    }

    /// `y = W·x (+ bias)` as a 1×1 conv; `w` is row-major `[out, in]`.
    pub fn projection(
        &mut self,
        name: &str,
        x: &Var,
        w: &[f32],
        out: usize,
        bias: Option<&[f32]>,
    ) -> Result<Var> {
        let cin = x.shape().get(1).copied().unwrap_or(0);
        let wv = self.weight(&format!("{name}_w"), w, out, cin)?;
        match bias {
            None => Ok(self.b.conv(name, x, &wv)?),
            Some(bv) => {
                let y = self.b.conv(&format!("{name}_nobias"), x, &wv)?;
                let c = self.channel_const(&format!("{name}_b"), bv)?;
                Ok(self.b.add(name, &y, &c)?)
            }
        }
    }

    /// The `[out, cin, 1, 1]` conv weight `w` (row-major `[out, cin]`) in
    /// the emitter's [`WeightFormat`]: a const, or a constexpr op that
    /// decompresses int8 or palettized weights.
    fn weight(&mut self, name: &str, w: &[f32], out: usize, cin: usize) -> Result<Var> {
        let shape = [out, cin, 1, 1];
        let blob = |dtype, shape: &[usize], offset| BlobRef {
            ty: TensorType::new(dtype, shape),
            path: WEIGHT_PATH.into(),
            offset,
        };
        match self.weight_format {
            WeightFormat::Fp16 => {
                let off = self.pack.matrix(w);
                Ok(self
                    .b
                    .const_blob(name, DType::Fp16, &shape, WEIGHT_PATH, off)?)
            }
            WeightFormat::Int8 => {
                let (q, scales) = quantize::int8_per_row(w, out, cin);
                let (qo, so) = self.pack.int8_matrix(&q, &scales);
                Ok(self.b.constexpr_affine_dequantize(
                    name,
                    blob(DType::Int8, &shape, qo),
                    blob(DType::Fp16, &[out], so),
                    0,
                )?)
            }
            WeightFormat::Lut { bits } => {
                let bad = || {
                    super::Error::Options(format!("no {bits}-bit palette of a {out}×{cin} weight"))
                };
                let p = quantize::palettize(w, out, cin, bits, LUT_ITERATIONS).ok_or_else(bad)?;
                let (io, po) = self
                    .pack
                    .lut_matrix(&p.indices, bits, &p.palettes)
                    .ok_or_else(bad)?;
                let dtype = match bits {
                    4 => DType::UInt4,
                    6 => DType::UInt6,
                    8 => DType::UInt8,
                    _ => return Err(bad()),
                };
                let lut_shape = [out / p.group, 1, 1, 1, 1 << bits, 1];
                Ok(self.b.constexpr_lut_to_dense(
                    name,
                    blob(dtype, &shape, io),
                    blob(DType::Fp16, &lut_shape, po),
                )?)
            }
        }
    }

    /// The mean over channels of `x` (`[1, C, 1, W]` → `[1, 1, 1, W]`),
    /// following the precision rules (`anedvd_mil::precision`): the sum is a
    /// 1×1 conv against a constant weight, never `reduce_sum`
    /// (PREC-NARROW-REDUCE-SUM); above [`SUM_PART`] channels it is split
    /// into slices whose sums are added, and above [`SUM_SCALE_ABOVE`] the
    /// weight is 2^-4 and the final factor 16/C (PREC-WIDE-SUM-SPLIT).
    pub fn channel_mean(&mut self, p: &str, x: &Var) -> Result<Var> {
        let c = x.shape().get(1).copied().unwrap_or(1);
        let w = if c > SUM_SCALE_ABOVE {
            WIDE_SUM_SCALE
        } else {
            1.0
        };
        let mut total: Option<Var> = None;
        for (i, start) in (0..c).step_by(SUM_PART).enumerate() {
            let len = SUM_PART.min(c - start);
            let part = if len == c {
                x.clone()
            } else {
                let name = format!("{p}_part{i}");
                self.b
                    .slice_by_size(&name, x, &[0, start, 0, 0], &[1, len, 1, self.width])?
            };
            let weight = self.sum_weight(len, w)?;
            let sum = self.b.conv(&format!("{p}_sum{i}"), &part, &weight)?;
            total = Some(match total {
                None => sum,
                Some(t) => self.b.add(&format!("{p}_sum_to{i}"), &t, &sum)?,
            });
        }
        let total = total.ok_or_else(|| super::Error::Tensor {
            tensor: p.to_string(),
            msg: "a mean over 0 channels".into(),
        })?;
        let inv = self.scalar(&format!("{p}_inv_c"), 1.0 / (c as f64 * f64::from(w)))?;
        Ok(self.b.mul(&format!("{p}_mean"), &total, &inv)?)
    }

    /// The `[1, len, 1, 1]` conv weight of constant `w`, shared within the program.
    fn sum_weight(&mut self, len: usize, w: f32) -> Result<Var> {
        let key = (len, w.to_bits());
        if let Some((_, v)) = self.sum_weights.iter().find(|(k, _)| *k == key) {
            return Ok(v.clone());
        }
        let off = self.pack.vector(&vec![w; len]);
        let name = format!("sum_w{len}_{}", self.sum_weights.len());
        let v = self
            .b
            .const_blob(&name, DType::Fp16, &[1, len, 1, 1], WEIGHT_PATH, off)?;
        self.sum_weights.push((key, v.clone()));
        Ok(v)
    }

    /// RMSNorm over channels, `x / sqrt(mean(x²) + eps) · g`, written so no
    /// fp16 intermediate overflows: x is first scaled by `r = 1/(m + tiny)`
    /// with `m = (max relu(x) + max relu(-x))/2 ∈ [max|x|/2, max|x|]` (two
    /// `reduce_max`), so every square is ≤ 4 and the channel sum stays well
    /// below the matmul cliff ([`Emitter::channel_mean`]); the identity
    /// `x·r / sqrt(mean((x·r)²) + eps·r²) = x / sqrt(mean(x²) + eps)` keeps
    /// the result exact. `pow(·, -0.5)` stands in for rsqrt (ane-spec.md §2.8 C).
    ///
    /// `scale` is s when `x` holds a scaled residual `x/s` (see
    /// [`super::LowerOptions::residual_scale`]): the result is the norm of
    /// the unscaled value, with eps entering as `eps·(r/s)²`.
    pub fn rms_norm(&mut self, p: &str, x: &Var, g: &[f32], eps: f32, scale: f32) -> Result<Var> {
        let b = &mut self.b;
        let pos = b.relu(&format!("{p}_pos"), x)?;
        let m1 = b.fp16(&format!("{p}_m1"), -1.0)?;
        let nx = b.mul(&format!("{p}_nx"), x, &m1)?;
        let neg = b.relu(&format!("{p}_neg"), &nx)?;
        let mp = b.reduce_max(&format!("{p}_maxp"), &pos, &[1], true)?;
        let mn = b.reduce_max(&format!("{p}_maxn"), &neg, &[1], true)?;
        // (max⁺ + max⁻)/2 lies in [max|x|/2, max|x|] and cannot overflow
        let half = b.fp16(&format!("{p}_half"), 0.5)?;
        let mph = b.mul(&format!("{p}_maxp_h"), &mp, &half)?;
        let mnh = b.mul(&format!("{p}_maxn_h"), &mn, &half)?;
        let m = b.add(&format!("{p}_amax"), &mph, &mnh)?;
        let tiny = b.fp16(&format!("{p}_tiny"), NORM_TINY)?;
        let mt = b.add(&format!("{p}_amax_t"), &m, &tiny)?;
        let m1b = b.fp16(&format!("{p}_inv_pow"), -1.0)?;
        let r = b.pow(&format!("{p}_r"), &mt, &m1b)?;
        let xs = b.mul(&format!("{p}_xs"), x, &r)?;
        let sq = b.mul(&format!("{p}_sq"), &xs, &xs)?;
        let ms = self.channel_mean(p, &sq)?;
        let b = &mut self.b;
        let epsv = b.fp16(&format!("{p}_eps"), f64::from(eps))?;
        let rs = if scale == 1.0 {
            r.clone()
        } else {
            let inv_s = b.fp16(&format!("{p}_inv_scale"), 1.0 / f64::from(scale))?;
            b.mul(&format!("{p}_rs"), &r, &inv_s)?
        };
        let er = b.mul(&format!("{p}_er"), &rs, &epsv)?;
        let err = b.mul(&format!("{p}_err"), &er, &rs)?;
        let a = b.add(&format!("{p}_msq_eps"), &ms, &err)?;
        let mh = b.fp16(&format!("{p}_neg_half"), -0.5)?;
        let inv = b.pow(&format!("{p}_inv_rms"), &a, &mh)?;
        let xn = b.mul(&format!("{p}_xn"), &xs, &inv)?;
        let gv = self.channel_const(&format!("{p}_g"), g)?;
        Ok(self.b.mul(p, &xn, &gv)?)
    }

    /// `down(act(gate·x) ⊙ (up·x))`; SiLU as `g·sigmoid(g)`, GELU as the tanh
    /// form `0.5·g·(1 + tanh(g·(k + k·c·g²)))` (no `gelu`/`silu` ops: §3).
    #[allow(clippy::too_many_arguments)]
    pub fn ffn(
        &mut self,
        p: &str,
        x: &Var,
        act: Activation,
        gate: &[f32],
        up: &[f32],
        down: &[f32],
        n_ff: usize,
        n_out: usize,
    ) -> Result<Var> {
        let g = self.projection(&format!("{p}_gate"), x, gate, n_ff, None)?;
        let u = self.projection(&format!("{p}_up"), x, up, n_ff, None)?;
        let a = self.activate(p, &g, act)?;
        let h = self.b.mul(&format!("{p}_act"), &a, &u)?;
        self.projection(&format!("{p}_down"), &h, down, n_out, None)
    }

    /// `act(g)` (see [`Emitter::ffn`] for the forms).
    pub fn activate(&mut self, p: &str, g: &Var, act: Activation) -> Result<Var> {
        let g = g.clone();
        Ok(match act {
            Activation::Silu => {
                let s = self.b.sigmoid(&format!("{p}_gate_sig"), &g)?;
                self.b.mul(&format!("{p}_gate_act"), &g, &s)?
            }
            Activation::GeluTanh => {
                let k = self.scalar(&format!("{p}_gelu_k"), GELU_K)?;
                let kc = self.scalar(&format!("{p}_gelu_kc"), GELU_K * GELU_C)?;
                let half = self.scalar(&format!("{p}_gelu_half"), 0.5)?;
                let one = self.scalar(&format!("{p}_gelu_one"), 1.0)?;
                let b = &mut self.b;
                let g2 = b.mul(&format!("{p}_gate_sq"), &g, &g)?;
                let t1 = b.mul(&format!("{p}_gelu_t1"), &g2, &kc)?;
                let t2 = b.add(&format!("{p}_gelu_t2"), &t1, &k)?;
                let inner = b.mul(&format!("{p}_gelu_in"), &g, &t2)?;
                let th = b.tanh(&format!("{p}_gelu_tanh"), &inner)?;
                let th1 = b.add(&format!("{p}_gelu_1p"), &th, &one)?;
                let hg = b.mul(&format!("{p}_gelu_hg"), &g, &half)?;
                b.mul(&format!("{p}_gate_act"), &hg, &th1)?
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use anedvd_mil::precision::{lint, PrecisionModel};
    use anedvd_mil::rules::RuleConfig;
    use anedvd_mil::sim::{Simulator, Tensor, Weights};

    /// `quantize::roundtrip` (what the sensitivity measurement compresses
    /// with) gives exactly the weights a compressed projection computes
    /// with: the projection of the identity returns its weight matrix (one
    /// non-zero product per output) through the simulator's decompression
    /// (itself equal to coremltools', crates/mil tests).
    #[test]
    fn roundtrip_is_what_the_program_computes_with() {
        let (rows, cols) = (48, 32);
        let w: Vec<f32> = (0..rows * cols)
            .map(|i| (((i * 7919) % 1009) as f32 / 1009.0 - 0.5) * (1.0 + (i % 13) as f32))
            .collect();
        for format in [
            WeightFormat::Int8,
            WeightFormat::Lut { bits: 8 },
            WeightFormat::Lut { bits: 6 },
            WeightFormat::Lut { bits: 4 },
        ] {
            let mut e = Emitter::new(cols, format);
            let x = e.input(cols).unwrap();
            let y = e.projection("y", &x, &w, rows, None).unwrap();
            e.b.output(&y);
            let program = anedvd_mil::builder::program(vec![e.b.finish()]);
            let mut weights = Weights::new();
            weights.insert(WEIGHT_PATH, e.pack.finish());
            let rules = RuleConfig {
                path: anedvd_mil::registry::RuntimePath::E5rt,
                ..RuleConfig::default()
            };
            let sim = Simulator::new(&program, &weights, &rules).unwrap();
            let mut eye = vec![0f32; cols * cols];
            (0..cols).for_each(|i| eye[i * cols + i] = 1.0);
            let input = Tensor::f16(&[1, cols, 1, cols], &eye).unwrap();
            let got = sim.run("main", &[("x", input)]).unwrap()[0].1.to_f32();
            // y[r, c] = W'[r, c]: the program's weights, row-major
            let want = quantize::roundtrip(format, &w, rows, cols, LUT_ITERATIONS).unwrap();
            assert_eq!(got, want, "{}", format.name());
        }
    }

    /// Squares-like data in [0, 4]: what RMS norm sums after its pre-scale.
    fn data(c: usize, w: usize) -> Vec<f32> {
        (0..c * w)
            .map(|i| {
                let v = ((i as u64).wrapping_mul(2_654_435_761) % 10_007) as f32 / 10_007.0;
                half::f16::from_f32(4.0 * v * v).to_f32()
            })
            .collect()
    }

    /// The largest relative error of `mean` (built by `emit`) over the
    /// columns of `x`, against the f64 mean, on the ANE-modelled simulator.
    fn mean_error(c: usize, emit: impl Fn(&mut Emitter, &Var) -> Var) -> (f64, Vec<String>) {
        let w = 32;
        let mut e = Emitter::new(w, WeightFormat::Fp16);
        let x = e.input(c).unwrap();
        let y = emit(&mut e, &x);
        e.b.output(&y);
        let program = anedvd_mil::builder::program(vec![e.b.finish()]);
        let mut weights = Weights::new();
        weights.insert(WEIGHT_PATH, e.pack.finish());
        let sim = Simulator::new(&program, &weights, &RuleConfig::default())
            .unwrap()
            .with_precision(PrecisionModel::ane());
        let xv = data(c, w);
        let input = Tensor::f16(&[1, c, 1, w], &xv).unwrap();
        let got = sim.run("main", &[("x", input)]).unwrap()[0].1.to_f32();
        let mut worst = 0f64;
        for (col, g) in got.iter().enumerate() {
            let want: f64 = (0..c).map(|ch| f64::from(xv[ch * w + col])).sum::<f64>() / c as f64;
            worst = worst.max((f64::from(*g) - want).abs() / want);
        }
        let codes = lint(&program)
            .into_iter()
            .map(|f| f.code.to_string())
            .collect();
        (worst, codes)
    }

    /// PREC-NARROW-REDUCE-SUM and PREC-WIDE-SUM-SPLIT: the conv-against-a-
    /// constant mean stays at fp16 rounding for every width (split above
    /// 4096), where reduce_sum's fp16 running sum drifts with C.
    #[test]
    fn channel_mean_follows_the_precision_rules() {
        for c in [64, 640, 1152, 2048, 5000, 9000] {
            let (ours, lints) = mean_error(c, |e, x| e.channel_mean("n", x).unwrap());
            assert!(lints.is_empty(), "{c}: {lints:?}");
            assert!(ours < 2e-3, "C {c}: conv mean off by {ours:.2e}");
            let (narrow, lints) = mean_error(c, |e, x| {
                let s = e.b.reduce_sum("ss", x, &[1], true).unwrap();
                let inv = e.scalar("inv", 1.0 / c as f64).unwrap();
                e.b.mul("m", &s, &inv).unwrap()
            });
            assert_eq!(lints, ["PREC-NARROW-REDUCE-SUM"]);
            println!("C {c}: conv mean {ours:.2e}, reduce_sum mean {narrow:.2e}");
            if c >= 640 {
                assert!(
                    narrow > 5.0 * ours,
                    "C {c}: reduce_sum {narrow:.2e} vs conv {ours:.2e}"
                );
            }
        }
        let mut e = Emitter::new(32, WeightFormat::Fp16);
        let x = e.input(9000).unwrap();
        e.channel_mean("n", &x).unwrap();
        let text = anedvd_mil::print(&anedvd_mil::builder::program(vec![e.b.finish()]));
        // parts of 4096, 4096 and 808 channels; weights 2^-4 and the factor 16/C
        assert_eq!(text.matches("= slice_by_size(").count(), 3);
        assert_eq!(text.matches("= conv(").count(), 3);
        assert!(text.contains("tensor<fp16, [1, 4096, 1, 1]> sum_w4096_0"));
        assert!(!text.contains("reduce_sum"));
    }
}
