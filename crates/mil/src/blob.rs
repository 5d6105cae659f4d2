//! MIL blob storage v2: writer (coremltools-aligned or Espresso/maderix-compatible) and a hostile-input-safe reader.
//!
//! Layout (ane-spec.md §4, coremltools `StorageFormat.hpp`): a 64-byte file
//! header (`u32 count`, `u32 version = 2`, zeros), then per blob a 64-byte
//! metadata block (`u32 0xDEADBEEF`, `u32 dtype`, `u64 size`, `u64 data
//! offset`, `u64 padding bits`, zeros) immediately followed by the payload.
//! `BLOBFILE(offset = ...)` in MIL names the metadata block, not the payload.

use half::f16;

use crate::error::{Error, Result};

/// Size of the file header and of each metadata block.
pub const BLOCK: u64 = 64;
/// The metadata sentinel.
pub const SENTINEL: u32 = 0xDEAD_BEEF;
/// Storage format version written and accepted.
pub const VERSION: u32 = 2;
/// Most blobs a reader will enumerate in one file.
pub const MAX_BLOBS: usize = 1 << 16;

/// MIL blob dtype codes (ane-spec.md §4.2, coremltools `BlobDataType.hpp`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlobDType {
    /// 1
    Float16,
    /// 2
    Float32,
    /// 3
    UInt8,
    /// 4
    Int8,
    /// 5
    BFloat16,
    /// 6
    Int16,
    /// 7
    UInt16,
    /// 11 (packed, least significant bits first)
    UInt4,
    /// 13 (packed, least significant bits first)
    UInt6,
    /// 14
    Int32,
    /// 15
    UInt32,
    /// Any other code (sub-byte and fp8 types), kept verbatim.
    Other(u32),
}

impl BlobDType {
    /// The on-disk code.
    pub fn code(self) -> u32 {
        match self {
            BlobDType::Float16 => 1,
            BlobDType::Float32 => 2,
            BlobDType::UInt8 => 3,
            BlobDType::Int8 => 4,
            BlobDType::BFloat16 => 5,
            BlobDType::Int16 => 6,
            BlobDType::UInt16 => 7,
            BlobDType::UInt4 => 11,
            BlobDType::UInt6 => 13,
            BlobDType::Int32 => 14,
            BlobDType::UInt32 => 15,
            BlobDType::Other(c) => c,
        }
    }

    /// Decodes a code; `None` for codes outside 1..=17.
    pub fn from_code(c: u32) -> Option<Self> {
        Some(match c {
            1 => BlobDType::Float16,
            2 => BlobDType::Float32,
            3 => BlobDType::UInt8,
            4 => BlobDType::Int8,
            5 => BlobDType::BFloat16,
            6 => BlobDType::Int16,
            7 => BlobDType::UInt16,
            11 => BlobDType::UInt4,
            13 => BlobDType::UInt6,
            14 => BlobDType::Int32,
            15 => BlobDType::UInt32,
            8..=10 | 12 | 16 | 17 => BlobDType::Other(c),
            _ => return None,
        })
    }

    /// Bits of one element (sub-byte types packed); `None` for codes we
    /// keep verbatim.
    pub fn bits(self) -> Option<u32> {
        Some(match self {
            BlobDType::UInt4 => 4,
            BlobDType::UInt6 => 6,
            BlobDType::UInt8 | BlobDType::Int8 => 8,
            BlobDType::Float16 | BlobDType::BFloat16 | BlobDType::Int16 | BlobDType::UInt16 => 16,
            BlobDType::Float32 | BlobDType::Int32 | BlobDType::UInt32 => 32,
            BlobDType::Other(_) => return None,
        })
    }

    /// The blob dtype of a MIL dtype, if it has one.
    pub fn from_mil(d: crate::ir::DType) -> Option<Self> {
        use crate::ir::DType as D;
        Some(match d {
            D::Fp16 => BlobDType::Float16,
            D::Fp32 => BlobDType::Float32,
            D::UInt4 => BlobDType::UInt4,
            D::UInt6 => BlobDType::UInt6,
            D::UInt8 => BlobDType::UInt8,
            D::Int8 => BlobDType::Int8,
            D::Int16 => BlobDType::Int16,
            D::UInt16 => BlobDType::UInt16,
            D::Int32 => BlobDType::Int32,
            D::UInt32 => BlobDType::UInt32,
            _ => return None,
        })
    }
}

