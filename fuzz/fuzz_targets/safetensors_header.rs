//! Feeds arbitrary bytes through anedvd-weights' safetensors path; whatever
//! parses must hand out every tensor with bytes of the advertised size.
#![no_main]

use anedvd_weights::{SafetensorsSource, WeightSource};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(source) = SafetensorsSource::from_bytes(data.to_vec()) else {
        return;
    };
    let mut sum = 0usize;
    for info in source.tensors() {
        let t = source.tensor(&info.name).unwrap();
        assert_eq!(t.data.len() as u64, info.size_bytes);
        let elements = info.shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d)).unwrap();
        assert_eq!(info.dtype.tensor_bytes(&info.shape).unwrap(), info.size_bytes);
        sum = sum.wrapping_add(elements as usize);
        sum = sum.wrapping_add(t.data.iter().map(|&b| b as usize).sum::<usize>());
    }
    std::hint::black_box(sum);
});
