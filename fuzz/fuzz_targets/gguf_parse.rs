//! Parses arbitrary bytes as GGUF; whatever parses must hand out in-bounds
//! tensor slices of the advertised size, and must survive a write/read round
//! trip through the writer unchanged.
#![no_main]

use anedvd_base::MetadataValue;
use anedvd_gguf::{GgufFile, GgufWriter};
use libfuzzer_sys::fuzz_target;

fn touch(v: &MetadataValue) -> usize {
    match v {
        MetadataValue::String(s) => s.len(),
        MetadataValue::Array(items) => items.iter().map(|x| touch(&x)).sum::<usize>() + 1,
        other => other.as_f64().map_or(1, |x| x.to_bits() as usize & 1),
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(file) = GgufFile::from_bytes(data.to_vec()) else {
        return;
    };
    let mut sum = 0usize;
    for (_, v) in file.metadata().iter() {
        sum = sum.wrapping_add(touch(v));
    }
    let mut writer = GgufWriter::new();
    writer.set_version(file.version()).unwrap();
    for (k, v) in file.metadata().iter() {
        writer.add_kv(k, v.clone()).unwrap();
    }
    for info in file.tensors() {
        let t = file.tensor(&info.name).unwrap();
        assert_eq!(t.data.len() as u64, info.size_bytes);
        let off = file.tensor_offset(&info.name).unwrap();
        assert!(off + info.size_bytes <= file.file_size());
        sum = sum.wrapping_add(t.data.iter().map(|&b| b as usize).sum::<usize>());
        writer
            .add_tensor(info.name.clone(), info.dtype, &info.shape, t.data.to_vec())
            .unwrap();
    }
    std::hint::black_box(sum);
    let again = GgufFile::from_bytes(writer.to_bytes().unwrap()).unwrap();
    assert_eq!(
        format!("{:?}", again.metadata().iter().collect::<Vec<_>>()),
        format!("{:?}", file.metadata().iter().collect::<Vec<_>>())
    );
    assert_eq!(again.tensors(), file.tensors());
    assert_eq!(again.alignment(), file.alignment());
    for info in file.tensors() {
        assert_eq!(
            again.tensor(&info.name).unwrap().data,
            file.tensor(&info.name).unwrap().data
        );
    }
});
