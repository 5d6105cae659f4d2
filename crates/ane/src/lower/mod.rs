//! Decoder → MIL lowering: per-layer programs and weight blobs.