/// Where the writer puts chunks and which header/metadata fields it fills.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlobLayout {
    /// The coremltools form: true blob count, every metadata block 64-byte
    /// aligned (zero padding between), all fields as u64. Recommended.
    Aligned,
    /// The maderix/Orion/Espresso form (ane-spec.md §4.4): header count
    /// always 1, chunks back to back (chunk k at `64 + Σ(64 + size)`), only
    /// sentinel/dtype/size/offset filled (u32-wide). Reproduces Espresso's
    /// `ffn_blob_ref.bin` and `qkv_blob_ref.bin` byte for byte.
    EspressoCompat,
}

/// Builds a blob file in memory.
#[derive(Debug, Clone)]
pub struct BlobWriter {
    layout: BlobLayout,
    buf: Vec<u8>,
    count: u32,
}

impl BlobWriter {
    /// A writer with just the file header.
    pub fn new(layout: BlobLayout) -> Self {
        BlobWriter {
            layout,
            buf: vec![0u8; BLOCK as usize],
            count: 0,
        }
    }

    /// Appends a raw payload; returns the MIL `BLOBFILE` offset (its metadata block).
    pub fn add_raw(&mut self, dtype: BlobDType, payload: &[u8]) -> u64 {
        self.add_with_padding(dtype, payload, 0)
    }

    /// Appends int8 values; returns the MIL offset.
    pub fn add_i8(&mut self, values: &[i8]) -> u64 {
        let bytes: Vec<u8> = values.iter().map(|&v| v as u8).collect();
        self.add_raw(BlobDType::Int8, &bytes)
    }

    /// Appends unsigned `bits`-bit values (4, 6 or 8), packed least
    /// significant bit first as coremltools writes them, with the unused bits
    /// of the last byte recorded in the metadata; returns the MIL offset.
    /// `None` for another width or a value that does not fit.
    pub fn add_unsigned(&mut self, bits: u32, values: &[u8]) -> Option<u64> {
        let dtype = match bits {
            4 => BlobDType::UInt4,
            6 => BlobDType::UInt6,
            8 => return Some(self.add_raw(BlobDType::UInt8, values)),
            _ => return None,
        };
        if values.iter().any(|&v| u32::from(v) >> bits != 0) {
            return None;
        }
        let total = values.len() * bits as usize;
        let mut packed = vec![0u8; total.div_ceil(8)];
        for (i, &v) in values.iter().enumerate() {
            for b in 0..bits as usize {
                if v >> b & 1 == 1 {
                    let at = i * bits as usize + b;
                    packed[at / 8] |= 1 << (at % 8);
                }
            }
        }
        let padding = (packed.len() * 8 - total) as u64;
        Some(self.add_with_padding(dtype, &packed, padding))
    }

    fn add_with_padding(&mut self, dtype: BlobDType, payload: &[u8], padding_bits: u64) -> u64 {
        if self.layout == BlobLayout::Aligned {
            let aligned = self.buf.len().next_multiple_of(BLOCK as usize);
            self.buf.resize(aligned, 0);
        }
        let meta = self.buf.len() as u64;
        let data = meta + BLOCK;
        let mut block = [0u8; BLOCK as usize];
        block[0..4].copy_from_slice(&SENTINEL.to_le_bytes());
        block[4..8].copy_from_slice(&dtype.code().to_le_bytes());
        block[8..16].copy_from_slice(&(payload.len() as u64).to_le_bytes());
        block[16..24].copy_from_slice(&data.to_le_bytes());
        block[24..32].copy_from_slice(&padding_bits.to_le_bytes());
        self.buf.extend_from_slice(&block);
        self.buf.extend_from_slice(payload);
        self.count += 1;
        meta
    }

