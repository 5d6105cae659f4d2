//! The ane-sim backend: the ANE lowering run by the MIL fp16 simulator (placeholder).
