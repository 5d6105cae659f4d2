//! MIL subgraphs shared by the kernels: 1×1-conv projections, the ANE-safe RMSNorm, gated FFNs.

use super::tensors::{Pack, WEIGHT_PATH};
use super::Result;
use anedvd_graph::Activation;
use anedvd_mil::builder::{FunctionBuilder, Var};
use anedvd_mil::ir::DType;

/// √(2/π), the GELU tanh-approximation constant.
const GELU_K: f64 = 0.797_884_560_802_865_4;
/// The cubic coefficient of the GELU tanh approximation.
const GELU_C: f64 = 0.044_715;
/// Added to the row maximum before taking its reciprocal, so all-zero
/// columns (decode fills one column of W) give zeros, not NaN.
const NORM_TINY: f64 = 1e-4;

/// A function under construction together with its weight file.
pub struct Emitter {
    /// The function.
    pub b: FunctionBuilder,
    /// Its weight file.
    pub pack: Pack,
    /// Activation width W.
    pub width: usize,
}

impl Emitter {
    /// An empty `main` function over activations of width `width`.
    pub fn new(width: usize) -> Self {
        Emitter {
            b: FunctionBuilder::new("main"),
            pack: Pack::new(),
            width,
        }
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
        let off = self.pack.matrix(w);
        let wv = self.b.const_blob(
            &format!("{name}_w"),
            DType::Fp16,
            &[out, cin, 1, 1],
            WEIGHT_PATH,
            off,
        )?;
        match bias {
            None => Ok(self.b.conv(name, x, &wv)?),
            Some(bv) => {
                let y = self.b.conv(&format!("{name}_nobias"), x, &wv)?;
                let c = self.channel_const(&format!("{name}_b"), bv)?;
                Ok(self.b.add(name, &y, &c)?)
            }
        }
    }

    /// RMSNorm over channels, `x / sqrt(mean(x²) + eps) · g`, written so no
    /// fp16 intermediate overflows: x is first scaled by `r = 1/(m + tiny)`
    /// with `m = (max relu(x) + max relu(-x))/2 ∈ [max|x|/2, max|x|]` (two
    /// `reduce_max`), so every square is ≤ 4 and the channel sum ≤ 4C; the identity
    /// `x·r / sqrt(mean((x·r)²) + eps·r²) = x / sqrt(mean(x²) + eps)` keeps
    /// the result exact. `pow(·, -0.5)` stands in for rsqrt (ane-spec.md §2.8 C).
    ///
    /// `scale` is s when `x` holds a scaled residual `x/s` (see
    /// [`super::LowerOptions::residual_scale`]): the result is the norm of
    /// the unscaled value, with eps entering as `eps·(r/s)²`.
    pub fn rms_norm(&mut self, p: &str, x: &Var, g: &[f32], eps: f32, scale: f32) -> Result<Var> {
        let c = x.shape().get(1).copied().unwrap_or(1);
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
        let ss = b.reduce_sum(&format!("{p}_ss"), &sq, &[1], true)?;
        let inv_c = b.fp16(&format!("{p}_inv_c"), 1.0 / c as f64)?;
        let ms = b.mul(&format!("{p}_ms"), &ss, &inv_c)?;
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