    /// Appends fp16 values (little-endian); returns the MIL offset.
    pub fn add_f16(&mut self, values: &[f16]) -> u64 {
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.add_raw(BlobDType::Float16, &bytes)
    }

    /// Appends f32 values rounded to fp16; returns the MIL offset.
    pub fn add_f32_as_f16(&mut self, values: &[f32]) -> u64 {
        let h: Vec<f16> = values.iter().map(|&v| f16::from_f32(v)).collect();
        self.add_f16(&h)
    }

    /// Finishes the file (no trailing padding after the last payload).
    pub fn finish(mut self) -> Vec<u8> {
        let count = match self.layout {
            BlobLayout::Aligned => self.count,
            BlobLayout::EspressoCompat => 1,
        };
        self.buf[0..4].copy_from_slice(&count.to_le_bytes());
        self.buf[4..8].copy_from_slice(&VERSION.to_le_bytes());
        self.buf
    }
}

/// One blob found in a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlobView<'a> {
    /// Offset of the metadata block (the MIL `BLOBFILE` offset).
    pub meta_offset: u64,
    /// Offset of the payload.
    pub data_offset: u64,
    /// Payload dtype.
    pub dtype: BlobDType,
    /// Payload bytes.
    pub data: &'a [u8],
    /// Unused bits at the end of a packed sub-byte payload.
    pub padding_bits: u64,
}

impl BlobView<'_> {
    /// The number of elements the payload holds.
    pub fn elements(&self) -> Option<u64> {
        let bits = u64::from(self.dtype.bits()?);
        // the padding is the unused part of the last byte only
        if self.padding_bits >= 8 {
            return None;
        }
        let total = (self.data.len() as u64 * 8).checked_sub(self.padding_bits)?;
        total.is_multiple_of(bits).then_some(total / bits)
    }

    /// Decodes an Int8 payload.
    pub fn to_i8(&self) -> Result<Vec<i8>> {
        if self.dtype != BlobDType::Int8 {
            return Err(Error::blob(
                self.meta_offset,
                format!("expected an int8 payload, found {:?}", self.dtype),
            ));
        }
        Ok(self.data.iter().map(|&b| b as i8).collect())
    }

    /// Decodes a UInt4 / UInt6 / UInt8 payload (packed least significant bit first).
    pub fn to_unsigned(&self) -> Result<Vec<u8>> {
        let bits = match self.dtype {
            BlobDType::UInt4 | BlobDType::UInt6 => self.dtype.bits().unwrap_or(8) as usize,
            BlobDType::UInt8 => return Ok(self.data.to_vec()),
            other => {
                return Err(Error::blob(
                    self.meta_offset,
                    format!("expected a uint4/uint6/uint8 payload, found {other:?}"),
                ))
            }
        };
        let n = self.elements().ok_or_else(|| {
            Error::blob(
                self.meta_offset,
                format!(
                    "{} bytes with {} padding bits is not a whole number of {bits}-bit values",
                    self.data.len(),
                    self.padding_bits
                ),
            )
        })? as usize;
        Ok((0..n)
            .map(|i| {
                (0..bits).fold(0u8, |v, b| {
                    let at = i * bits + b;
                    v | ((self.data[at / 8] >> (at % 8)) & 1) << b
                })
            })
            .collect())
    }

    /// Decodes a Float16 payload.
    pub fn to_f16(&self) -> Result<Vec<f16>> {
        if self.dtype != BlobDType::Float16 || !self.data.len().is_multiple_of(2) {
            return Err(Error::blob(
                self.meta_offset,
                format!(
                    "expected an fp16 payload, found {:?} of {} bytes",
                    self.dtype,
                    self.data.len()
                ),
            ));
        }
        Ok(self
            .data
            .chunks_exact(2)
            .map(|c| f16::from_le_bytes([c[0], c[1]]))
            .collect())
    }
}

/// A parsed blob file borrowing its bytes. Every offset is checked.
#[derive(Debug, Clone, Copy)]
pub struct BlobFile<'a> {
    bytes: &'a [u8],
    header_count: u32,
}

