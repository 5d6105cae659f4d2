//! Tool calls in model output: per-family formats. (Being written.)
