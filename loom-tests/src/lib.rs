//! Empty on purpose: the models are in `tests/`.