fn u32_at(b: &[u8], off: u64) -> Result<u32> {
    let s = slice(b, off, 4)?;
    Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

fn u64_at(b: &[u8], off: u64) -> Result<u64> {
    let s = slice(b, off, 8)?;
    let mut a = [0u8; 8];
    a.copy_from_slice(s);
    Ok(u64::from_le_bytes(a))
}

fn slice(b: &[u8], off: u64, len: u64) -> Result<&[u8]> {
    let end = off
        .checked_add(len)
        .ok_or_else(|| Error::blob(off, "offset overflow"))?;
    if end > b.len() as u64 {
        return Err(Error::blob(
            off,
            format!("range {off}..{end} past end of file ({} bytes)", b.len()),
        ));
    }
    // both fit in usize because they are <= b.len()
    Ok(&b[off as usize..end as usize])
}

impl<'a> BlobFile<'a> {
    /// Checks the header (length, version 2).
    pub fn parse(bytes: &'a [u8]) -> Result<Self> {
        if (bytes.len() as u64) < BLOCK {
            return Err(Error::blob(
                0,
                format!("file is {} bytes, header needs 64", bytes.len()),
            ));
        }
        let header_count = u32_at(bytes, 0)?;
        let version = u32_at(bytes, 4)?;
        if version != VERSION {
            return Err(Error::blob(
                4,
                format!("storage version {version}, expected 2"),
            ));
        }
        Ok(BlobFile {
            bytes,
            header_count,
        })
    }

    /// The `count` field of the header (1 in Espresso-compatible files).
    pub fn header_count(&self) -> u32 {
        self.header_count
    }

    /// Reads the blob whose metadata block is at `offset` (a MIL `BLOBFILE` offset).
    pub fn blob_at(&self, offset: u64) -> Result<BlobView<'a>> {
        if offset < BLOCK {
            return Err(Error::blob(offset, "offset points into the file header"));
        }
        slice(self.bytes, offset, BLOCK)?;
        let sentinel = u32_at(self.bytes, offset)?;
        if sentinel != SENTINEL {
            return Err(Error::blob(
                offset,
                format!("no metadata block here: sentinel {sentinel:#010x}, expected 0xdeadbeef"),
            ));
        }
        let code = u32_at(self.bytes, offset + 4)?;
        let dtype = BlobDType::from_code(code)
            .ok_or_else(|| Error::blob(offset + 4, format!("unknown blob dtype code {code}")))?;
        let size = u64_at(self.bytes, offset + 8)?;
        let data_offset = u64_at(self.bytes, offset + 16)?;
        if data_offset < offset + BLOCK {
            return Err(Error::blob(
                offset + 16,
                format!("payload offset {data_offset} overlaps its metadata block"),
            ));
        }
        let padding_bits = u64_at(self.bytes, offset + 24)?;
        let data = slice(self.bytes, data_offset, size)?;
        Ok(BlobView {
            meta_offset: offset,
            data_offset,
            dtype,
            data,
            padding_bits,
        })
    }

    /// Enumerates blobs from offset 64, following either layout: the next
    /// block is right after the payload if a sentinel is there, else at the
    /// next 64-byte boundary. Stops at end of file; errors on garbage.
    pub fn blobs(&self) -> Result<Vec<BlobView<'a>>> {
        let mut out = Vec::new();
        let mut pos = BLOCK;
        let len = self.bytes.len() as u64;
        while pos < len {
            if out.len() >= MAX_BLOBS {
                return Err(Error::blob(pos, format!("more than {MAX_BLOBS} blobs")));
            }
            let b = self.blob_at(pos)?;
            out.push(b);
            let end = b.data_offset + b.data.len() as u64;
            let aligned = end.next_multiple_of(BLOCK);
            pos = if u32_at(self.bytes, end).is_ok_and(|s| s == SENTINEL) {
                end
            } else if aligned >= len
                || self.bytes[end as usize..aligned as usize]
                    .iter()
                    .all(|&z| z == 0)
            {
                aligned
            } else {
                return Err(Error::blob(end, "non-zero bytes between blobs"));
            };
        }
        Ok(out)
    }
}
