//! Matvec throughput of the quantized kernels, in GB/s of weight bytes, one
//! thread, for every instruction set this CPU runs, then the f32 tile
//! products of tiled attention in GFLOP/s (`cargo bench -p anedvd-cpu
//! --bench kernels_matvec`; `BENCH_SECS` sets the time per case, default 1,
//! best of 5 rounds; `BENCH_FILTER` keeps cases whose label contains it).

use anedvd_base::GgmlType;
use anedvd_cpu::qkernels::{Kernels, QuantizedActivation};
use std::hint::black_box;

/// splitmix64.
fn rng(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Random quant bytes with every f16 scale field set to a small finite value.
fn weights(ty: GgmlType, rows: usize, cols: usize) -> Vec<u8> {
    let rb = ty.row_bytes(cols as u64).expect("whole blocks") as usize;
    let mut s = 1u64;
    let mut w: Vec<u8> = (0..rows * rb / 8)
        .flat_map(|_| rng(&mut s).to_le_bytes())
        .collect();
    w.resize(rows * rb, 0);
    let scales: &[usize] = match ty {
        GgmlType::Q8_0 | GgmlType::Q5_0 | GgmlType::Q4_0 | GgmlType::IQ4NL => &[0],
        GgmlType::Q4K => &[0, 2],
        GgmlType::Q6K => &[208],
        _ => &[],
    };
    let small = anedvd_quant::f32_to_f16(0.01).to_le_bytes();
    for blk in w.chunks_exact_mut(ty.block_bytes() as usize) {
        for &o in scales {
            blk[o..o + 2].copy_from_slice(&small);
        }
    }
    w
}

#[path = "common/read.rs"]
mod read;
use read::read_all;

#[path = "common/timing.rs"]
mod timing;
use timing::time;

fn main() {
    let secs: f64 = std::env::var("BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1.0);
    let filter = std::env::var("BENCH_FILTER").unwrap_or_default();
    // (type, rows, cols): Gemma 3 270M shapes.
    let cases = [
        (GgmlType::Q8_0, 262_144, 640), // token_embd / output (tied)
        (GgmlType::Q8_0, 2048, 640),    // ffn_gate / ffn_up
        (GgmlType::Q8_0, 640, 2048),    // ffn_down
        (GgmlType::Q5_0, 2048, 640),
        (GgmlType::Q4_0, 2048, 640),
        (GgmlType::IQ4NL, 2048, 640),
        (GgmlType::Q4K, 640, 2048),
        (GgmlType::Q6K, 640, 2048),
        // Qwen1.5-MoE-A2.7B (hidden 2048): an expert's gate/up; the same
        // bytes in 8x fewer, longer rows (the per-row cost); 0.15 MB that
        // stays in L2 (the kernel's compute rate); and 96 MB of rows, far
        // beyond the caches (what decode streams).
        (GgmlType::Q4K, 1408, 2048),
        (GgmlType::Q4K, 176, 16384),
        (GgmlType::Q4K, 128, 2048),
        (GgmlType::Q4K, 81_920, 2048),
        // Qwen's 151936-token output matrix at hidden 2048 (Q6_K in a
        // Q4_K_M file): 255 MB.
        (GgmlType::Q6K, 151_936, 2048),
        // 0.2 MB of Q6_K that stays in L2 (the kernel's compute rate).
        (GgmlType::Q6K, 128, 2048),
        // Llama-3.1-8B's ffn_down (48 MB, long rows) and output matrix
        // (431 MB), both Q6_K in its Q4_K_M file.
        (GgmlType::Q6K, 4096, 14_336),
        (GgmlType::Q6K, 128_256, 4096),
    ];
    println!("| type | rows x cols | MB | isa | us/matvec | GB/s |");
    println!("|---|---|---|---|---|---|");
    for (ty, rows, cols) in cases {
        let label = format!("{ty} {rows}x{cols}");
        if !label.contains(&filter) {
            continue;
        }
        let w = weights(ty, rows, cols);
        let x: Vec<f32> = (0..cols).map(|i| (i as f32 * 0.37).sin()).collect();
        let mut act = QuantizedActivation::new();
        act.quantize_for(ty, &x, cols).expect("activation");
        let mut out = vec![0.0f32; rows];
        if ty == GgmlType::Q8_0 || w.len() > 64 << 20 {
            // The memory system's ceiling: a plain read of the same bytes.
            let mut sink = 0u64;
            let per = time(secs, || sink ^= read_all(black_box(&w)));
            black_box(sink);
            println!(
                "| (read only) | {rows}x{cols} | {:.1} | u64 sum | {:.1} | {:.2} |",
                w.len() as f64 / 1e6,
                per * 1e6,
                w.len() as f64 / per / 1e9
            );
        }
        for k in Kernels::available() {
            let per = time(secs, || {
                k.matvec(ty, black_box(&w), 0..rows, cols, &act, &mut out)
                    .expect("matvec")
            });
            println!(
                "| {ty} | {rows}x{cols} | {:.1} | {} | {:.1} | {:.2} |",
                w.len() as f64 / 1e6,
                k.name(),
                per * 1e6,
                w.len() as f64 / per / 1e9
            );
            black_box(&out);
            if k.packs(ty) {
                let mut p = k.new_packed(ty, rows, cols).expect("packed");
                k.pack_rows(ty, &w, cols, p.panels_mut()).expect("pack");
                let per = time(secs, || {
                    k.packed_matmul(black_box(&p), 0..rows, &act, &mut out)
                        .expect("packed")
                });
                println!(
                    "| {ty} packed | {rows}x{cols} | {:.1} | {} | {:.1} | {:.2} |",
                    w.len() as f64 / 1e6,
                    k.name(),
                    per * 1e6,
                    w.len() as f64 / per / 1e9
                );
            }
        }
    }
    // Decode on 2 threads (half the rows each) of every matrix beyond the
    // last-level cache: what two decode threads stream from DRAM.
    println!();
    println!("| type | rows x cols | threads | isa | us/matvec | GB/s |");
    println!("|---|---|---|---|---|---|");
    for &(ty, rows, cols) in &cases {
        let bytes = ty.row_bytes(cols as u64).expect("whole blocks") as usize * rows;
        if bytes <= 64 << 20 || !format!("threads {ty} {rows}x{cols}").contains(&filter) {
            continue;
        }
        let w = weights(ty, rows, cols);
        let x: Vec<f32> = (0..cols).map(|i| (i as f32 * 0.37).sin()).collect();
        let mut act = QuantizedActivation::new();
        act.quantize_for(ty, &x, cols).expect("activation");
        let mut out = vec![0.0f32; rows];
        let half = rows / 2;
        read_on_two_threads("(read only)", &w, rows, cols, secs);
        for k in Kernels::available().into_iter().skip(1) {
            let per = time(secs, || {
                let (o1, o2) = out.split_at_mut(half);
                std::thread::scope(|s| {
                    s.spawn(|| k.matvec(ty, &w, 0..half, cols, &act, o1).expect("matvec"));
                    s.spawn(|| {
                        k.matvec(ty, &w, half..rows, cols, &act, o2)
                            .expect("matvec")
                    });
                });
            });
            println!(
                "| {ty} | {rows}x{cols} | 2 | {} | {:.1} | {:.2} |",
                k.name(),
                per * 1e6,
                w.len() as f64 / per / 1e9
            );
            if k.packs(ty) {
                let mut p = k.new_packed(ty, rows, cols).expect("packed");
                k.pack_rows(ty, &w, cols, p.panels_mut()).expect("pack");
                // The packed kernels' own ceiling: a plain read of the
                // packed bytes, which sit in huge pages (the file-layout
                // copy `w` above is a `Vec`, mostly in 4 KiB pages).
                read_on_two_threads("(read only, packed)", p.panels_mut(), rows, cols, secs);
                let per = time(secs, || {
                    let (o1, o2) = out.split_at_mut(half);
                    std::thread::scope(|s| {
                        s.spawn(|| k.packed_matmul(&p, 0..half, &act, o1).expect("packed"));
                        s.spawn(|| k.packed_matmul(&p, half..rows, &act, o2).expect("packed"));
                    });
                });
                println!(
                    "| {ty} packed | {rows}x{cols} | 2 | {} | {:.1} | {:.2} |",
                    k.name(),
                    per * 1e6,
                    w.len() as f64 / per / 1e9
                );
            }
        }
        black_box(&out);
    }

    gemm_f32_rows(&filter, secs);

    // Prefill: 8 activation rows per call (`BENCH_TOKENS` overrides); GB/s
    // counts the weight bytes once per token (so it compares with the matvec
    // figures above).
    let n_tok: usize = std::env::var("BENCH_TOKENS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(8);
    println!();
    println!("| type | rows x cols | tokens | isa | us/token | GB/s per token |");
    println!("|---|---|---|---|---|---|");
    for (ty, rows, cols) in &cases[1..] {
        let (ty, rows, cols) = (*ty, *rows, *cols);
        let label = format!("matmul {ty} {rows}x{cols}");
        if !label.contains(&filter) {
            continue;
        }
        let w = weights(ty, rows, cols);
        let x: Vec<f32> = (0..cols * n_tok).map(|i| (i as f32 * 0.37).sin()).collect();
        let mut act = QuantizedActivation::new();
        act.quantize_for(ty, &x, cols).expect("activation");
        let mut out = vec![0.0f32; rows * n_tok];
        for k in Kernels::available() {
            let per = time(secs, || {
                k.matmul(ty, black_box(&w), 0..rows, cols, &act, &mut out)
                    .expect("matmul")
            }) / n_tok as f64;
            println!(
                "| {ty} | {rows}x{cols} | {n_tok} | {} | {:.1} | {:.2} |",
                k.name(),
                per * 1e6,
                w.len() as f64 / per / 1e9
            );
            if k.packs(ty) {
                let mut p = k.new_packed(ty, rows, cols).expect("packed");
                k.pack_rows(ty, &w, cols, p.panels_mut()).expect("pack");
                let per = time(secs, || {
                    k.packed_matmul(&p, 0..rows, &act, &mut out)
                        .expect("packed")
                }) / n_tok as f64;
                println!(
                    "| {ty} packed | {rows}x{cols} | {n_tok} | {} | {:.1} | {:.2} |",
                    k.name(),
                    per * 1e6,
                    w.len() as f64 / per / 1e9
                );
            }
            black_box(&out);
        }
    }
}

/// Prints a "threads" row for a plain read of `bytes`, half on each of two
/// threads: the memory system's ceiling for the kernels' rows beside it.
fn read_on_two_threads(label: &str, bytes: &[u8], rows: usize, cols: usize, secs: f64) {
    let mut sinks = [0u64; 2];
    let per = time(secs, || {
        let (a, b) = bytes.split_at(bytes.len() / 2);
        let (sa, sb) = sinks.split_at_mut(1);
        std::thread::scope(|s| {
            s.spawn(|| sa[0] ^= read_all(black_box(a)));
            s.spawn(|| sb[0] ^= read_all(black_box(b)));
        });
    });
    black_box(sinks);
    println!(
        "| {label} | {rows}x{cols} | 2 | u64 sum | {:.1} | {:.2} |",
        per * 1e6,
        bytes.len() as f64 / per / 1e9
    );
}

/// GFLOP/s of `Kernels::gemm_f32` at the two products of one tile of tiled
/// attention (`attention/tiled.rs`: 64 keys, 128 query rows, head_dim
/// 256, as in Gemma 3's global layers), one thread, in cache.
fn gemm_f32_rows(filter: &str, secs: f64) {
    let (keys, rows, hd) = (64, 128, 256);
    // (label, m, k, n, a's strides, ldb, ldc)
    let cases = [
        ("S^T = K Q^T", keys, hd, rows, (hd, 1), rows, rows),
        ("O += P V", rows, keys, hd, (1, rows), hd, hd),
    ];
    println!();
    println!("| gemm_f32 | m x k x n | isa | us | GFLOP/s |");
    println!("|---|---|---|---|---|");
    for (label, m, k, n, (rs, cs), ldb, ldc) in cases {
        if !format!("gemm_f32 {label}").contains(filter) {
            continue;
        }
        let a: Vec<f32> = (0..(m - 1) * rs + (k - 1) * cs + 1)
            .map(|i| (i as f32 * 0.37).sin())
            .collect();
        let b: Vec<f32> = (0..k * ldb).map(|i| (i as f32 * 0.11).cos()).collect();
        let mut c = vec![0.0f32; m * ldc];
        for kern in Kernels::available() {
            let per = time(secs, || {
                kern.gemm_f32(&a, (rs, cs), black_box(&b), ldb, &mut c, ldc, (m, k, n))
                    .expect("gemm");
            });
            black_box(&c);
            println!(
                "| {label} | {m}x{k}x{n} | {} | {:.1} | {:.1} |",
                kern.name(),
                per * 1e6,
                2.0 * (m * k * n) as f64 / per / 1e9
            );
        }
    }
}
